"""One request's media items -> decoded arrays: the request-level checks, then each item by its slot.

`decode_media` is the sequential convenience; an engine that decodes items in a thread pool calls
`check_request` once, then `decode_item` per item (each raises its own typed error carrying the item).

Knows nothing of the model, torch, HTTP or the filesystem; does not import `omni`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from preprocess.audio import DecodedAudio, decode_audio
from preprocess.image import DecodedImage, decode_image
from preprocess.item import MediaItem
from preprocess.media import MediaLimits, check_request
from preprocess.video import DecodedVideo, VideoFramePolicy, decode_video


@dataclass(frozen=True)
class DecodedMedia:
    images: tuple[DecodedImage, ...] = ()
    audio: tuple[DecodedAudio, ...] = ()
    videos: tuple[DecodedVideo, ...] = ()


def decode_item(item: MediaItem, limits: MediaLimits = MediaLimits(),
                policy: VideoFramePolicy = VideoFramePolicy()) -> DecodedImage | DecodedAudio | DecodedVideo:
    """Sniff, limit-check and decode one item by the slot it was sent in."""
    if item.slot == "images":
        return decode_image(item, limits)
    if item.slot == "audio":
        return decode_audio(item, limits)
    return decode_video(item, limits, policy)


def decode_media(items: Sequence[MediaItem], limits: MediaLimits = MediaLimits(),
                 policy: VideoFramePolicy = VideoFramePolicy()) -> DecodedMedia:
    """All items of a request, in order; the first bad item raises (typed `MediaError` carrying it)."""
    check_request(items, limits)
    images = tuple(decode_image(item, limits) for item in items if item.slot == "images")
    audio = tuple(decode_audio(item, limits) for item in items if item.slot == "audio")
    videos = tuple(decode_video(item, limits, policy) for item in items if item.slot == "videos")
    return DecodedMedia(images, audio, videos)
