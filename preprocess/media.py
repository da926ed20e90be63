"""Media limits (all configurable; defaults = Clef-omni hosted).

Knows nothing of the model, torch, HTTP or the filesystem. Sniffing and decoding live in the modality modules.
"""
from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(frozen=True)
class MediaLimits:
    max_images: int = 4
    max_image_bytes: int = 4 * MiB
    max_image_pixels: int = 16_000_000
    max_images_total_bytes: int = 8 * MiB
    max_audio_clips: int = 4
    max_audio_bytes: int = 8 * MiB
    max_audio_seconds: float = 300.0
    max_videos: int = 2
    max_video_bytes: int = 16 * MiB
    max_video_seconds: float = 60.0
    max_audio_video_total_bytes: int = 16 * MiB
