"""What a photo is looked up by: its PDQ hash survives what a re-upload does to it (JPEG at quality 60, half the size,
stored sideways with an EXIF orientation) within the banks' default threshold, and a different photo is far away;
a photo that cannot be decoded is the request's own typed error."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from omni.banks.entries import DEFAULT_PDQ_THRESHOLD
from preprocess.errors import MediaError
from preprocess.hashes import pdq_of_image, pdq_of_pixels, sha256_of
from preprocess.item import MediaItem

ROOT = Path(__file__).resolve().parents[3]
EXIF_ORIENTATION = 0x0112


def encoded(image: Image.Image, fmt: str, **kwargs) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **kwargs)
    return buffer.getvalue()


def distance(a: str, b: str) -> int:
    return int(np.unpackbits(np.frombuffer(bytes.fromhex(a), np.uint8) ^ np.frombuffer(bytes.fromhex(b), np.uint8)
                             ).sum())


def test_a_reuploaded_photo_stays_within_the_threshold_and_another_photo_does_not():
    original = (ROOT / "examples" / "inspection" / "unit.png").read_bytes()
    image = Image.open(io.BytesIO(original)).convert("RGB")
    base = pdq_of_image(MediaItem("images", 0, original))
    assert base.quality >= 50 and len(base.hex) == 64
    half = image.resize((image.width // 2, image.height // 2), Image.Resampling.LANCZOS)
    exif = Image.Exif()
    exif[EXIF_ORIENTATION] = 6                         # stored turned; upright = rotate 90 degrees clockwise
    sideways = encoded(image.transpose(Image.Transpose.ROTATE_90), "JPEG", quality=90, exif=exif)
    copies = {"jpeg q60": encoded(image, "JPEG", quality=60), "half size": encoded(half, "PNG"),
              "exif-rotated": sideways}
    for what, data in copies.items():
        assert distance(base.hex, pdq_of_image(MediaItem("images", 0, data)).hex) <= DEFAULT_PDQ_THRESHOLD, what
    rng = np.random.default_rng(0)
    other = pdq_of_pixels(rng.integers(0, 256, (256, 256, 3), dtype=np.uint8))
    assert distance(base.hex, other.hex) > 80
    # what the EXIF orientation does: without it the sideways copy is a different picture
    raw_sideways = pdq_of_pixels(np.asarray(image.transpose(Image.Transpose.ROTATE_90)))
    assert distance(base.hex, raw_sideways.hex) > DEFAULT_PDQ_THRESHOLD


def test_a_photo_that_cannot_be_decoded_is_a_media_error_and_sha256_is_of_the_bytes():
    with pytest.raises(MediaError):
        pdq_of_image(MediaItem("images", 0, b"\x89PNG\r\n\x1a\n not really"))
    assert sha256_of(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
