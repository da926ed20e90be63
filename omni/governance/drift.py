"""Drift between time windows of logged decisions: answer, confidence and outcome distributions, and their PSI.

Input is plain decision-log records (`{"decided_at", "response": {"answers", "x_outcome"?}, ...}`, as
`omni.serve.decision_log_files.read_records` yields them). Records are bucketed by `decided_at` (UTC) into windows of
`window_s` seconds aligned on the epoch, so the first window is the one holding the first record (1h windows start on
the hour, 1d windows at midnight UTC); every window from the first record's to the last record's is reported, empty
ones too. Per window and question: the answers (noul "true"/"false", choice id, score level index), the confidence in
`bins` equal bins over [0, 1], and, when a policy was on (`x_outcome`), the outcomes act/review/pass per policy version.

Population stability index of a window against its baseline (the first window, or the previous one), per question:
PSI = sum over categories of (a - b) * ln(a / b), where a and b are the window's and the baseline's shares; a
category empty on one side gets the share `PSI_EPSILON` (1e-4) instead of 0 (no renormalisation), so a new or vanished
answer counts as strong drift rather than infinity. The question's PSI is the larger of the PSI of its answers and of
its outcomes (for each policy version present in both windows, the largest: a new policy is not drift), and exists
only where both windows have answers to the question (otherwise null). PSI >= 0.1 is flagged "moderate", >= 0.25
"major". The PSI of the confidence bins is reported beside it with its own flag, not in the question's PSI: with ten
bins it needs hundreds of decisions per window to rise above sampling noise, (bins - 1)(1/n + 1/m) on average for two
samples of the same distribution; `noise_psi` gives that figure for the answers.
Knows nothing of files, argv, HTTP or the model; never imports omni.serve.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from omni.contract.errors import OmniError
from omni.contract.outcomes import OUTCOMES, read_answer
from omni.contract.policy import answer_key

JSONObject = dict[str, Any]
WINDOW_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
WINDOW_PATTERN = re.compile(r"\s*(\d+)\s*([smhdw])\s*")
MAX_WINDOWS = 10_000            # windows between the first and the last record (empty ones count)
MIN_BINS, MAX_BINS = 2, 100
BASELINES = ("first", "previous")
PSI_EPSILON = 1e-4
MODERATE_PSI, MAJOR_PSI = 0.1, 0.25


class DriftError(OmniError):
    """Bad input to a drift report: names the flag or the record at fault, and the limit it broke."""


def parse_window(text: str) -> int:
    """A window length as `<n><unit>` (s, m, h, d, w): 30m, 1h, 6h, 1d. Seconds; DriftError otherwise."""
    match = WINDOW_PATTERN.fullmatch(text)
    if not match or int(match[1]) == 0:
        raise DriftError(f"--window must be a positive whole number and a unit (s, m, h, d, w), such as 30m, 1h, "
                         f"6h or 1d, not {text!r}")
    return int(match[1]) * WINDOW_UNITS_S[match[2]]


def parse_time(text: str, name: str = "time") -> float:
    """An ISO 8601 time or date (no zone: UTC) as epoch seconds; DriftError naming `name` otherwise."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"           # Python 3.10's fromisoformat has no Z
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise DriftError(f"{name} must be an ISO 8601 time such as 2026-12-02T05:00:00Z or a date, "
                         f"not {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class QuestionWindow:
    """One question in one window: counts of answers, of confidence bins, and of outcomes per policy version."""

    type: str
    bins: int
    answers: Counter[str] = field(default_factory=Counter)
    confidence: list[int] = field(default_factory=list)
    outcomes: dict[str, Counter[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.confidence = self.confidence or [0] * self.bins

    @property
    def count(self) -> int:
        return sum(self.answers.values())


@dataclass
class Window:
    start_s: float
    end_s: float
    records: int = 0
    outcomes: dict[str, Counter[str]] = field(default_factory=dict)      # policy version -> overall outcome counts
    questions: dict[str, QuestionWindow] = field(default_factory=dict)


@dataclass
class Collected:
    """Records bucketed into windows (first to last, empty ones included), and each policy version's sha256s."""

    window_s: int
    bins: int
    windows: list[Window] = field(default_factory=list)
    policies: dict[str, set[str]] = field(default_factory=dict)


def collect(records: Iterable[JSONObject], window_s: int, bins: int = 10, since_s: float | None = None,
            until_s: float | None = None) -> Collected:
    """The records in [since_s, until_s) bucketed into consecutive windows (see the module docstring); no windows
    if no record is in range."""
    if window_s < 1:
        raise DriftError(f"--window must be at least 1 second, not {window_s}")
    if not MIN_BINS <= bins <= MAX_BINS:
        raise DriftError(f"--bins must be between {MIN_BINS} and {MAX_BINS}, not {bins}")
    collected = Collected(window_s, bins)
    by_index: dict[int, Window] = {}
    low = high = 0
    for record in records:
        at_s = _decided_at_s(record)
        if (since_s is not None and at_s < since_s) or (until_s is not None and at_s >= until_s):
            continue
        index = math.floor(at_s / window_s)
        window = by_index.get(index)
        if window is None:
            low, high = (min(low, index), max(high, index)) if by_index else (index, index)
            if high - low >= MAX_WINDOWS:
                raise DriftError(f"--window of {window_s} s makes more than {MAX_WINDOWS} windows between the first "
                                 f"and the last record: choose a longer window or a shorter --since/--until range")
            window = by_index[index] = Window(index * window_s, (index + 1) * window_s)
        _add(window, record, bins, collected.policies)
    if by_index:
        collected.windows = [by_index.get(i) or Window(i * window_s, (i + 1) * window_s)
                             for i in range(low, high + 1)]
    return collected


def _decided_at_s(record: JSONObject) -> float:
    value = record.get("decided_at")
    if not isinstance(value, str):
        raise DriftError(f"record {record.get('request_id')!r}: decided_at is not a time ({value!r})")
    try:
        return parse_time(value)
    except DriftError:
        raise DriftError(f"record {record.get('request_id')!r}: decided_at {value!r} is not an ISO 8601 time") \
            from None


def _add(window: Window, record: JSONObject, bins: int, policies: dict[str, set[str]]) -> None:
    window.records += 1
    response = record.get("response")
    response = response if isinstance(response, dict) else {}
    answers = response.get("answers")
    for qid, answer in (answers.items() if isinstance(answers, dict) else ()):
        if not isinstance(answer, dict):
            continue
        try:
            chosen, confidence = read_answer(answer)
        except (ValueError, KeyError, TypeError, AssertionError):
            continue                            # not a System One answer: nothing to count
        question = window.questions.setdefault(qid, QuestionWindow(str(answer["type"]), bins))
        question.answers[answer_key(chosen)] += 1
        question.confidence[min(max(int(confidence * bins), 0), bins - 1)] += 1
    outcome = response.get("x_outcome")
    if not isinstance(outcome, dict):
        return
    policy = outcome.get("policy")
    policy = policy if isinstance(policy, dict) else {}
    version = str(policy.get("version"))
    policies.setdefault(version, set()).add(str(policy.get("sha256")))
    if outcome.get("overall") in OUTCOMES:
        window.outcomes.setdefault(version, Counter())[outcome["overall"]] += 1
    questions = outcome.get("questions")
    for qid, one in (questions.items() if isinstance(questions, dict) else ()):
        if qid in window.questions and isinstance(one, dict) and one.get("outcome") in OUTCOMES:
            window.questions[qid].outcomes.setdefault(version, Counter())[one["outcome"]] += 1


def psi(current: Mapping[str, int] | list[int], baseline: Mapping[str, int] | list[int],
        epsilon: float = PSI_EPSILON) -> float | None:
    """The population stability index of `current` counts against `baseline` counts (same categories: keys, or list
    positions); None when either side is empty. Empty categories get the share `epsilon`."""
    now, then = _counts(current), _counts(baseline)
    now_total, then_total = sum(now.values()), sum(then.values())
    if now_total <= 0 or then_total <= 0:
        return None
    total = 0.0
    for key in now.keys() | then.keys():
        a = max(now.get(key, 0) / now_total, epsilon)
        b = max(then.get(key, 0) / then_total, epsilon)
        total += (a - b) * math.log(a / b)
    return total


def _counts(counts: Mapping[str, int] | list[int]) -> dict[str, int]:
    return {str(i): n for i, n in enumerate(counts)} if isinstance(counts, list) else dict(counts)


def flag(value: float | None) -> str | None:
    if value is None:
        return None
    return "major" if value >= MAJOR_PSI else "moderate" if value >= MODERATE_PSI else None


def question_psi(now: QuestionWindow | None, then: QuestionWindow | None) -> JSONObject | None:
    """PSI of answers, of outcomes (largest over shared policy versions) and of confidence; the question's PSI is the
    larger of the first two. `noise_psi`: what answers alone would score by sampling, (k - 1)(1/n + 1/m)."""
    if now is None or then is None or not now.count or not then.count:
        return None
    shared = [psi(now.outcomes[v], then.outcomes[v]) for v in sorted(now.outcomes.keys() & then.outcomes.keys())]
    values = [value for value in shared if value is not None]
    parts = {"answers": psi(now.answers, then.answers), "outcomes": max(values) if values else None}
    worst = "outcomes" if (parts["outcomes"] or 0.0) > (parts["answers"] or 0.0) else "answers"
    confidence = psi(now.confidence, then.confidence)
    categories = len(now.answers.keys() | then.answers.keys())
    return {"psi": _round(parts[worst]), "flag": flag(parts[worst]), "drift_in": worst,
            "psi_answers": _round(parts["answers"]), "psi_outcomes": _round(parts["outcomes"]),
            "psi_confidence": _round(confidence), "flag_confidence": flag(confidence),
            "noise_psi": _round((categories - 1) * (1 / now.count + 1 / then.count))}


def drift_report(collected: Collected, baseline: str = "first") -> JSONObject:
    """The report as one JSON object: `windows` (counts and PSI per question) and `questions` (a summary each)."""
    windows = collected.windows
    if baseline not in BASELINES:
        raise DriftError(f"--baseline must be one of {', '.join(BASELINES)}, not {baseline!r}")
    qids = sorted({qid for window in windows for qid in window.questions})
    wire_windows = []
    for index, window in enumerate(windows):
        base_index = 0 if baseline == "first" else index - 1
        base = windows[base_index] if 0 <= base_index != index else None
        questions = {}
        for qid, one in window.questions.items():
            drift = question_psi(one, base.questions.get(qid)) if base is not None else None
            questions[qid] = {"type": one.type, "count": one.count, "answers": dict(sorted(one.answers.items())),
                              "confidence": one.confidence,
                              "outcomes": {v: _outcome_counts(c) for v, c in sorted(one.outcomes.items())},
                              **(drift or {"psi": None, "flag": None})}
        scored = [(q["psi"], qid) for qid, q in questions.items() if q["psi"] is not None]
        top = min(scored, key=lambda pair: (-pair[0], pair[1]), default=None)      # ties: the first id
        wire_windows.append({
            "start": iso(window.start_s), "end": iso(window.end_s), "records": window.records,
            "baseline": iso(base.start_s) if base is not None else None,
            "outcomes": {v: _outcome_counts(c) for v, c in sorted(window.outcomes.items())},
            "most_drifting": {"question": top[1], "psi": top[0], "flag": flag(top[0])} if top else None,
            "questions": dict(sorted(questions.items()))})
    return {"window_seconds": collected.window_s, "baseline": baseline, "bins": collected.bins,
            "psi_epsilon": PSI_EPSILON,
            "thresholds": {"moderate": MODERATE_PSI, "major": MAJOR_PSI},
            "records": sum(w.records for w in windows),
            "start": iso(windows[0].start_s) if windows else None, "end": iso(windows[-1].end_s) if windows else None,
            "policies": {v: sorted(shas) for v, shas in sorted(collected.policies.items())},
            "windows": wire_windows, "questions": {qid: _summary(qid, wire_windows) for qid in qids}}


def _summary(qid: str, windows: list[JSONObject]) -> JSONObject:
    present = [w for w in windows if qid in w["questions"]]
    answers: Counter[str] = Counter()
    for window in present:
        answers.update(window["questions"][qid]["answers"])
    scored = [(w["questions"][qid]["psi"], w["start"]) for w in present if w["questions"][qid]["psi"] is not None]
    worst = max(scored, key=lambda pair: pair[0], default=None)     # the earliest of equal values
    return {"type": present[0]["questions"][qid]["type"], "windows": len(present),
            "count": sum(answers.values()), "answers": dict(sorted(answers.items())),
            "max_psi": worst[0] if worst else None, "max_psi_window": worst[1] if worst else None,
            "flag": flag(worst[0]) if worst else None}


def most_drifting(report: JSONObject, top: int) -> list[str]:
    """The `top` questions by largest PSI (questions without one last), ties by id."""
    questions = report["questions"]
    return sorted(questions, key=lambda qid: (questions[qid]["max_psi"] is None,
                                              -(questions[qid]["max_psi"] or 0.0), qid))[:top]


def _outcome_counts(counts: Counter[str]) -> dict[str, int]:
    return {name: counts.get(name, 0) for name in OUTCOMES}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
