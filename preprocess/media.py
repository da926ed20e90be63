"""Media limits (all configurable; defaults = Clef-omni hosted) and the request-level checks on them.

`check_request` runs on sizes alone, before anything is sniffed or decoded: item counts per slot, bytes per
item, bytes per group (images together; audio and videos together). Every refusal is a `MediaTooLarge` that
names the first item that broke the limit (`images[4]`, `videos[1]`) and the limit with its number; the items over
their own byte limit are refused together (`MediaErrors`, one error each), so a caller hears of all of them at once.

Knows nothing of the model, torch, HTTP or the filesystem. Sniffing and decoding live in the modality modules
(`sniff`, `image`, `audio`, `video`); they read the per-item pixel and duration limits from `MediaLimits`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from preprocess.errors import MediaError, MediaTooLarge, raise_media_errors
from preprocess.item import SLOTS, MediaItem

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
    # --- added by preprocess (not in the Clef docs; guards against decoder bombs) ---
    # smart_resize refuses ratios over 200; we refuse them first with a typed error.
    max_image_aspect_ratio: float = 200.0
    # Coded frame size of a video stream, checked on the header before any frame is decoded.
    max_video_frame_pixels: int = 16_000_000
    # Decoded (not kept) frames are bounded by max_video_seconds * this rate: a tiny file of skip-frames
    # cannot make the decoder run for minutes.
    max_video_source_fps: float = 240.0
    # How far past a duration limit decoding may go before the item is refused (headers that lie, rounding).
    decode_slack_seconds: float = 1.0

    def __post_init__(self) -> None:
        """The one check of these values: every limit is positive (the slack may be 0)."""
        for name, value in vars(self).items():
            if not (value >= 0 if name == "decode_slack_seconds" else value > 0):
                raise ValueError(f"media_{name} must be {'>= 0' if name == 'decode_slack_seconds' else '> 0'}, "
                                 f"got {value}")


def _check_count(items: Sequence[MediaItem], slot: str, limit: int, limit_name: str) -> None:
    if len(items) > limit:
        raise MediaTooLarge(items[limit], f"{len(items)} items in `{slot}` over {limit_name}={limit}")


def _items_over(items: Sequence[MediaItem], limit: int, limit_name: str) -> list[MediaError]:
    return [MediaTooLarge(item, f"{item.size_bytes} bytes over {limit_name}={limit}")
            for item in items if item.size_bytes > limit]


def _check_total_bytes(items: Sequence[MediaItem], limit: int, limit_name: str) -> None:
    total = 0
    for item in items:
        total += item.size_bytes
        if total > limit:
            what = " + ".join(dict.fromkeys(i.slot for i in items))
            raise MediaTooLarge(item, f"{what} reach {total} bytes together, over {limit_name}={limit}")


def check_request(items: Sequence[MediaItem], limits: MediaLimits = MediaLimits()) -> None:
    """Refuse a request's media on counts and sizes alone (items in prompt order: images, audio, videos).

    Order: counts, then bytes per item, then group totals; raises `MediaTooLarge` naming the first offender (every
    item over its own byte limit at once: `MediaErrors` when there are several).
    """
    by_slot = {slot: [item for item in items if item.slot == slot] for slot in SLOTS}
    _check_count(by_slot["images"], "images", limits.max_images, "max_images")
    _check_count(by_slot["audio"], "audio", limits.max_audio_clips, "max_audio_clips")
    _check_count(by_slot["videos"], "videos", limits.max_videos, "max_videos")
    raise_media_errors(_items_over(by_slot["images"], limits.max_image_bytes, "max_image_bytes")
                       + _items_over(by_slot["audio"], limits.max_audio_bytes, "max_audio_bytes")
                       + _items_over(by_slot["videos"], limits.max_video_bytes, "max_video_bytes"))
    _check_total_bytes(by_slot["images"], limits.max_images_total_bytes, "max_images_total_bytes")
    _check_total_bytes(by_slot["audio"] + by_slot["videos"], limits.max_audio_video_total_bytes,
                       "max_audio_video_total_bytes")
