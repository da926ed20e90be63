"""One media item -> its decoded arrays, by the slot it was sent in.

The request-level checks (`preprocess.media.check_request`) come first, once per request; then `decode_item` per item
(each raises its own typed error carrying the item). The engine (`omni.model.media.MediaEncoder`) decodes the items
side by side and reports the bad ones together (`preprocess.errors.raise_media_errors`).

Knows nothing of the model, torch, HTTP or the filesystem; does not import `omni`.
"""
from __future__ import annotations

from preprocess.audio import DecodedAudio, decode_audio
from preprocess.image import DecodedImage, decode_image
from preprocess.item import MediaItem
from preprocess.media import MediaLimits
from preprocess.video import decode_video
from preprocess.video_frames import REFERENCE_FRAMES, DecodedVideo, VideoFramePolicy


def decode_item(item: MediaItem, limits: MediaLimits = MediaLimits(), policy: VideoFramePolicy = REFERENCE_FRAMES,
                threads: int = 1) -> DecodedImage | DecodedAudio | DecodedVideo:
    """Sniff, limit-check and decode one item by the slot it was sent in (a video with `threads` FFmpeg threads)."""
    if item.slot == "images":
        return decode_image(item, limits)
    if item.slot == "audio":
        return decode_audio(item, limits)
    return decode_video(item, limits, policy, threads)
