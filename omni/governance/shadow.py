"""Shadow scoring, reported: a live model's answers beside a candidate's on the same logged requests.

Input is plain decision-log records that carry a `"shadow"` block (`omni serve --shadow LIVE=CANDIDATE`; its shape is
in `omni.serve.decision_log`), each with where it was read (`FILE:LINE`, for errors), and optionally reviewers'
labels keyed by request id ({request id: {question: label}}, labels as the dataset writes them or as label ids).
The live side is the record's `response` (`model`, `answers`, `x_outcome`); the candidate's is the block. Records
without a block are counted, not read. One report covers one (live, candidate) pair; a log holding several needs one
chosen (`pair`), or `ShadowError` lists them.

Per question, over the records where both sides answered it:
- `agreement`: the share whose top answers (as label ids: noul "true"/"false", choice id, score level) are equal,
  with a two-sided Wilson score interval at `level` (95 %);
- `mean_abs_delta_p`: the mean of |p_candidate(o) - p_live(o)|, o the live top answer: how far the candidate moves
  the probability of the answer in force (on agreement, the change of confidence). Both sides are read from their
  System One answers (rounded alike); the block's unrounded `probabilities` are left to replay;
- `flips`: when both sides carry an outcome for the question, a 3x3 table live outcome -> candidate outcome (act,
  review, pass) and `flipped`, the off-diagonal count; the same for the overall outcome in the report's `flips`;
- `reviewed`, on records whose request id has a label for the question: each side's accuracy (top answer = label),
  ECE (top-label, `omni.learn.metrics`' 15 bins) and Brier (multi-class form), with n; pooled over all questions in
  the report's `reviewed`, with the reliability bins the figure draws. A label that is not one of the question's
  answers is counted in `labels_ignored`, not scored.
Knows nothing of files, argv, HTTP, the review directory or the model; never imports omni.serve or omni.review.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from omni.contract.answers import label_id, top_answer
from omni.contract.errors import OmniError
from omni.contract.outcomes import OUTCOMES

JSONObject = dict[str, Any]
LEVEL = 0.95
SIDES = ("live", "candidate")


class ShadowError(OmniError):
    """Bad input to a shadow report: a malformed shadow block (named by file and line), no shadow record at all, or
    an ambiguous or unknown pair."""


def wilson_interval(successes: int, n: int, level: float = LEVEL) -> tuple[float, float] | None:
    """The two-sided Wilson score interval of a proportion successes / n at `level`; None when n is 0."""
    if n <= 0:
        return None
    z = NormalDist().inv_cdf(0.5 + level / 2)
    share = successes / n
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def distribution(answer: JSONObject) -> dict[str, float]:
    """One System One answer as {label id: p} in its own order (noul: true, false)."""
    if answer.get("type") == "noul":
        p = float(answer["noul"])
        return {"true": p, "false": 1.0 - p}
    probabilities = answer.get("probabilities")
    if not isinstance(probabilities, dict) or not probabilities:
        raise ValueError("no probabilities")
    return {str(option): float(p) for option, p in probabilities.items()}


@dataclass
class Scored:
    """One side's answer to one reviewed question: its distribution and the label."""

    distribution: dict[str, float]
    label: str


@dataclass
class QuestionTally:
    type: str
    n: int = 0
    agree: int = 0
    delta_p: float = 0.0
    flips: Counter[tuple[str, str]] = field(default_factory=Counter)
    reviewed: dict[str, list[Scored]] = field(default_factory=lambda: {side: [] for side in SIDES})
    labels_ignored: int = 0


@dataclass
class ShadowTally:
    """What `collect` gathered for one pair: per question tallies, overall flips, the candidate's adapter hashes."""

    live: str
    candidate: str
    records: int = 0
    reviewed_records: int = 0
    adapter_sha256: set[str | None] = field(default_factory=set)
    flips: Counter[tuple[str, str]] = field(default_factory=Counter)
    questions: dict[str, QuestionTally] = field(default_factory=dict)


@dataclass
class Collected:
    tally: ShadowTally | None
    records: int                                  # every record read
    pairs: dict[tuple[str, str], int]             # (live, candidate) -> shadow records


def collect(records: Iterable[tuple[str, JSONObject]], labels: Mapping[str, Mapping[str, Any]] | None = None,
            pair: tuple[str, str] | None = None) -> Collected:
    """Tally the shadow records of `pair` (None: the only pair in the log). `records`: (where, record) pairs,
    `where` naming the file and line for errors. ShadowError for a malformed block or a pair that is not there."""
    labels = labels or {}
    tallies: dict[tuple[str, str], ShadowTally] = {}
    pairs: Counter[tuple[str, str]] = Counter()
    read = 0
    for where, record in records:
        read += 1
        if record.get("shadow") is None:
            continue
        live, shadow = _sides(where, record)
        key = (str(live.get("model")), str(shadow.get("model")))
        pairs[key] += 1
        if pair is None or key == pair:
            tally = tallies.setdefault(key, ShadowTally(*key))
            _add(tally, where, record, live, shadow, labels)
    return Collected(_chosen(tallies, pairs, pair), read, dict(pairs))


def _chosen(tallies: dict[tuple[str, str], ShadowTally], pairs: Counter[tuple[str, str]],
            pair: tuple[str, str] | None) -> ShadowTally | None:
    if len(tallies) > 1:
        listed = ", ".join(f"{live}={candidate} ({n} records)" for (live, candidate), n in sorted(pairs.items()))
        raise ShadowError(f"the log holds shadow records of {len(tallies)} pairs: {listed}; choose one with "
                          f"--pair LIVE=CANDIDATE")
    if pair is not None and not tallies and pairs:
        listed = ", ".join(f"{live}={candidate}" for live, candidate in sorted(pairs))
        raise ShadowError(f"no shadow record of the pair {pair[0]}={pair[1]}; the log holds {listed}")
    return next(iter(tallies.values()), None)


def _sides(where: str, record: JSONObject) -> tuple[JSONObject, JSONObject]:
    shadow, response = record.get("shadow"), record.get("response")
    if not isinstance(shadow, dict):
        raise ShadowError(f"{where}: the shadow block is not an object")
    if not isinstance(response, dict) or not isinstance(response.get("answers"), dict):
        raise ShadowError(f"{where}: a shadow record whose response has no answers")
    for name in ("model", "answers"):
        if name not in shadow:
            raise ShadowError(f"{where}: the shadow block has no {name!r}")
    if not isinstance(shadow["answers"], dict):
        raise ShadowError(f"{where}: the shadow block's answers are not an object")
    return response, shadow


def _add(tally: ShadowTally, where: str, record: JSONObject, live: JSONObject, shadow: JSONObject,
         labels: Mapping[str, Mapping[str, Any]]) -> None:
    tally.records += 1
    tally.adapter_sha256.add(shadow.get("adapter_sha256"))
    outcomes = (_outcomes(live.get("x_outcome")), _outcomes(shadow.get("x_outcome")))
    if outcomes[0][0] is not None and outcomes[1][0] is not None:
        tally.flips[(outcomes[0][0], outcomes[1][0])] += 1
    request_id = record.get("request_id")
    mine = labels.get(request_id, {}) if isinstance(request_id, str) else {}
    tally.reviewed_records += bool(mine)
    for qid, answer in live["answers"].items():
        other = shadow["answers"].get(qid)
        if other is None:
            continue
        try:
            sides = (distribution(answer), distribution(other))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ShadowError(f"{where}: question {qid!r}: not a System One answer on both sides ({exc})") from None
        question = tally.questions.setdefault(qid, QuestionTally(str(answer.get("type"))))
        _add_question(question, answer, other, sides)
        flip = (outcomes[0][1].get(qid), outcomes[1][1].get(qid))
        if flip[0] is not None and flip[1] is not None:
            question.flips[(flip[0], flip[1])] += 1
        if qid in mine:
            _add_label(question, sides, label_id(mine[qid]))


def _add_question(question: QuestionTally, answer: JSONObject, other: JSONObject,
                  sides: tuple[dict[str, float], dict[str, float]]) -> None:
    top = top_answer(answer)
    question.n += 1
    question.agree += top == top_answer(other)
    if top is not None:
        question.delta_p += abs(sides[1].get(top, 0.0) - sides[0].get(top, 0.0))


def _add_label(question: QuestionTally, sides: tuple[dict[str, float], dict[str, float]], label: str) -> None:
    if any(label not in side for side in sides):
        question.labels_ignored += 1
        return
    for name, side in zip(SIDES, sides, strict=True):
        question.reviewed[name].append(Scored(side, label))


def _outcomes(outcome: object) -> tuple[str | None, dict[str, str]]:
    """(overall, {question: outcome}) of an `x_outcome`; (None, {}) when there is none."""
    if not isinstance(outcome, dict):
        return None, {}
    overall = outcome.get("overall") if outcome.get("overall") in OUTCOMES else None
    questions = outcome.get("questions")
    per_question = {qid: one["outcome"] for qid, one in (questions.items() if isinstance(questions, dict) else ())
                    if isinstance(one, dict) and one.get("outcome") in OUTCOMES}
    return overall, per_question


# ------------------------------------------------------------------------------------------------ the report
def shadow_report(collected: Collected, level: float = LEVEL) -> JSONObject:
    """The report as one JSON object (see the module docstring); ShadowError when no record had a shadow block."""
    tally = collected.tally
    if tally is None:
        raise ShadowError(f"no shadow record among {collected.records} decision-log records (was the server run "
                          f"with --shadow LIVE=CANDIDATE?)")
    questions = {qid: _question(one, level) for qid, one in sorted(tally.questions.items())}
    pooled = {side: [row for one in tally.questions.values() for row in one.reviewed[side]] for side in SIDES}
    return {"live": tally.live, "candidate": tally.candidate,
            "candidate_adapter_sha256": sorted(tally.adapter_sha256, key=lambda sha: (sha is None, sha or "")),
            "records": collected.records, "shadow_records": tally.records,
            "reviewed_records": tally.reviewed_records, "level": level,
            "outcomes": list(OUTCOMES), "flips": _flip_table(tally.flips),
            "reviewed": _reviewed(pooled, with_bins=True), "questions": questions}


def _question(one: QuestionTally, level: float) -> JSONObject:
    interval = wilson_interval(one.agree, one.n, level)
    flips = _flip_table(one.flips)
    return {"type": one.type, "n": one.n, "agree": one.agree, "agreement": _round(one.agree / one.n),
            "agreement_interval": [_round(bound) for bound in interval] if interval else None,
            "mean_abs_delta_p": _round(one.delta_p / one.n), "flips": flips,
            "flipped": None if flips is None else sum(one.flips[(a, b)] for a in OUTCOMES for b in OUTCOMES if a != b),
            "reviewed": _reviewed(one.reviewed, with_bins=False), "labels_ignored": one.labels_ignored}


def _flip_table(flips: Counter[tuple[str, str]]) -> dict[str, dict[str, int]] | None:
    if not flips:
        return None
    return {live: {candidate: flips[(live, candidate)] for candidate in OUTCOMES} for live in OUTCOMES}


def _reviewed(rows: Mapping[str, list[Scored]], with_bins: bool) -> JSONObject | None:
    n = len(rows["live"])
    if not n:
        return None
    return {"n": n, **{side: _calibration(rows[side], with_bins) for side in SIDES}}


def _calibration(rows: list[Scored], with_bins: bool) -> JSONObject:
    """Accuracy, ECE and Brier of one side's reviewed answers (rows padded to the union of their options)."""
    from omni.learn.metrics import accuracy, brier_score, expected_calibration_error, reliability_bins

    options: dict[str, None] = {}
    for row in rows:
        options.update(dict.fromkeys(row.distribution))
    columns = list(options)                       # first seen order: argmax ties fall as top_answer's
    matrix = [[row.distribution.get(option, 0.0) for option in columns] for row in rows]
    truth = [columns.index(row.label) for row in rows]
    figures: JSONObject = {"accuracy": _round(accuracy(matrix, truth)),
                           "ece": _round(expected_calibration_error(matrix, truth)),
                           "brier": _round(brier_score(matrix, truth))}
    if with_bins:
        table = reliability_bins(matrix, truth)
        figures["bins"] = {"edges": [_round(float(e)) for e in table.edges],
                           "counts": [int(c) for c in table.counts],
                           "mean_confidence": [_finite(float(v)) for v in table.mean_confidence],
                           "accuracy": [_finite(float(v)) for v in table.accuracy]}
    return figures


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else _round(value)


def _round(value: float) -> float:
    return round(value, 6)
