"""The regions of the occlusion check (`omni explain --occlude`): each medium's top-evidence region for a question's
chosen answer, read from the response's `x_evidence` (docs/evidence.md), and a random region of the same size.

A `Target` is one medium of the request: `image` / `audio` / `video` with its index in its slot, or the `state`. Its
top region is the heaviest of the chosen answer's evidence of that medium: an image's first box, an audio clip's
first window, a video's first moment (a whole second of picture and soundtrack), the state's first span. The random
region has the same size: the same box width and height elsewhere in the image, the same window length elsewhere in
the clip, the same span length elsewhere in the state the model read (`covered_chars`); it overlaps the top region
only when no position avoids it. Drawn from a `numpy` generator seeded by the caller: the same seed, the same region.

Knows nothing of media bytes, the engine or HTTP: it reads the evidence object (JSON) and draws numbers.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

BOX_TRIES = 200        # random positions tried for a box that avoids the top one before one that overlaps is kept
# evidence list of each medium, and the list inside each entry that holds its regions (heaviest first)
EVIDENCE_LISTS = {"image": ("images", "boxes"), "audio": ("audio", "windows"), "video": ("videos", "moments")}


@dataclass(frozen=True)
class Target:
    """One medium of a request: kind "image" | "audio" | "video" | "state", and its index in its slot."""

    kind: str
    index: int = 0

    @property
    def label(self) -> str:
        return "state" if self.kind == "state" else f"{EVIDENCE_LISTS[self.kind][0]}[{self.index}]"


@dataclass(frozen=True)
class Region:
    """What a mask blanks: a box (x0, y0, x1, y1 in the upright image's pixels), a window [start, end) in seconds,
    or a span [start, end) of the rendered state's characters."""

    kind: str                 # "box" | "window" | "span"
    start: float = 0.0        # window, span
    end: float = 0.0
    box: tuple[float, float, float, float] | None = None

    def to_wire(self) -> dict[str, Any]:
        if self.kind == "box":
            assert self.box is not None
            return dict(zip(("x0", "y0", "x1", "y1"), (round(v, 2) for v in self.box), strict=True))
        if self.kind == "window":
            return {"start_s": round(self.start, 3), "end_s": round(self.end, 3)}
        return {"start": int(self.start), "end": int(self.end)}

    def describe(self) -> str:
        if self.box is not None:
            x0, y0, x1, y1 = self.box
            return f"{x0:.0f},{y0:.0f}-{x1:.0f},{y1:.0f} px"
        if self.kind == "window":
            return f"{self.start:.2f}-{self.end:.2f} s"
        return f"chars {int(self.start)}-{int(self.end)}"


@dataclass(frozen=True)
class Extent:
    """Where a random region may lie: an image's width and height, a clip's seconds, the state's read chars."""

    width: float = 0.0
    height: float = 0.0
    length: float = 0.0


def evidence_targets(question: Mapping[str, Any]) -> Iterator[tuple[Target, Region, Extent]]:
    """Every medium with evidence in one question's entry of `x_evidence.questions`: its target, top region and
    extent, in prompt order (state first, then images, audio, videos)."""
    state = question.get("state") or {}
    if state.get("spans"):
        span = state["spans"][0]
        yield Target("state"), Region("span", span["start"], span["end"]), Extent(length=state["covered_chars"])
    for kind, (field, regions) in EVIDENCE_LISTS.items():
        for entry in question.get(field) or []:
            if not entry.get(regions):
                continue
            top = entry[regions][0]
            target = Target(kind, int(entry["index"]))
            if kind == "image":
                box = (top["x0"], top["y0"], top["x1"], top["y1"])
                yield target, Region("box", box=box), Extent(width=entry["width"], height=entry["height"])
            else:
                yield target, Region("window", top["start_s"], top["end_s"]), Extent(length=entry["seconds"])


def _clear_starts(last: float, width: float, top_start: float, top_end: float) -> list[tuple[float, float]]:
    """The intervals of starts s in [0, last] whose [s, s + width) is clear of [top_start, top_end); all of [0, last]
    when none is."""
    clear = [(lo, hi) for lo, hi in ((0.0, min(last, top_start - width)), (max(0.0, top_end), last)) if lo <= hi]
    return clear or [(0.0, last)]


def _pick_whole(clear: list[tuple[float, float]], rng: np.random.Generator) -> float:
    """A whole number uniform over the whole numbers of the intervals."""
    whole = [(lo, hi) for lo, hi in ((int(np.ceil(lo)), int(np.floor(hi))) for lo, hi in clear) if lo <= hi]
    whole = whole or [(0, 0)]
    pick = int(rng.integers(sum(hi - lo + 1 for lo, hi in whole)))
    for lo, hi in whole:
        if pick <= hi - lo:
            return float(lo + pick)
        pick -= hi - lo + 1
    raise AssertionError("unreachable: pick < the count of whole numbers")


def _pick_start(length: float, width: float, top_start: float, top_end: float, rng: np.random.Generator,
                whole: bool) -> float:
    """A start s in [0, length - width] with [s, s + width) clear of [top_start, top_end) when one exists: uniform
    over the clear starts (whole numbers when `whole`)."""
    clear = _clear_starts(max(0.0, length - width), width, top_start, top_end)
    if whole:
        return _pick_whole(clear, rng)
    sizes = np.array([hi - lo for lo, hi in clear])
    chosen = int(rng.choice(len(clear), p=sizes / sizes.sum())) if sizes.sum() > 0 else int(rng.integers(len(clear)))
    lo, hi = clear[chosen]
    return float(rng.uniform(lo, hi)) if hi > lo else lo


def _random_box(top: tuple[float, float, float, float], extent: Extent, rng: np.random.Generator) -> tuple[float, ...]:
    x0, y0, x1, y1 = top
    width, height = min(x1 - x0, extent.width), min(y1 - y0, extent.height)
    candidate = (0.0, 0.0)
    for _ in range(BOX_TRIES):
        candidate = (float(rng.uniform(0, extent.width - width)), float(rng.uniform(0, extent.height - height)))
        cx, cy = candidate
        if cx + width <= x0 or cx >= x1 or cy + height <= y0 or cy >= y1:
            break
    cx, cy = candidate
    return (cx, cy, cx + width, cy + height)


def random_region(top: Region, extent: Extent, rng: np.random.Generator) -> Region:
    """A region of `top`'s size somewhere else inside `extent`, drawn from `rng`."""
    if top.kind == "box":
        assert top.box is not None
        x0, y0, x1, y1 = _random_box(top.box, extent, rng)
        return Region("box", box=(x0, y0, x1, y1))
    width = min(top.end - top.start, extent.length)
    start = _pick_start(extent.length, width, top.start, top.end, rng, whole=top.kind == "span")
    return Region(top.kind, start, start + width)


def region_rng(seed: int, *keys: int) -> np.random.Generator:
    """The generator of one random region: the run's seed and the region's place (record, target, question)."""
    return np.random.default_rng([seed, *keys])
