"""Masks for the occlusion check (`omni explain --occlude`): a photo, a recording or a state with one region blanked,
in the same family of format the model reads (the video's mask is `occlusion_video.py`).

- image: the EXIF orientation is applied first (evidence boxes are in the upright image's pixels), the box is
  filled with mid grey (128, 128, 128), the result saved as PNG (lossless: nothing but the box changes);
- audio: the samples of [start_s, end_s) are zeroed in every channel, the result written as 32-bit float WAV at the
  source's rate and channel count (what libsndfile reads: WAV, FLAC, OGG, MP3);
- state: the characters [start, end) of the state as the prompt renders it are replaced by as many spaces. A string
  state is blanked as is; a JSON state is blanked inside its compact, key-sorted rendering (where the evidence's
  spans point) and sent back as that blanked text, a string state.

Knows nothing of evidence, the engine, requests or HTTP: it takes bytes (or a state) and a region.
"""
from __future__ import annotations

import io
import math

import numpy as np
import soundfile
from PIL import Image, ImageOps

from omni.contract.json_values import JSONValue
from omni.model.prompt import render
from preprocess.errors import CorruptMedia, UnsupportedMedia
from preprocess.item import MediaItem

GREY = 128
_FILL: dict[str, int | tuple[int, ...]] = {"L": GREY, "LA": (GREY, 255), "RGB": (GREY, GREY, GREY),
                                          "RGBA": (GREY, GREY, GREY, 255)}
_IMAGE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError, KeyError, ZeroDivisionError)


def box_pixels(box: tuple[float, float, float, float], width: int, height: int) -> tuple[int, int, int, int]:
    """A box in pixel coordinates (floats, x1/y1 exclusive) -> the whole pixels it touches, inside the image."""
    x0, y0, x1, y1 = box
    left, top = max(0, math.floor(x0)), max(0, math.floor(y0))
    return left, top, min(width, max(left, math.ceil(x1))), min(height, max(top, math.ceil(y1)))


def upright_image(item: MediaItem) -> Image.Image:
    """The item's first frame turned upright by its EXIF orientation, in L, LA, RGB or RGBA (other modes converted:
    a palette with transparency to RGBA, anything else to RGB)."""
    try:
        with Image.open(io.BytesIO(item.data)) as opened:
            opened.seek(0)
            upright = ImageOps.exif_transpose(opened)
            upright.load()
    except _IMAGE_ERRORS as exc:
        raise CorruptMedia(item, "the image cannot be decoded to mask it", raw=f"{type(exc).__name__}: {exc}") from None
    if upright.mode in _FILL:
        return upright
    return upright.convert("RGBA" if "transparency" in upright.info or upright.mode in ("PA", "La", "RGBa") else "RGB")


def mask_image(item: MediaItem, box: tuple[float, float, float, float]) -> bytes:
    """PNG of the upright image with `box` (x0, y0, x1, y1 in its pixels) filled with mid grey."""
    image = upright_image(item)
    image.paste(_FILL[image.mode], box_pixels(box, *image.size))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def read_audio(item: MediaItem) -> tuple[np.ndarray, int]:
    """(samples (n, channels) float32, rate in Hz), read by libsndfile."""
    try:
        samples, rate_hz = soundfile.read(io.BytesIO(item.data), dtype="float32", always_2d=True)
    except (RuntimeError, TypeError) as exc:     # soundfile.LibsndfileError is a RuntimeError
        raise UnsupportedMedia(item, "the occlusion check masks audio that libsndfile reads (WAV, FLAC, OGG, MP3); "
                                     "this clip is not one of them", raw=str(exc)) from None
    return samples, int(rate_hz)


def sample_range(start_s: float, end_s: float, rate_hz: int, count: int) -> tuple[int, int]:
    """The sample indices [first, stop) of [start_s, end_s), inside [0, count)."""
    first = min(count, max(0, round(start_s * rate_hz)))
    return first, min(count, max(first, round(end_s * rate_hz)))


def mask_audio(item: MediaItem, start_s: float, end_s: float) -> bytes:
    """WAV (32-bit float, the source's rate and channels) with the samples of [start_s, end_s) set to zero."""
    samples, rate_hz = read_audio(item)
    first, stop = sample_range(start_s, end_s, rate_hz, len(samples))
    samples[first:stop] = 0.0
    out = io.BytesIO()
    soundfile.write(out, samples, rate_hz, subtype="FLOAT", format="WAV")
    return out.getvalue()


def mask_state(state: JSONValue, start: int, end: int) -> str:
    """The state as the prompt renders it (a string as is; JSON compact and key-sorted) with the characters
    [start, end) replaced by spaces; the length is kept."""
    text = render(state)
    start, end = max(0, start), min(len(text), max(start, end))
    return text[:start] + " " * (end - start) + text[end:]
