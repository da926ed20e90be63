"""The video frame policy and what a decoded video is: which frames are kept (`frame_rule`, `fps`), how large they are
scaled (the reference's pre-scale cap and the processor's pixel bounds) and how they are cut into patches; the one
policy every default uses (`REFERENCE_FRAMES`); the final frame size (`frame_size`); `DecodedVideo`, the patch rows,
grid and soundtrack `preprocess.video.decode_video` returns, with its rate and layout read from its policy.

Knows nothing of decoding, containers or the model: values and their arithmetic only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from preprocess.patches import PatchLayout, unpatchify
from preprocess.resize import prescale_size, smart_resize

FrameRule = Literal["reference", "nearest"]
FRAME_RULES: tuple[FrameRule, ...] = ("reference", "nearest")


@dataclass(frozen=True)
class VideoFramePolicy:
    """Frame rule and rate, frame size and patch layout of the reference (Clef `load_video` + the processor's video
    size). `frame_rule`: "reference" (the default, what the model was trained on) keeps a decoded frame iff its time
    on the stream's clock + 1e-6 >= kept / fps, and leaves the soundtrack as decoded; "nearest" keeps, for each tick
    k / fps counted from the first frame, the decoded frame nearest to it, and aligns the soundtrack to that frame."""

    fps: float = 2.0
    frame_rule: FrameRule = "reference"
    max_decode_pixels: int = 256 * 32 * 32  # 262,144: the reference's pre-scale cap before its processor
    min_pixels: int = 128 * 32 * 32  # 131,072: processor video size shortest_edge
    max_pixels: int = 768 * 32 * 32  # 786,432: processor video size longest_edge
    layout: PatchLayout = field(default_factory=PatchLayout)   # patch 16, temporal 2, merge 2: sides x32

    def __post_init__(self) -> None:
        if self.frame_rule not in FRAME_RULES:
            raise ValueError(f"frame_rule must be one of {', '.join(FRAME_RULES)}, got {self.frame_rule!r}")
        if not self.fps > 0:
            raise ValueError(f"fps must be > 0, got {self.fps}")

    @property
    def factor(self) -> int:
        return self.layout.patch_size * self.layout.merge_size


# The one frame policy: the reference's. Every default in `preprocess` and `omni` is this object.
REFERENCE_FRAMES = VideoFramePolicy()


@dataclass(frozen=True)
class DecodedVideo:
    patches: np.ndarray  # (grid_t*grid_h*grid_w, 3*tp*ps*ps) uint8 patch rows of the upright frames (HF order)
    grid: tuple[int, int, int]  # (grid_t, grid_h, grid_w); frames are grid_t*tp, each grid_h*ps x grid_w*ps
    soundtrack: np.ndarray | None  # (n,) float32 mono 16 kHz (aligned as the policy says); None if no audio
    policy: VideoFramePolicy  # the frame policy it was decoded under (its rate and patch layout)
    source_width: int = 0  # upright, before scaling
    source_height: int = 0
    rotation_degrees: int = 0  # counter-clockwise rotation that was applied
    container: str = ""
    # each frame's time: on the stream's clock (rule "reference"), from the first frame ("nearest"); the pad repeats
    frame_times_s: tuple[float, ...] = ()

    @property
    def fps(self) -> float:
        return self.policy.fps

    @property
    def layout(self) -> PatchLayout:
        return self.policy.layout

    @property
    def frames(self) -> np.ndarray:
        """(T, H, W, 3) uint8 RGB, upright, T even: the frames back from the patch rows (a copy; tests, tools)."""
        return unpatchify(self.patches, self.grid, self.layout)

    @property
    def frame_count(self) -> int:
        return self.grid[0] * self.layout.temporal_patch_size

    @property
    def height(self) -> int:
        return self.grid[1] * self.layout.patch_size

    @property
    def width(self) -> int:
        return self.grid[2] * self.layout.patch_size

    @property
    def duration_seconds(self) -> float:
        return self.frame_count / self.fps


def frame_size(height: int, width: int, policy: VideoFramePolicy = REFERENCE_FRAMES) -> tuple[int, int]:
    """Final (height, width) of the reference chain for an upright source frame of `height` x `width`."""
    return smart_resize(*prescale_size(height, width, policy.max_decode_pixels), policy.factor, policy.min_pixels,
                        policy.max_pixels)
