"""The reference's video frame size chain, step for step: its pre-scale, then its video processor's resize.

The Clef reference (`joint_schema_model.load_video`) converts every kept frame with PyAV
`frame.to_ndarray(format="rgb24", width=w1, height=h1)`: swscale, bilinear (PyAV's default), to at most 262,144 px
with even sides (`prescale_size`; a smaller frame keeps its size and is only converted to RGB). Then the
checkpoint's video processor (transformers' `Qwen2VLVideoProcessor`, the same code under 5.10.2 and 5.23)
smart-resizes to multiples of 32 within [131,072, 786,432] px (`smart_resize`) with torchvision's `resize` on the
uint8 frames: bicubic, antialias on, which on CPU is torch's own uint8 `interpolate(mode="bicubic",
antialias=True)` (a frame already at that size is left as it is). So a 256x256 clip is *upscaled* to 384x384 and
a 1280x720 one goes 682x384 -> 672x384.

`FrameScaler` does both steps the same way: one swscale conversion per kept frame through a reused
`VideoReformatter` (bit-identical to `to_ndarray`, without building a scaler and a thread pool per frame), then
torch's uint8 antialiased bicubic, in channels-last layout (same values as the processor's channels-first call,
faster). Tested bit for bit against the reference processor's `pixel_values_videos`
(tests/integration/preprocess/test_reference_pixels.py).

Knows nothing of decoding, sampling, the model, HTTP or the filesystem.
"""
from __future__ import annotations

import math

import av
import numpy as np
import torch
from av.video.reformatter import VideoReformatter


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen2-VL's size rule (same arithmetic as transformers' `smart_resize`, checked by a test)."""
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def prescale_size(height: int, width: int, max_pixels: int) -> tuple[int, int]:
    """The reference's pre-scale of a `height` x `width` frame: at most `max_pixels`, even sides, never larger."""
    scale = min(1.0, math.sqrt(max_pixels / (width * height)))
    return max(2, round(height * scale / 2) * 2), max(2, round(width * scale / 2) * 2)


class FrameScaler:
    """Decoded frames -> upright RGB uint8 (height, width, 3) at the final size, by the reference's two steps.

    `size` is the upright source size; `rotation` the counter-clockwise quarter turns (degrees) that make a coded
    frame upright. The pre-scale runs on the coded frame (as the reference's, which does not rotate), the turn on
    its small RGB result, the processor's resize on the upright picture. One scaler per video: its reformatter
    caches swscale's context. Not thread-safe.
    """

    def __init__(self, size: tuple[int, int], rotation: int, max_prescale_pixels: int,
                 final: tuple[int, int]) -> None:
        self.rotation = rotation
        self.prescaled = prescale_size(*size, max_prescale_pixels)     # upright (h1, w1)
        self.final = final                                             # upright (h, w)
        self._reformatter = VideoReformatter()

    def __call__(self, frame: av.VideoFrame) -> np.ndarray:
        height, width = self.prescaled
        if self.rotation % 180:
            height, width = width, height
        # threads=1: one frame is small work; parallelism comes from FFmpeg's frame threads decoding meanwhile
        rgb = self._reformatter.reformat(frame, width=width, height=height, format="rgb24", threads=1).to_ndarray()
        if self.rotation:
            rgb = np.rot90(rgb, k=self.rotation // 90)
        return processor_resize(rgb, self.final)


def processor_resize(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(h, w, 3) uint8 -> (H, W, 3) uint8 as the video processor resizes: torch uint8 bicubic, antialias on."""
    if rgb.shape[:2] == size:
        return np.ascontiguousarray(rgb)
    nchw = torch.from_numpy(np.ascontiguousarray(rgb)).permute(2, 0, 1)[None]    # channels-last strides
    out = torch.nn.functional.interpolate(nchw, size=size, mode="bicubic", align_corners=False, antialias=True)
    return out[0].permute(1, 2, 0).numpy()
