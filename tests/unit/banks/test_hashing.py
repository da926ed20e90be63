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


def test_a_phone_sized_photo_is_hashed_at_512x512_as_metas_reference_hasher_does():
    """A 4032x3024 JPEG stored sideways (EXIF orientation 6, as phones write portraits): hashed upright at 512x512
    (nearest neighbour), not at its 12 megapixels — whose PDQ blur alone costs about half a second here — and still
    within a few bits of the full-size hash and of its own smaller re-upload."""
    rng = np.random.default_rng(7)
    small = Image.open(ROOT / "examples" / "inspection" / "unit.png").convert("RGB")
    big = small.resize((4032, 3024), Image.Resampling.BICUBIC)
    noisy = np.clip(np.asarray(big).astype(np.int16) + rng.integers(-6, 7, (3024, 4032, 3)), 0, 255).astype(np.uint8)
    exif = Image.Exif()
    exif[EXIF_ORIENTATION] = 6
    data = encoded(Image.fromarray(noisy), "JPEG", quality=90, exif=exif)
    upright = np.asarray(Image.open(io.BytesIO(data)).transpose(Image.Transpose.ROTATE_270).convert("RGB"))
    assert upright.shape == (4032, 3024, 3)
    at_512 = pdq_of_pixels(np.asarray(Image.fromarray(upright).resize((512, 512), Image.Resampling.NEAREST)))
    full_size = pdq_of_pixels(upright)
    assert at_512.hex != full_size.hex                       # the two ways differ: this test tells them apart
    hashed = pdq_of_image(MediaItem("images", 0, data))
    assert hashed == at_512
    assert distance(hashed.hex, full_size.hex) <= 16
    reupload = encoded(Image.fromarray(upright).resize((1512, 2016), Image.Resampling.LANCZOS), "JPEG", quality=70)
    assert distance(pdq_of_image(MediaItem("images", 0, reupload)).hex, hashed.hex) <= 16


@pytest.mark.parametrize(("size", "resized"), [((512, 400), False), ((600, 300), True), ((300, 513), True)])
def test_only_a_photo_larger_than_512_on_either_side_is_resized_and_then_to_512x512(size, resized):
    rng = np.random.default_rng(sum(size))
    pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    expected = Image.fromarray(pixels).resize((512, 512), Image.Resampling.NEAREST) if resized else pixels
    assert pdq_of_image(MediaItem("images", 0, encoded(Image.fromarray(pixels), "PNG"))) == \
        pdq_of_pixels(np.asarray(expected))
