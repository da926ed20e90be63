"""Video frames <-> the vision tower's patch rows, in uint8, in the layout of transformers' Qwen2-VL processors.

Rows: temporal group t, then merge blocks (h/m, w/m), then the m x m patches of a block; columns: channel, temporal
slot, patch row, patch column (`patchify_frames`, checked element by element against a loop and against
transformers). `PatchWriter` builds the same rows one frame at a time, straight into one buffer, so a decoded clip
never exists twice in memory (frames, then their patches). `unpatchify` is the inverse (tests and tools).

Knows nothing of decoding, the model, HTTP or the filesystem.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PatchLayout:
    patch_size: int = 16
    temporal_patch_size: int = 2
    merge_size: int = 2

    @property
    def columns(self) -> int:
        return 3 * self.temporal_patch_size * self.patch_size * self.patch_size


def _blocks(x: np.ndarray, layout: PatchLayout) -> np.ndarray:
    """(G, tp, H, W, C) -> the (G, h/m, w/m, m, m, C, tp, ps, ps) view whose C-order flattening is the rows."""
    groups, tp, height, width, channels = x.shape
    ps, m = layout.patch_size, layout.merge_size
    x = x.reshape(groups, tp, height // (ps * m), m, ps, width // (ps * m), m, ps, channels)
    return x.transpose(0, 2, 5, 3, 6, 8, 1, 4, 7)


def patchify_frames(frames: np.ndarray, patch_size: int = 16, temporal_patch_size: int = 2,
                    merge_size: int = 2) -> tuple[np.ndarray, tuple[int, int, int]]:
    """(T, H, W, C) uint8 frames -> (grid_t*grid_h*grid_w, C*tp*ps*ps) uint8 patches in the HF row/column order.

    T is padded to a multiple of tp with the last frame; H and W must be multiples of ps*merge.
    """
    layout = PatchLayout(patch_size, temporal_patch_size, merge_size)
    x = np.asarray(frames)
    if pad := -len(x) % temporal_patch_size:
        x = np.concatenate([x, np.repeat(x[-1:], pad, axis=0)])
    t, h, w, c = x.shape
    unit = patch_size * merge_size
    if h % unit or w % unit:
        raise ValueError(f"frame size {h}x{w} is not a multiple of patch_size*merge_size={unit}")
    grid = (t // temporal_patch_size, h // patch_size, w // patch_size)
    blocks = _blocks(x.reshape(grid[0], temporal_patch_size, h, w, c), layout)
    return np.ascontiguousarray(blocks).reshape(grid[0] * grid[1] * grid[2], c * temporal_patch_size * patch_size
                                                * patch_size), grid


def unpatchify(patches: np.ndarray, grid: tuple[int, int, int], layout: PatchLayout = PatchLayout()) -> np.ndarray:
    """Inverse of `patchify_frames`: rows -> (grid_t * tp, H, W, 3) uint8 frames."""
    grid_t, grid_h, grid_w = grid
    ps, tp, m = layout.patch_size, layout.temporal_patch_size, layout.merge_size
    x = patches.reshape(grid_t, grid_h // m, grid_w // m, m, m, 3, tp, ps, ps)
    x = x.transpose(0, 6, 1, 3, 7, 2, 4, 8, 5)     # t, tp, h/m, m, ps, w/m, m, ps, C
    return np.ascontiguousarray(x).reshape(grid_t * tp, grid_h * ps, grid_w * ps, 3)


class PatchWriter:
    """Frames of one size, written straight into their patch rows (uint8): appended in order, or reserved in order
    (`reserve`, one thread) and filled in any order (`put`, from any thread, each index once).

    `expected_frames` sizes the buffer (from the header's duration; it grows by half when a clip has more frames
    than its header said; a tail never written costs no resident memory). `finish` repeats the last frame when the
    count is odd (the temporal patch takes frames in pairs) and returns (rows, grid).
    """

    def __init__(self, height: int, width: int, layout: PatchLayout, expected_frames: int = 2) -> None:
        unit = layout.patch_size * layout.merge_size
        if height % unit or width % unit:
            raise ValueError(f"frame size {height}x{width} is not a multiple of patch_size*merge_size={unit}")
        self.height, self.width, self.layout = height, width, layout
        self.rows_per_group = (height // layout.patch_size) * (width // layout.patch_size)
        self.count = 0
        self._buffer = self._allocate(self._groups(max(expected_frames, 1)))

    def _groups(self, frames: int) -> int:
        return -(-frames // self.layout.temporal_patch_size)

    def _allocate(self, groups: int) -> np.ndarray:
        return np.empty((groups * self.rows_per_group, self.layout.columns), np.uint8)

    def _slot(self, index: int) -> np.ndarray:
        """The strided view of the buffer that frame `index` fills: (h/m, w/m, m, m, C, ps, ps)."""
        tp = self.layout.temporal_patch_size
        group, slot = divmod(index, tp)
        rows = self._buffer[group * self.rows_per_group:(group + 1) * self.rows_per_group]
        view = rows.reshape(self.height // (self.layout.patch_size * self.layout.merge_size),
                            self.width // (self.layout.patch_size * self.layout.merge_size),
                            self.layout.merge_size, self.layout.merge_size, 3, tp, self.layout.patch_size,
                            self.layout.patch_size)
        return view[:, :, :, :, :, slot]

    @property
    def grows_next(self) -> bool:
        """Whether the next `reserve` reallocates the buffer (no `put` may run while it does)."""
        return self._groups(self.count + 1) * self.rows_per_group > len(self._buffer)

    def reserve(self) -> int:
        """The next frame's index; grows the buffer when needed (one thread reserves; see `grows_next`)."""
        if self.grows_next:
            grown = self._allocate(max(self._groups(self.count + 1), self._groups(self.count) * 3 // 2 + 1))
            grown[:len(self._buffer)] = self._buffer
            self._buffer = grown
        self.count += 1
        return self.count - 1

    def put(self, index: int, frame: np.ndarray) -> None:
        """One (H, W, 3) uint8 frame into the rows of reserved frame `index` (threads may fill distinct indices)."""
        self._slot(index)[...] = _blocks(frame[None, None], self.layout)[0, :, :, :, :, :, 0]

    def append(self, frame: np.ndarray) -> None:
        """One (H, W, 3) uint8 frame, the next in time."""
        self.put(self.reserve(), frame)

    def frame(self, index: int) -> np.ndarray:
        """Frame `index` back as (H, W, 3) (to repeat one)."""
        ps, m = self.layout.patch_size, self.layout.merge_size
        x = self._slot(index).transpose(0, 2, 5, 1, 3, 6, 4)     # h/m, m, ps, w/m, m, ps, C
        return np.ascontiguousarray(x).reshape(self.height // (ps * m) * m * ps, self.width // (ps * m) * m * ps, 3)

    def finish(self) -> tuple[np.ndarray, tuple[int, int, int]]:
        """(rows, (grid_t, grid_h, grid_w)); the frame count padded to a multiple of tp with the last frame."""
        if self.count == 0:
            raise ValueError("no frames were written")
        while self.count % self.layout.temporal_patch_size:
            self.append(self.frame(self.count - 1))
        groups = self.count // self.layout.temporal_patch_size
        rows = groups * self.rows_per_group
        # a view: the tail past `rows` was never written, so its pages were never touched (not resident)
        patches, self._buffer = self._buffer[:rows], self._allocate(0)
        return patches, (groups, self.height // self.layout.patch_size, self.width // self.layout.patch_size)
