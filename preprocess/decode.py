"""One request's media bytes -> decoded arrays: the request-level checks, then each item by its slot.

`decode_media` is the sequential convenience; an engine that decodes items in a thread pool calls
`check_request` once, then `decode_item` per item (each raises its own typed error naming the item).

Knows nothing of the model, torch, HTTP or the filesystem; does not import `omni`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from preprocess.audio import DecodedAudio, decode_audio
from preprocess.image import DecodedImage, decode_image
from preprocess.media import MediaLimits, check_request, item_label
from preprocess.video import DecodedVideo, VideoFramePolicy, decode_video


@dataclass(frozen=True)
class DecodedMedia:
    images: tuple[DecodedImage, ...] = ()
    audio: tuple[DecodedAudio, ...] = ()
    videos: tuple[DecodedVideo, ...] = ()


def decode_item(data: bytes, slot: str, label: str, limits: MediaLimits = MediaLimits(),
                policy: VideoFramePolicy = VideoFramePolicy()) -> DecodedImage | DecodedAudio | DecodedVideo:
    """Sniff, limit-check and decode one item sent in `slot` ("images" | "audio" | "videos")."""
    if slot == "images":
        return decode_image(data, label, limits)
    if slot == "audio":
        return decode_audio(data, label, limits)
    if slot == "videos":
        return decode_video(data, label, limits, policy)
    raise ValueError(f"unknown media slot {slot!r}")


def decode_media(images: Sequence[bytes] = (), audio: Sequence[bytes] = (), videos: Sequence[bytes] = (),
                 limits: MediaLimits = MediaLimits(), policy: VideoFramePolicy = VideoFramePolicy()) -> DecodedMedia:
    """All items of a request, in order; the first bad item raises (typed `MediaError` naming it)."""
    check_request(images, audio, videos, limits)
    return DecodedMedia(
        images=tuple(decode_image(data, item_label("images", i), limits) for i, data in enumerate(images)),
        audio=tuple(decode_audio(data, item_label("audio", i), limits) for i, data in enumerate(audio)),
        videos=tuple(decode_video(data, item_label("videos", i), limits, policy) for i, data in enumerate(videos)),
    )
