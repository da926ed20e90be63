"""Typed media errors. Every error carries the `MediaItem` it is about and says what broke (and which limit) in words
a caller understands; what the decoding library said (errno numbers, function and class names, reprs) is kept apart
in `raw`, for the server log only.

A request with several bad items raises `MediaErrors` (every item's own error, in prompt order), so that the caller
learns of each bad file in one answer; with one bad item, that item's error alone (`raise_media_errors`).

Knows nothing of HTTP: the status codes live in `api/http/errors.py` (415 unsupported, 413 too large, 422 corrupt).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from preprocess.item import MediaItem

# What `__reduce__` returns for an error: `rebuild_error` and its arguments.
Reduction = tuple[Callable[..., BaseException], tuple[type[BaseException], tuple[Any, ...], dict[str, Any]]]


def rebuild_error(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    """Unpickle an error whole, whatever its constructor takes (errors cross process boundaries in a cluster:
    `Exception`'s own pickling calls `cls(*args)`, which breaks for constructors with other parameters)."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class MediaError(Exception):
    """Base class: a media item the caller sent cannot be used. `detail` is the message without the item's name."""

    type = "media_error"

    def __init__(self, item: MediaItem, msg: str, raw: str | None = None):
        self.item = item
        self.detail = msg
        self.raw = raw          # the library's own words (errno, class names): for the server log, never the caller
        super().__init__(f"{item.label}: {self.message}")

    def __reduce__(self) -> Reduction:
        """Pickled whole, without the item's bytes (the message and the table need only its name and origin)."""
        state = {**self.__dict__, "item": dataclasses.replace(self.item, data=b"")}
        return rebuild_error, (type(self), self.args, state)

    @property
    def label(self) -> str:
        return self.item.label

    @property
    def message(self) -> str:
        """The detail, and how the caller sent the item when that was not as `slot[index]`."""
        return self.detail + (f" (sent as {self.item.origin})" if self.item.origin else "")


class UnsupportedMedia(MediaError):
    """Content is not a format we accept, or does not match the slot it was sent in (an mp4 in `images`)."""

    type = "unsupported_media"


class MediaTooLarge(MediaError):
    """Bytes, pixels, duration or item count over a configured limit."""

    type = "media_too_large"


class CorruptMedia(MediaError):
    """The bytes claim a supported format but cannot be decoded (truncated, lying header, no frames...)."""

    type = "corrupt_media"


class MediaErrors(MediaError):
    """Two or more media items of one request cannot be used: `errors` holds each item's own typed error, in the
    order the items were checked. A `MediaError` itself (so every `except MediaError` still catches it); its `item`
    and `detail` are the first error's, its text names every item."""

    def __init__(self, errors: Sequence[MediaError]):
        self.errors = tuple(errors)
        first = self.errors[0]
        raws = [f"{error.label}: {error.raw}" for error in self.errors if error.raw]
        super().__init__(first.item, first.detail, "; ".join(raws) or None)
        self.args = ("; ".join(str(error) for error in self.errors),)


def raise_media_errors(errors: Sequence[MediaError]) -> None:
    """Nothing for none; one bad item's own error alone; `MediaErrors` for two or more."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise MediaErrors(errors)
