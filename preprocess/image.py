"""Image bytes -> one upright RGB uint8 array at the source resolution, with the limits checked before decoding.

Steps: sniff (PNG, JPEG, WebP, GIF first frame, BMP) -> open with PIL restricted to that one format -> check the
header's pixel count and aspect ratio -> decode -> apply the EXIF orientation -> convert to RGB: CMYK, palette,
grayscale, 16-bit and alpha modes all end as RGB; alpha is composited on white (as qwen-omni-utils does;
the Clef reference's plain `convert("RGB")` would drop alpha and show whatever colour hides under it).
16-bit samples are scaled to 8 bits (PIL's `convert("RGB")` would clip them to white).

Decompression bombs: our own `max_image_pixels` is checked on the header size before `load()`. We never change
`PIL.Image.MAX_IMAGE_PIXELS` (a process-wide global, racy between request threads); PIL's own bomb guard
stays as a backstop and is reported as `MediaTooLarge` too.

Resizing to the model's size is NOT done here: `preprocess.processor` hands these arrays to the checkpoint's
image processor. The one resize here is `square_px`, a perceptual hash's fixed input (PDQ's 512x512), never the
model's. Knows nothing of the model, torch, HTTP or the filesystem.
"""
from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

from preprocess.errors import CorruptMedia, MediaTooLarge, UnsupportedMedia
from preprocess.item import MediaItem
from preprocess.media import MediaLimits
from preprocess.sniff import sniff_for_slot

_PIL_FORMATS = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP", "gif": "GIF", "bmp": "BMP"}
ORIENTATION_TAG = 0x0112  # EXIF Orientation
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError, KeyError, ZeroDivisionError)


@dataclass(frozen=True)
class DecodedImage:
    pixels: np.ndarray  # (H, W, 3) uint8 RGB, upright
    container: str  # "png", "jpeg", ...
    orientation: int = 1  # the EXIF orientation that was applied to make it upright (1: none)

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])


def _open(data: bytes, container: str, item: MediaItem, limits: MediaLimits) -> Image.Image:
    try:
        # No warnings.catch_warnings() here: it swaps process-wide state too. PIL may warn for 1x-2x its own
        # limit (ours is lower and refuses right after); a warning escalated to an error is caught below.
        return Image.open(io.BytesIO(data), formats=[_PIL_FORMATS[container]])
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise MediaTooLarge(item, f"the header claims more pixels than max_image_pixels={limits.max_image_pixels} "
                                  "(a decompression bomb)", raw=str(exc)) from None
    except _DECODE_ERRORS as exc:
        raise CorruptMedia(item, f"the {container} header cannot be read: the file is damaged or truncated",
                           raw=f"{type(exc).__name__}: {exc}") from None


def _check_header(image: Image.Image, item: MediaItem, limits: MediaLimits) -> None:
    width, height = image.size
    if width < 1 or height < 1:
        raise CorruptMedia(item, f"image header claims {width}x{height} pixels")
    if width * height > limits.max_image_pixels:
        raise MediaTooLarge(item, f"{width}x{height} = {width * height} pixels over "
                                   f"max_image_pixels={limits.max_image_pixels}")
    ratio = max(width, height) / min(width, height)
    if ratio > limits.max_image_aspect_ratio:
        raise UnsupportedMedia(item, f"aspect ratio {ratio:.0f}:1 over max_image_aspect_ratio="
                                      f"{limits.max_image_aspect_ratio:g}")


def _squared(image: Image.Image, square_px: int | None) -> Image.Image:
    """The image at square_px x square_px (nearest neighbour) when larger on either side, keeping its EXIF and palette
    transparency (`info`), else itself."""
    if square_px is None or max(image.size) <= square_px:
        return image
    resized = image.resize((square_px, square_px), Image.Resampling.NEAREST)
    resized.info = dict(image.info)
    return resized


def _orientation(image: Image.Image) -> int:
    """The EXIF orientation tag (1-8), 1 when absent or unreadable."""
    try:
        value = image.getexif().get(ORIENTATION_TAG, 1)
    except _DECODE_ERRORS:
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _upright(image: Image.Image) -> tuple[Image.Image, int]:
    """The image turned upright by its EXIF orientation, and the orientation applied (1: none)."""
    orientation = _orientation(image)
    try:
        return ImageOps.exif_transpose(image), orientation
    except _DECODE_ERRORS:
        return image, 1  # unreadable EXIF: the pixels are fine, keep the stored orientation


def _scale_16bit(image: Image.Image) -> Image.Image:
    values = np.asarray(image, dtype=np.float64)
    return Image.fromarray(np.clip(np.round(values / 257.0), 0, 255).astype(np.uint8), mode="L")


def to_rgb(image: Image.Image) -> Image.Image:
    """Any PIL mode -> RGB; alpha (explicit or palette transparency) composited on white."""
    if image.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        image = _scale_16bit(image)
    elif image.mode == "F":
        image = Image.fromarray(np.clip(np.asarray(image), 0, 255).astype(np.uint8), mode="L")
    if image.mode == "P" and "transparency" in image.info or image.mode in ("PA", "LA", "La", "RGBa"):
        image = image.convert("RGBA")
    if image.mode == "RGBA":
        background = Image.new("RGBA", image.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, image).convert("RGB")
    return image.convert("RGB")


def decode_image(item: MediaItem, limits: MediaLimits = MediaLimits(), square_px: int | None = None
                 ) -> DecodedImage:
    """Image bytes -> upright RGB uint8 pixels; typed `MediaError` (carrying `item`) on any bad input.

    `square_px` (a perceptual hash's input, never the model's): an image larger than that on either side comes out
    resized to square_px x square_px by nearest neighbour — done on the decoded image before it is turned upright and
    converted (the same pixels as after, since both are per-pixel or exact reorderings, at a fraction of the cost)."""
    data = item.data
    container = sniff_for_slot(item).container
    image = _open(data, container, item, limits)
    with image:
        _check_header(image, item, limits)
        try:
            image.seek(0)  # GIF / animated WebP: the first frame only
            image.load()
            upright, orientation = _upright(_squared(image, square_px))
            rgb = to_rgb(upright)
            pixels = np.asarray(rgb, dtype=np.uint8)
        except Image.DecompressionBombError:
            raise MediaTooLarge(item, f"decompression bomb, over max_image_pixels={limits.max_image_pixels}"
                                ) from None
        except _DECODE_ERRORS as exc:
            raise CorruptMedia(item, f"the {container} image cannot be decoded: the file is damaged or truncated",
                               raw=f"{type(exc).__name__}: {exc}") from None
    return DecodedImage(pixels=np.ascontiguousarray(pixels), container=container, orientation=orientation)
