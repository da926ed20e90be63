"""Typed media errors. Every error names the item (`videos[1]`) and, where one applies, the limit it broke.

Knows nothing of HTTP: the status codes live in `api/errors.py` (415 unsupported, 413 too large, 422 corrupt).
"""
from __future__ import annotations


class MediaError(Exception):
    """Base class: a media item the caller sent cannot be used."""

    type = "media_error"

    def __init__(self, label: str, msg: str):
        self.label = label  # e.g. "images[0]", "videos[1]"
        self.detail = msg
        super().__init__(f"{label}: {msg}")


class UnsupportedMedia(MediaError):
    """Content is not a format we accept, or does not match the slot it was sent in (an mp4 in `images`)."""

    type = "unsupported_media"


class MediaTooLarge(MediaError):
    """Bytes, pixels, duration or item count over a configured limit."""

    type = "media_too_large"


class CorruptMedia(MediaError):
    """The bytes claim a supported format but cannot be decoded (truncated, lying header, no frames...)."""

    type = "corrupt_media"
