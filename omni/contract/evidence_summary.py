"""What of a decision's `x_evidence` is kept (docs/evidence.md, "Kept"): its summary, and two summaries compared.

`evidence_summary(x_evidence, top)` keeps, per question, the chosen `answer`, its `share` per modality and its top
items only: the state's `spans` (with `chars`, `covered_chars`), each image's `boxes` (with its size), each audio
clip's `windows`, each video's `moments` with their boxes and its soundtrack's `windows`. It drops everything that
grows with the input: heat maps, grids, `per_second`, timelines, and the per-option maps of `"options": "all"`. It is
what the decision log keeps, what `omni replay` recomputes and compares, and what a statement's facts are read from.

`LOGGED_ASK` is the ask a decision is explained with when its caller did not ask for evidence but the decision log
keeps it (a decision a policy routes to review): the default of `"x_evidence": true`.

`summary_differences(logged, replayed, tolerance)`: every `weight` (and every share) may differ by `tolerance`;
everything else (answers, spans' characters, boxes' pixels, moments' and windows' seconds, how many of each) must be
equal. Knows nothing of the model, the log's files, HTTP or policies: JSON in, JSON out.
"""
from __future__ import annotations

from omni.contract.json_values import JSONObject, JSONValue
from omni.contract.types import EvidenceAsk

LOGGED_ASK = EvidenceAsk()
SUMMARY_FORMAT = "evidence-summary/1"
_ROUNDING_SLACK = 1e-9           # weights are rounded to 6 decimals: a difference of one unit must count as 1e-6


def evidence_summary(evidence: JSONObject, top: int) -> JSONObject:
    """The summary of one `x_evidence` object, explained with `top` items of each kind."""
    questions = evidence.get("questions") or {}
    return {"format": SUMMARY_FORMAT, "method": evidence.get("method"), "top": top,
            "questions": {qid: _question(entry) for qid, entry in questions.items()}}


def _question(entry: JSONObject) -> JSONObject:
    state = entry.get("state") or {}
    return {"answer": entry.get("answer"), "share": dict(entry.get("share") or {}),
            "state": {key: state.get(key) for key in ("chars", "covered_chars", "spans")},
            "images": [_pick(image, "index", "width", "height", "boxes") for image in entry.get("images") or []],
            "audio": [_pick(clip, "index", "seconds", "windows") for clip in entry.get("audio") or []],
            "videos": [_video(video) for video in entry.get("videos") or []]}


def _video(video: JSONObject) -> JSONObject:
    soundtrack = video.get("soundtrack")
    return {**_pick(video, "index", "width", "height", "seconds", "moments"),
            "soundtrack": _pick(soundtrack, "seconds", "windows") if isinstance(soundtrack, dict) else None}


def _pick(value: JSONObject, *keys: str) -> JSONObject:
    return {key: value.get(key) for key in keys}


def summary_differences(logged: JSONValue, replayed: JSONValue,
                        tolerance: float) -> tuple[float | None, list[str]]:
    """(the largest |difference| of a weight, or None when none was compared; what differs, one line each, with
    its path: `questions.fan_running.videos[0].moments[0].start_s: 7.0 logged, 1.0 replayed`)."""
    comparison = _Comparison(tolerance)
    comparison.walk(logged, replayed, "", weighed=False)
    return (max(comparison.diffs) if comparison.diffs else None), comparison.found


class _Comparison:
    """Two JSON values walked side by side: numbers under a `weight` key or in a `share` by |difference|, the rest
    exactly."""

    def __init__(self, tolerance: float) -> None:
        self.tolerance = tolerance
        self.diffs: list[float] = []
        self.found: list[str] = []

    def walk(self, before: JSONValue, after: JSONValue, path: str, weighed: bool) -> None:
        if isinstance(before, dict) and isinstance(after, dict):
            if set(before) != set(after):
                self.found.append(f"{path or 'the summary'}: keys {sorted(before)} logged, {sorted(after)} replayed")
                return
            for key in before:
                self.walk(before[key], after[key], f"{path}.{key}" if path else key,
                          weighed or key in ("weight", "share"))
        elif isinstance(before, list) and isinstance(after, list):
            if len(before) != len(after):
                self.found.append(f"{path}: {len(before)} logged, {len(after)} replayed")
                return
            for i, (one, other) in enumerate(zip(before, after, strict=True)):
                self.walk(one, other, f"{path}[{i}]", weighed)
        elif weighed and _number(before) and _number(after):
            diff = abs(float(before) - float(after))
            self.diffs.append(diff)
            if diff > self.tolerance + _ROUNDING_SLACK:
                self.found.append(f"{path}: {before!r} logged, {after!r} replayed (|difference| {diff:.3g})")
        elif before != after or isinstance(before, bool) != isinstance(after, bool):
            self.found.append(f"{path or 'the summary'}: {before!r} logged, {after!r} replayed")


def _number(value: JSONValue) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
