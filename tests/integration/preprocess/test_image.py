"""Image decoding (formats, modes, EXIF, limits) and equality with transformers' own image processor."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from fixtures import media as fm
from preprocess.errors import MediaTooLarge, UnsupportedMedia
from preprocess.image import decode_image
from preprocess.media import MediaLimits
from preprocess.processor import IMAGE_SIZE, encode_images
from preprocess.resize import smart_resize
from tests.media_items import media_item

pytestmark = pytest.mark.integration

COLOUR_MODES = [("PNG", "RGB"), ("PNG", "P"), ("JPEG", "RGB"), ("JPEG", "CMYK"), ("WEBP", "RGB"), ("GIF", "P"),
                ("BMP", "RGB"), ("BMP", "P")]
GREY_MODES = [("PNG", "L"), ("PNG", "I;16"), ("PNG", "1"), ("JPEG", "L"), ("BMP", "L")]


def close(colour, expected, tolerance=12):
    return all(abs(int(a) - int(b)) <= tolerance for a, b in zip(colour, expected, strict=True))


@pytest.mark.parametrize(("fmt", "mode"), COLOUR_MODES)
def test_colour_formats_decode_to_rgb(fmt, mode):
    image = decode_image(media_item("images", fm.image_bytes(fmt, mode, 96, 64)))
    assert image.pixels.shape == (64, 96, 3) and image.pixels.dtype == np.uint8
    corners = fm.corner_colours(image.pixels)
    assert close(corners["top_left"], fm.RED, 30) and close(corners["bottom_right"], fm.BLUE, 30)
    assert close(corners["top_right"], fm.GREY, 30)


@pytest.mark.parametrize(("fmt", "mode"), GREY_MODES)
def test_grey_formats_decode_to_rgb_with_equal_channels(fmt, mode):
    image = decode_image(media_item("images", fm.image_bytes(fmt, mode, 96, 64)))
    assert image.pixels.shape == (64, 96, 3)
    assert (image.pixels[..., 0] == image.pixels[..., 1]).all() and (image.pixels[..., 1] == image.pixels[..., 2]).all()
    expected_grey = np.asarray(Image.fromarray(fm.pattern(64, 96)).convert("L"), dtype=np.int16)
    if mode == "1":  # dithered black/white: only the mean survives
        assert abs(image.pixels[..., 0].mean() - expected_grey.mean()) < 25
    else:  # 16-bit is scaled (not clipped to white: PIL's convert("RGB") would give 255 almost everywhere)
        assert np.abs(image.pixels[..., 0].astype(np.int16) - expected_grey).max() <= (8 if fmt == "JPEG" else 1)


@pytest.mark.parametrize(("fmt", "mode"), [("PNG", "RGBA"), ("WEBP", "RGBA"), ("PNG", "LA")])
def test_alpha_is_composited_on_white(fmt, mode):
    pixels = decode_image(media_item("images", fm.image_bytes(fmt, mode, 96, 64))).pixels
    # left half opaque, right half alpha 128/255: grey 128 over white -> ~191; red block (left) stays red
    right = pixels[40:44, 70:74].reshape(-1, 3).mean(0)
    assert np.allclose(right, 128 * 128 / 255 + 255 * (1 - 128 / 255), atol=3)
    if mode == "RGBA":
        assert close(fm.corner_colours(pixels)["top_left"], fm.RED, 30)


def test_transparent_palette_gif_is_composited_on_white():
    image = Image.new("P", (32, 32), 0)
    image.putpalette([0, 0, 0] + [255, 0, 0] * 255)
    image.paste(1, (16, 0, 32, 32))
    buffer = io.BytesIO()
    image.save(buffer, format="GIF", transparency=0)
    pixels = decode_image(media_item("images", buffer.getvalue())).pixels
    assert tuple(pixels[5, 5]) == (255, 255, 255) and tuple(pixels[5, 25]) == (255, 0, 0)


def test_animated_gif_gives_its_first_frame():
    frames = [Image.fromarray(np.full((16, 16, 3), value, np.uint8)).convert("P") for value in (10, 200, 90)]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:], duration=100)
    pixels = decode_image(media_item("images", buffer.getvalue())).pixels
    assert abs(int(pixels.mean()) - 10) <= 2


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_exif_orientation_gives_upright_pixels(fmt, orientation):
    data = fm.image_bytes(fmt, "RGB", 96, 64, exif_orientation=orientation)
    stored = Image.open(io.BytesIO(data))
    assert stored.getexif().get(0x0112) == orientation
    pixels = decode_image(media_item("images", data)).pixels
    assert pixels.shape == (64, 96, 3)  # upright, even though 6 and 8 are stored 64 wide
    corners = fm.corner_colours(pixels)
    assert close(corners["top_left"], fm.RED, 30) and close(corners["bottom_right"], fm.BLUE, 30)


@pytest.mark.parametrize(("fmt", "mode"), [*COLOUR_MODES, *GREY_MODES, ("PNG", "RGBA"), ("PNG", "LA")])
@pytest.mark.parametrize("orientation", [None, 3, 6, 8])
def test_a_square_decode_equals_the_full_decode_resized_by_nearest_neighbour(fmt, mode, orientation):
    """`square_px` (the PDQ hash's input) resizes before the EXIF turn and the RGB conversion, for speed: the pixels
    must be exactly those of the full decode resized after (both steps are per-pixel or exact reorderings)."""
    data = fm.image_bytes(fmt, mode, 700, 530, exif_orientation=orientation)
    full = decode_image(media_item("images", data))
    expected = np.asarray(Image.fromarray(full.pixels).resize((512, 512), Image.Resampling.NEAREST))
    squared = decode_image(media_item("images", data), square_px=512)
    assert squared.pixels.shape == (512, 512, 3) and np.array_equal(squared.pixels, expected)
    assert squared.orientation == full.orientation and (fmt not in ("JPEG", "PNG", "WEBP") or
                                                        full.orientation == (orientation or 1))
    small = fm.image_bytes(fmt, mode, 96, 64, exif_orientation=orientation)
    assert np.array_equal(decode_image(media_item("images", small), square_px=512).pixels,
                          decode_image(media_item("images", small)).pixels)


def test_pixel_limit_checked_before_decoding_and_pil_global_untouched(monkeypatch):
    from PIL import ImageFile

    before = Image.MAX_IMAGE_PIXELS
    data = fm.image_bytes("PNG", "RGB", 40, 30)
    loads = []
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: loads.append(1))
    with pytest.raises(MediaTooLarge) as info:
        decode_image(media_item("images", data, 2), MediaLimits(max_image_pixels=1000))
    assert info.value.label == "images[2]" and "40x30 = 1200 pixels" in str(info.value)
    assert "max_image_pixels=1000" in str(info.value)
    assert loads == [] and before == Image.MAX_IMAGE_PIXELS


def test_16_megapixels_is_the_default_limit():
    big = fm.image_bytes("PNG", "L", 4096, 4000)  # 16.38 MP: the hosted API's first refusal
    with pytest.raises(MediaTooLarge) as info:
        decode_image(media_item("images", big, 1))
    assert "max_image_pixels=16000000" in str(info.value)


def test_extreme_aspect_ratio_is_refused():
    with pytest.raises(UnsupportedMedia) as info:
        decode_image(media_item("images", fm.image_bytes("PNG", "RGB", 404, 2)))
    assert "max_image_aspect_ratio=200" in str(info.value) and info.value.label == "images[0]"


def test_smart_resize_matches_transformers():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as hf_smart_resize

    rng = np.random.default_rng(0)
    for height, width in [(720, 1280), (64, 96), (1, 150), (4000, 3000), *rng.integers(1, 5000, (200, 2)).tolist()]:
        if max(height, width) / min(height, width) > 200:
            continue
        for low, high in [(65536, 1048576), (131072, 786432), (3136, 12845056)]:
            assert smart_resize(height, width, 32, low, high) == hf_smart_resize(height, width, 32, low, high)


@pytest.mark.parametrize(("fmt", "mode", "width", "height"), [("PNG", "RGB", 96, 64), ("JPEG", "CMYK", 300, 200),
                                                      ("PNG", "RGBA", 1280, 720), ("WEBP", "RGB", 1500, 1100)])
def test_tensors_equal_the_image_processor_on_the_same_image(image_processor, fmt, mode, width, height):
    data = fm.image_bytes(fmt, mode, width, height)
    ours, tokens = encode_images([decode_image(media_item("images", data))], image_processor)
    reference_input = Image.open(io.BytesIO(data))
    if mode == "RGBA":  # qwen-omni-utils' to_rgb: alpha over white
        white = Image.new("RGBA", reference_input.size, (255, 255, 255, 255))
        reference_input = Image.alpha_composite(white, reference_input.convert("RGBA"))
    reference = image_processor(images=[reference_input.convert("RGB")], size=IMAGE_SIZE, return_tensors="pt")
    assert ours["image_grid_thw"].tolist() == reference["image_grid_thw"].tolist()
    assert (ours["pixel_values"] - reference["pixel_values"]).abs().max().item() < 1e-5
    resized_h, resized_w = smart_resize(height, width, 32, 65536, 1048576)
    assert tokens == [(resized_h // 32) * (resized_w // 32)]
    assert 64 <= tokens[0] <= 1024


def test_720p_image_is_880_tokens(image_processor):
    _, tokens = encode_images([np.zeros((720, 1280, 3), np.uint8)], image_processor)
    assert tokens == [880]
