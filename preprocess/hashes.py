"""What a medium is looked up by: the PDQ hash of a photo (Meta's perceptual hash, `pdqhash`) and the sha256 of any
medium's bytes.

PDQ is computed on the photo as the model sees it — decoded, turned upright by its EXIF orientation, RGB
(`preprocess.image.decode_image`) — so a rotated copy of a banked photo hashes as the photo does. A photo that
cannot be decoded raises the same typed `MediaError` the request would (the caller counts the miss; the model's
answer still goes out). `quality` is PDQ's own 0..100 figure: below 50 the hash says little (a flat image).
Knows nothing of banks, indexes, `omni`, HTTP or the engine.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pdqhash

from preprocess.image import decode_image
from preprocess.item import MediaItem
from preprocess.media import MediaLimits


@dataclass(frozen=True)
class PdqHash:
    hex: str           # 64 hex digits: bit i of the hash is bit (i % 8) of byte i // 8
    quality: int


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pdq_of_pixels(pixels: np.ndarray) -> PdqHash:
    bits, quality = pdqhash.compute(np.ascontiguousarray(pixels, dtype=np.uint8))
    packed = np.packbits(np.asarray(bits, dtype=np.uint8), bitorder="little")
    return PdqHash(hex=packed.tobytes().hex(), quality=int(quality))


def pdq_of_image(item: MediaItem, limits: MediaLimits = MediaLimits()) -> PdqHash:
    """Decoded under `limits` (bytes, pixels), as the request's own decoding would be."""
    return pdq_of_pixels(decode_image(item, limits).pixels)
