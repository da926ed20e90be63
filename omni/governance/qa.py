"""How right the automatic decisions are, from QA samples: per question, the share of sampled automatic answers the
reviewers' labels agree with (the automatic precision), a 95% Wilson interval, the target it must keep, and the same
per time window.

The samples are the decisions a server kept in its review directory with the route queue "qa" (omni/contract/qa.py
chose them). A sampled question counts once a reviewer labelled it (k >= 2: the consensus or the adjudication);
its automatic answer is right when the label is that answer. Windows are of the decision's time (its audit record's
`decided_at`), on the epoch grid. A question is *below target* when the whole interval is under its target: the
evidence says precision has fallen, not merely that the sample is small.
Knows nothing of HTTP, the model, files, review directories (it is handed the kept decisions and their labels) or how
the samples were drawn.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

from omni.contract.json_values import JSONObject
from omni.contract.policy import answer_key

Z_95 = 1.959963984540054


def wilson(correct: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (0, 1 when n is 0)."""
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Tally:
    sampled: int = 0          # drawn for QA
    labelled: int = 0         # of them, labelled by reviewers
    correct: int = 0          # of them, the label is the automatic answer
    by_outcome: dict[str, list[int]] = field(default_factory=dict)   # act / pass -> [labelled, correct]

    def add(self, labelled: bool, correct: bool, outcome: str) -> None:
        self.sampled += 1
        if labelled:
            self.labelled += 1
            self.correct += correct
            pair = self.by_outcome.setdefault(outcome, [0, 0])
            pair[0] += 1
            pair[1] += correct

    def to_wire(self, target: float | None) -> JSONObject:
        low, high = wilson(self.correct, self.labelled)
        return {"sampled": self.sampled, "labelled": self.labelled, "correct": self.correct,
                "precision": round(self.correct / self.labelled, 4) if self.labelled else None,
                "interval": [round(low, 4), round(high, 4)], "target": target,
                "below_target": bool(target is not None and self.labelled and high < target),
                "by_outcome": {o: {"labelled": n, "correct": c, "precision": round(c / n, 4)}
                               for o, (n, c) in sorted(self.by_outcome.items())}}


def qa_report(kept: Iterable[tuple[JSONObject, Mapping[str, str]]],
              target_of: Callable[[str], float | None] = lambda qid: None, window_s: float = 86400.0) -> JSONObject:
    """`kept`: a review directory's kept decisions, each with its reviewers' labels as label ids
    (`ReviewDir.kept_with_labels()`). {"questions": {qid: tally}, "windows": [{"start", "questions": {qid: tally}}],
    "alerts": [text], "seeds": [...], "window_s"}."""
    overall: dict[str, Tally] = {}
    windows: dict[int, dict[str, Tally]] = {}
    seeds: set[int] = set()
    for decision, labels in kept:
        route = decision.get("x_route")
        if not isinstance(route, dict) or route.get("queue") != "qa" or not isinstance(route.get("qa"), dict):
            continue
        qa = route["qa"]
        if isinstance(qa.get("seed"), int):
            seeds.add(qa["seed"])
        start = _window_start(decision.get("audit"), window_s)
        for qid, checked in (qa.get("questions") or {}).items():
            if not isinstance(checked, dict):
                continue
            label = labels.get(qid)
            correct = label is not None and label == answer_key(checked.get("answer"))   # type: ignore[arg-type]
            outcome = str(checked.get("outcome"))
            overall.setdefault(qid, Tally()).add(label is not None, correct, outcome)
            if start is not None:
                windows.setdefault(start, {}).setdefault(qid, Tally()).add(label is not None, correct, outcome)
    questions = {qid: tally.to_wire(target_of(qid)) for qid, tally in sorted(overall.items())}
    alerts = [f"{qid}: automatic precision {row['precision']:.3f} (95% interval {row['interval'][0]:.3f}-"
              f"{row['interval'][1]:.3f}, {row['labelled']} labelled) is below its target {row['target']:.3f}"
              for qid, row in questions.items() if row["below_target"]]
    return {"questions": questions, "alerts": alerts, "seeds": sorted(seeds), "window_s": window_s,
            "windows": [{"start": datetime.fromtimestamp(start, timezone.utc).isoformat().replace("+00:00", "Z"),
                         "questions": {qid: t.to_wire(target_of(qid)) for qid, t in sorted(tallies.items())}}
                        for start, tallies in sorted(windows.items())]}


def _window_start(audit: object, window_s: float) -> int | None:
    stamp = audit.get("decided_at") if isinstance(audit, dict) else None
    if not isinstance(stamp, str):
        return None
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    seconds = moment.timestamp()
    return int(seconds - seconds % window_s)
