"""`media_item(slot, data, index=0)`: a MediaItem for tests that call the decoders directly."""
from __future__ import annotations

from preprocess.item import MediaItem


def media_item(slot: str, data: bytes, index: int = 0) -> MediaItem:
    return MediaItem(slot, index, data)
