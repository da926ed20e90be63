"""Evidence as the caller reads it (docs/evidence.md): one option's attention over a record's tokens [T] → the
share per modality, the state's top character spans, each image's heat map and top boxes, each recording's weight
per second and top windows, each video's timeline, top moments and their boxes, each heard soundtrack's windows.

Weights are attention mass (fractions of the option's routing attention); boxes in the upright source's pixels;
times in seconds of the original recording. Knows nothing of heads, forwards, HTTP or how the record was batched:
it sees one weight vector and a `Layout`.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from omni.model.evidence_layout import Clip, Grid, Layout, Video

METHOD = "routing-attention/1"
WEIGHT_DECIMALS = 6
PIXEL_DECIMALS = 2
SECOND_DECIMALS = 3


def option_evidence(weights: torch.Tensor, layout: Layout, top: int) -> dict[str, Any]:
    """One option's evidence: {share, state, images, audio, videos} (docs/evidence.md)."""
    w = weights.detach().to(torch.float64).numpy()
    images = [_image(index, grid, w, top) for index, grid in layout.images]
    audio = [_clip(clip, w, top) for clip in layout.audio]
    videos = [_video(video, w, top) for video in layout.videos]
    parts = {"state": _mass(w, layout.state_tokens),
             "image": sum(_mass(w, grid.tokens) for _, grid in layout.images),
             "audio": sum(_mass(w, clip.tokens) for clip in layout.audio),
             "video": sum(_mass(w, video.grid.tokens) for video in layout.videos),
             "video_audio": sum(_mass(w, video.soundtrack.tokens) for video in layout.videos
                                if video.soundtrack is not None)}
    share = {"prompt": float(w.sum()) - sum(parts.values()), **parts}
    return {"share": {key: _w(value) for key, value in share.items()},
            "state": _state(w, layout, top), "images": images, "audio": audio, "videos": videos}


def _mass(w: np.ndarray, tokens: np.ndarray) -> float:
    return float(w[tokens].sum()) if tokens.size else 0.0


def _w(value: float) -> float:
    return round(float(value), WEIGHT_DECIMALS)


def _ws(values: np.ndarray) -> list:
    """An array of weights as (nested) lists rounded to WEIGHT_DECIMALS."""
    return np.round(values, WEIGHT_DECIMALS).tolist()


def _top(values: np.ndarray, top: int) -> list[int]:
    """Indices of the `top` largest values, heaviest first (ties: the earlier index first). A long vector (a long
    state) is cut with a partial pick first; a tie that reaches the cut falls back to the full stable sort."""
    if values.size > 8 * top + 64:
        picked = np.argpartition(-values, top - 1)[:top]
        if np.count_nonzero(values >= values[picked].min()) == top:
            return picked[np.lexsort((picked, -values[picked]))].tolist()
    return np.argsort(-values, kind="stable")[:top].tolist() if values.size else []


def _state(w: np.ndarray, layout: Layout, top: int) -> dict[str, Any]:
    """The state's top tokens as character spans (adjacent ones merged), heaviest first."""
    text, offsets = layout.state_text, layout.state_offsets
    covered = offsets[-1][1] if offsets else 0
    values = w[layout.state_tokens]
    runs: list[list[int]] = []
    for i in sorted(_top(values, top)):
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    spans: list[dict[str, Any]] = [{"start": offsets[run[0]][0], "end": offsets[run[-1]][1],
                                    "text": text[offsets[run[0]][0]:offsets[run[-1]][1]],
                                    "weight": _w(sum(float(values[i]) for i in run))} for run in runs]
    spans.sort(key=lambda span: (-float(span["weight"]), int(span["start"])))
    return {"chars": len(text), "covered_chars": covered, "spans": spans}


def _boxes(grid: Grid, cells: np.ndarray, top: int) -> list[dict[str, float]]:
    """The top cells of one [rows, cols] map as boxes in the source's pixels."""
    flat = cells.reshape(-1)
    chosen = np.argsort(-flat, kind="stable")[:top]
    rows, cols = np.divmod(chosen, grid.cols)
    sx, sy = grid.width / grid.cols, grid.height / grid.rows
    corners = np.round(np.stack([cols * sx, rows * sy, (cols + 1) * sx, (rows + 1) * sy], axis=1), PIXEL_DECIMALS)
    weights = np.round(flat[chosen], WEIGHT_DECIMALS).tolist()
    return [{"x0": x0, "y0": y0, "x1": x1, "y1": y1, "weight": weight}
            for (x0, y0, x1, y1), weight in zip(corners.tolist(), weights, strict=True)]


def _image(index: int, grid: Grid, w: np.ndarray, top: int) -> dict[str, Any]:
    cells = w[grid.tokens].reshape(grid.rows, grid.cols)
    return {"index": index, "width": grid.width, "height": grid.height, "grid": {"rows": grid.rows, "cols": grid.cols},
            "heatmap": _ws(cells), "boxes": _boxes(grid, cells, top)}


def _windows(clip: Clip, w: np.ndarray, top: int) -> dict[str, Any]:
    values = w[clip.tokens]
    seconds = -(-values.size // 13)
    padded = np.zeros(seconds * 13)
    padded[:values.size] = values
    windows = []
    for k in _top(values, top):
        start, end = clip.window(k)
        windows.append({"start_s": round(start, SECOND_DECIMALS), "end_s": round(end, SECOND_DECIMALS),
                        "weight": _w(values[k])})
    return {"seconds": round(clip.seconds, SECOND_DECIMALS), "per_second": _ws(padded.reshape(seconds, 13).sum(1)),
            "windows": windows}


def _clip(clip: Clip, w: np.ndarray, top: int) -> dict[str, Any]:
    return {"index": clip.index, **_windows(clip, w, top)}


def _video(video: Video, w: np.ndarray, top: int) -> dict[str, Any]:
    grid = video.grid
    cells = w[grid.tokens].reshape(grid.grids, grid.rows, grid.cols)
    per_grid = cells.sum(axis=(1, 2))
    rounded = _ws(per_grid)
    timeline = []
    for t in range(grid.grids):
        start, end = video.span(t)
        timeline.append({"start_s": round(start, SECOND_DECIMALS), "end_s": round(end, SECOND_DECIMALS),
                         "weight": rounded[t]})
    moments = [{**timeline[t], "boxes": _boxes(grid, cells[t], top)} for t in _top(per_grid, top)]
    return {"index": video.index, "width": grid.width, "height": grid.height, "seconds": round(video.seconds, 3),
            "timeline": timeline, "moments": moments,
            "soundtrack": _windows(video.soundtrack, w, top) if video.soundtrack is not None else None}
