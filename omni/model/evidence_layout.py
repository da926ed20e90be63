"""Where a prepared record's tokens came from, for evidence (docs/evidence.md): which positions are the state's
tokens (and their characters), and each image's, audio clip's, video's and soundtrack's pads with what one pad
stands for — a merged 32x32-pixel cell of the resized picture, an 80 ms window of a recording, a cell of a
temporal grid of a clip.

Built from the record's ids, the media segment's per-item token counts and the audit's `used` facts of each item
(upright source sizes, seconds, frame rate); every pad is found by its placeholder id, in prompt order: images,
then audio clips, then videos, where a heard video's soundtrack pads follow the standalone clips' audio pads.
Knows nothing of attention, heads, the wire or HTTP.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from omni.contract.audit import MediaAudit
from omni.model.prompt import render
from preprocess.align import PlaceholderIds

MERGED_CELL_PX = 32                  # one pad = a 2x2 merge of 16-pixel patches of the resized picture
AUDIO_TOKENS_PER_SECOND = 13         # 100 mel frames (1 s) -> 13 tokens: three stride-2 convolutions, 8 frames each
AUDIO_TOKEN_SECONDS = 0.08


@dataclass(frozen=True)
class Grid:
    """Pads laid out as [grids, rows, cols] cells over a picture of `width` x `height` upright source pixels; the
    resize maps the whole picture onto the whole grid, so cell (r, c) is the box [c, c+1) x width/cols by
    [r, r+1) x height/rows."""

    tokens: np.ndarray               # positions in the record, cell order (grid, row, col)
    grids: int
    rows: int
    cols: int
    width: int
    height: int


@dataclass(frozen=True)
class Clip:
    """A recording's pads: pad k covers [k//13 + 0.08 (k%13), ...) seconds, within its second and the clip."""

    index: int
    tokens: np.ndarray
    seconds: float

    def window(self, k: int) -> tuple[float, float]:
        second, j = divmod(k, AUDIO_TOKENS_PER_SECOND)
        start = second + AUDIO_TOKEN_SECONDS * j
        end = min(start + AUDIO_TOKEN_SECONDS, second + 1.0, max(self.seconds, start))
        return start, end


@dataclass(frozen=True)
class Video:
    index: int
    grid: Grid
    seconds_per_grid: float
    seconds: float                   # up to the last kept frame's end
    soundtrack: Clip | None

    def span(self, t: int) -> tuple[float, float]:
        """Temporal grid t's seconds of the clip: [t, t + 1) x seconds_per_grid, within the clip."""
        start = t * self.seconds_per_grid
        return start, max(start, min(start + self.seconds_per_grid, self.seconds))


@dataclass(frozen=True)
class Layout:
    state_tokens: np.ndarray         # positions of the kept state tokens
    state_offsets: list[tuple[int, int]]
    state_text: str
    images: list[tuple[int, Grid]]   # (index in the images slot, its grid)
    audio: list[Clip]
    videos: list[Video]


def record_layout(input_ids: torch.Tensor, media_start: int, media_end: int, state_kept: int,
                  state_offsets: list[tuple[int, int]], state: object, media: tuple[MediaAudit, ...],
                  tokens_per_item: dict[str, list[int]], ids: PlaceholderIds) -> Layout:
    """The layout of one record (`media_start`: where "STATE:\\n" ends; `media_end`: where the state begins)."""
    segment = input_ids[media_start:media_end].numpy()

    def pads(token: int) -> np.ndarray:
        return np.flatnonzero(segment == token) + media_start

    image_pads = _split(pads(ids.image_pad), tokens_per_item.get("image", []))
    video_pads = _split(pads(ids.video_pad), tokens_per_item.get("video", []))
    clip_counts, track_counts = tokens_per_item.get("audio", []), tokens_per_item.get("video_audio", [])
    audio_pads = _split(pads(ids.audio_pad), clip_counts + track_counts)
    images = [(item.index, _picture(tokens, item.used, 1)) for item, tokens in
              zip([m for m in media if m.slot == "images"], image_pads, strict=True)]
    clips = [Clip(item.index, tokens, float(item.used.get("seconds") or 0.0)) for item, tokens in
             zip([m for m in media if m.slot == "audio"], audio_pads[:len(clip_counts)], strict=True)]
    tracks = audio_pads[len(clip_counts):]
    videos = []
    for n, (item, tokens) in enumerate(zip([m for m in media if m.slot == "videos"], video_pads, strict=True)):
        used = item.used
        fps = float(used.get("fps") or 2.0)
        times = list(used.get("frame_times_s") or [0.0])
        rows, cols = int(used["height"]) // MERGED_CELL_PX, int(used["width"]) // MERGED_CELL_PX
        grids = tokens.size // max(1, rows * cols)
        track = Clip(item.index, tracks[n], float(used.get("soundtrack_seconds") or 0.0)) if n < len(tracks) else None
        videos.append(Video(item.index, _picture(tokens, used, grids), 2.0 / fps, float(times[-1]) + 1.0 / fps, track))
    state_tokens = np.arange(media_end, media_end + state_kept)
    return Layout(state_tokens, state_offsets[:state_kept], render(state), images, clips, videos)


def _split(positions: np.ndarray, counts: list[int]) -> list[np.ndarray]:
    if positions.size != sum(counts):
        raise ValueError(f"{positions.size} pads in the media segment, {sum(counts)} expected")
    return np.split(positions, np.cumsum(counts)[:-1]) if counts else []


def _picture(tokens: np.ndarray, used: dict, grids: int) -> Grid:
    """A picture's cells from its resized size (`width`, `height`: multiples of 32) and upright source size."""
    rows, cols = int(used["height"]) // MERGED_CELL_PX, int(used["width"]) // MERGED_CELL_PX
    if rows * cols * grids != tokens.size:
        raise ValueError(f"{tokens.size} pads for a {grids}x{rows}x{cols} grid")
    return Grid(tokens, grids, rows, cols, int(used["source_width"]), int(used["source_height"]))
