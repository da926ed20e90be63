"""One request's media items -> decoded arrays: the request-level checks, then each item by its slot.

`decode_media` is the sequential convenience; an engine that decodes items in a thread pool calls
`check_request` once, then `decode_item` per item (each raises its own typed error carrying the item) and reports
the bad ones together (`preprocess.errors.raise_media_errors`).

Knows nothing of the model, torch, HTTP or the filesystem; does not import `omni`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from preprocess.audio import DecodedAudio, decode_audio
from preprocess.errors import MediaError, raise_media_errors
from preprocess.image import DecodedImage, decode_image
from preprocess.item import MediaItem
from preprocess.media import MediaLimits, check_request
from preprocess.video import DecodedVideo, VideoFramePolicy, decode_video

Decoded = TypeVar("Decoded", DecodedImage, DecodedAudio, DecodedVideo)


@dataclass(frozen=True)
class DecodedMedia:
    images: tuple[DecodedImage, ...] = ()
    audio: tuple[DecodedAudio, ...] = ()
    videos: tuple[DecodedVideo, ...] = ()


def decode_item(item: MediaItem, limits: MediaLimits = MediaLimits(), policy: VideoFramePolicy = VideoFramePolicy(),
                threads: int = 1) -> DecodedImage | DecodedAudio | DecodedVideo:
    """Sniff, limit-check and decode one item by the slot it was sent in (a video with `threads` FFmpeg threads)."""
    if item.slot == "images":
        return decode_image(item, limits)
    if item.slot == "audio":
        return decode_audio(item, limits)
    return decode_video(item, limits, policy, threads)


def decode_media(items: Sequence[MediaItem], limits: MediaLimits = MediaLimits(),
                 policy: VideoFramePolicy = VideoFramePolicy()) -> DecodedMedia:
    """All items of a request, in order; a bad item raises its typed `MediaError`, several bad items `MediaErrors`
    (every item is tried, so that one answer names them all)."""
    check_request(items, limits)
    failed: list[MediaError] = []
    images = _each(items, "images", lambda item: decode_image(item, limits), failed)
    audio = _each(items, "audio", lambda item: decode_audio(item, limits), failed)
    videos = _each(items, "videos", lambda item: decode_video(item, limits, policy), failed)
    raise_media_errors(failed)
    return DecodedMedia(images, audio, videos)


def _each(items: Sequence[MediaItem], slot: str, decode: Callable[[MediaItem], Decoded],
          failed: list[MediaError]) -> tuple[Decoded, ...]:
    """The slot's items decoded, in order; a bad one is added to `failed` and left out."""
    out = []
    for item in items:
        if item.slot == slot:
            try:
                out.append(decode(item))
            except MediaError as error:
                failed.append(error)
    return tuple(out)
