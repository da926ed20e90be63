"""What a medium is looked up by: the PDQ hash of a photo (Meta's perceptual hash, `pdqhash`), the vPDQ hash of a
video (Meta's video PDQ, `vpdq`: the PDQ hash of a frame a second) and the sha256 of any medium's bytes.

Hashes are written as ThreatExchange writes them, so bank files from elsewhere match: PDQ as 64 hex digits, bit 0 of
the hash the high bit of the first digit (what `vpdq`'s hex and Meta's `pdq-photo-hasher` print); a vPDQ feature as
vPDQ's hash-file line `FRAME,QUALITY,HEX,SECONDS`.

PDQ is computed on the photo as the model sees it — decoded, turned upright by its EXIF orientation, RGB
(`preprocess.image.decode_image`) — so a rotated copy of a banked photo hashes as the photo does; a photo larger than
512 pixels on either side is first resized to 512x512 by nearest neighbour (PIL), as Meta's reference hasher
(`pdq-photo-hasher`: DOWNSAMPLE_DIMS = 512 in ThreatExchange's pdq/cpp/io/pdqio.cpp) resizes it before PDQ's own
blur-and-decimate to 64x64, which at full size costs half a second for a 12-megapixel phone photo. vPDQ is computed by
the `vpdq` package itself (its own FFmpeg decoding of the stored frames, one a second) after the request's own header
limits are checked (`check_video_header`: frame size, claimed duration), so a video that could not be a request's
is not hashed. A medium that cannot be hashed raises the same typed `MediaError` the request would (the caller counts
the miss; the model's answer still goes out). `quality` is PDQ's own 0..100 figure: below 50 the hash says little (a
flat image or frame).
Knows nothing of banks, indexes, `omni`, HTTP, processes or the engine.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass

import numpy as np
import pdqhash

from preprocess.errors import CorruptMedia
from preprocess.image import decode_image
from preprocess.item import MediaItem
from preprocess.media import MediaLimits
from preprocess.video_header import check_video_header

VPDQ_SECONDS_PER_HASH = 1.0      # vPDQ's default: the frame at each whole second of the stream
PDQ_DOWNSAMPLE_PX = 512          # a photo larger on either side is hashed at 512x512 (Meta's reference hasher's step)


@dataclass(frozen=True)
class PdqHash:
    hex: str           # 64 hex digits, ThreatExchange's order: bit i of the hash is bit 7 - i % 8 of byte i // 8
    quality: int


@dataclass(frozen=True)
class VpdqFeature:
    """One hashed frame of a video, as vPDQ's hash file has it."""
    frame: int         # the frame's number in the stream
    quality: int       # PDQ's quality of the frame, 0..100
    hex: str           # the frame's PDQ hash (ThreatExchange's order)
    seconds: float     # the frame's time

    def line(self) -> str:
        return f"{self.frame},{self.quality},{self.hex},{self.seconds:.3f}"


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pdq_of_pixels(pixels: np.ndarray) -> PdqHash:
    bits, quality = pdqhash.compute(np.ascontiguousarray(pixels, dtype=np.uint8))
    packed = np.packbits(np.asarray(bits, dtype=np.uint8))
    return PdqHash(hex=packed.tobytes().hex(), quality=int(quality))


def pdq_of_image(item: MediaItem, limits: MediaLimits = MediaLimits()) -> PdqHash:
    """Decoded under `limits` (bytes, pixels), as the request's own decoding would be; resized to 512x512 first when
    larger on either side."""
    return pdq_of_pixels(decode_image(item, limits, square_px=PDQ_DOWNSAMPLE_PX).pixels)


def vpdq_available() -> bool:
    try:
        import vpdq  # noqa: F401
    except ImportError:
        return False
    return True


def vpdq_of_video(item: MediaItem, limits: MediaLimits = MediaLimits()) -> tuple[VpdqFeature, ...]:
    """The video's vPDQ features, frame order. `vpdq` reads a file: the bytes go to a private temporary file,
    removed after. ImportError when the `vpdq` package is not installed."""
    import vpdq

    check_video_header(item, limits)
    handle, path = tempfile.mkstemp(prefix="omni-vpdq-", suffix=".video")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(item.data)
        try:
            features = vpdq.computeHash(path, seconds_per_hash=VPDQ_SECONDS_PER_HASH, thread_count=1)
        except Exception as exc:  # noqa: BLE001  (vpdq raises a bare Exception("Fail to create VPDQ hash"))
            raise CorruptMedia(item, "the video cannot be decoded for its vPDQ hash: the file is damaged or "
                                     "truncated", raw=f"{type(exc).__name__}: {exc}") from None
    finally:
        os.unlink(path)
    return tuple(VpdqFeature(int(f.frame_number), int(f.quality), str(f.hex), float(f.timestamp))
                 for f in features)
