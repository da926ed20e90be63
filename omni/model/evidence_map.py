"""Evidence as the caller reads it (docs/evidence.md): one option's attention over a record's tokens [T] → the
share per modality, the state's top character spans, each image's heat map and top boxes, each recording's weight
per second and top windows, each video's timeline, top moments and their boxes, each heard soundtrack's windows.

Weights are attention mass (fractions of the option's routing attention); boxes in the upright source's pixels;
times in seconds of the original recording. Knows nothing of heads, forwards, HTTP or how the record was batched:
it sees one weight vector and a `Layout`.
"""
from __future__ import annotations

from typing import Any

import torch

from omni.model.evidence_layout import Clip, Grid, Layout, Video

METHOD = "routing-attention/1"
WEIGHT_DECIMALS = 6
PIXEL_DECIMALS = 2
SECOND_DECIMALS = 3


def option_evidence(weights: torch.Tensor, layout: Layout, top: int) -> dict[str, Any]:
    """One option's evidence: {share, state, images, audio, videos} (docs/evidence.md)."""
    images = [_image(index, grid, weights, top) for index, grid in layout.images]
    audio = [_clip(clip, weights, top) for clip in layout.audio]
    videos = [_video(video, weights, top) for video in layout.videos]
    parts = {"state": _mass(weights, layout.state_tokens),
             "image": sum(_mass(weights, grid.tokens) for _, grid in layout.images),
             "audio": sum(_mass(weights, clip.tokens) for clip in layout.audio),
             "video": sum(_mass(weights, video.grid.tokens) for video in layout.videos),
             "video_audio": sum(_mass(weights, video.soundtrack.tokens) for video in layout.videos
                                if video.soundtrack is not None)}
    share = {"prompt": float(weights.sum()) - sum(parts.values()), **parts}
    return {"share": {key: _w(value) for key, value in share.items()},
            "state": _state(weights, layout, top), "images": images, "audio": audio, "videos": videos}


def _mass(weights: torch.Tensor, tokens: torch.Tensor) -> float:
    return float(weights[tokens].sum()) if tokens.numel() else 0.0


def _w(value: float) -> float:
    return round(float(value), WEIGHT_DECIMALS)


def _top(values: torch.Tensor, top: int) -> list[int]:
    """Indices of the `top` largest values, heaviest first (ties: the earlier index first)."""
    if not values.numel():
        return []
    return torch.sort(values, descending=True, stable=True).indices[:top].tolist()


def _state(weights: torch.Tensor, layout: Layout, top: int) -> dict[str, Any]:
    """The state's top tokens as character spans (adjacent ones merged), heaviest first."""
    text, offsets = layout.state_text, layout.state_offsets
    covered = offsets[-1][1] if offsets else 0
    values = weights[layout.state_tokens] if layout.state_tokens.numel() else weights.new_zeros(0)
    chosen = sorted(_top(values, top))
    runs: list[list[int]] = []
    for i in chosen:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    spans: list[dict[str, Any]] = [{"start": offsets[run[0]][0], "end": offsets[run[-1]][1],
              "text": text[offsets[run[0]][0]:offsets[run[-1]][1]],
              "weight": _w(sum(float(values[i]) for i in run))} for run in runs]
    spans.sort(key=lambda span: (-float(span["weight"]), int(span["start"])))
    return {"chars": len(text), "covered_chars": covered, "spans": spans}


def _boxes(grid: Grid, cells: torch.Tensor, top: int) -> list[dict[str, float]]:
    """The top cells of one [rows, cols] map as boxes in the source's pixels."""
    out = []
    for k in _top(cells.reshape(-1), top):
        row, col = divmod(k, grid.cols)
        x0, y0, x1, y1 = grid.box(row, col)
        out.append({"x0": round(x0, PIXEL_DECIMALS), "y0": round(y0, PIXEL_DECIMALS), "x1": round(x1, PIXEL_DECIMALS),
                    "y1": round(y1, PIXEL_DECIMALS), "weight": _w(float(cells.reshape(-1)[k]))})
    return out


def _image(index: int, grid: Grid, weights: torch.Tensor, top: int) -> dict[str, Any]:
    cells = weights[grid.tokens].view(grid.rows, grid.cols)
    return {"index": index, "width": grid.width, "height": grid.height, "grid": {"rows": grid.rows, "cols": grid.cols},
            "heatmap": [[_w(v) for v in row] for row in cells.tolist()], "boxes": _boxes(grid, cells, top)}


def _windows(clip: Clip, weights: torch.Tensor, top: int) -> dict[str, Any]:
    values = weights[clip.tokens] if clip.tokens.numel() else weights.new_zeros(0)
    seconds = -(-int(values.numel()) // 13)
    per_second = [_w(float(values[13 * s:13 * (s + 1)].sum())) for s in range(seconds)]
    windows = []
    for k in _top(values, top):
        start, end = clip.window(k)
        windows.append({"start_s": round(start, SECOND_DECIMALS), "end_s": round(end, SECOND_DECIMALS),
                        "weight": _w(float(values[k]))})
    return {"seconds": round(clip.seconds, SECOND_DECIMALS), "per_second": per_second, "windows": windows}


def _clip(clip: Clip, weights: torch.Tensor, top: int) -> dict[str, Any]:
    return {"index": clip.index, **_windows(clip, weights, top)}


def _video(video: Video, weights: torch.Tensor, top: int) -> dict[str, Any]:
    grid = video.grid
    cells = weights[grid.tokens].view(grid.grids, grid.rows, grid.cols)
    per_grid = cells.sum(dim=(1, 2))
    timeline = []
    for t in range(grid.grids):
        start, end = video.span(t)
        timeline.append({"start_s": round(start, SECOND_DECIMALS), "end_s": round(end, SECOND_DECIMALS),
                         "weight": _w(float(per_grid[t]))})
    moments = [{**{k: timeline[t][k] for k in ("start_s", "end_s", "weight")}, "boxes": _boxes(grid, cells[t], top)}
               for t in _top(per_grid, top)]
    return {"index": video.index, "width": grid.width, "height": grid.height, "seconds": round(video.seconds, 3),
            "timeline": timeline, "moments": moments,
            "soundtrack": _windows(video.soundtrack, weights, top) if video.soundtrack is not None else None}
