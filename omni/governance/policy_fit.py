"""Thresholds from evidence: per question, the lowest `auto_at` whose automatic answers reach a target precision with
a one-sided lower confidence bound (Clopper–Pearson), fitted on a model's answers to labelled data.

Each labelled answer is (answer, confidence, correct): the System One answer the server would give (`build_answers`
with the engine's confidence formula and decimals), read as the policy reads it (`read_answer`), compared with the
label. For a bar t the automatic answers are A(t) = {confidence >= t} (the outcome rule: below the bar -> review),
n = |A(t)|, k = the correct ones, precision k / n, coverage n / all labelled, and the lower bound
L(t) = the (1 - level) quantile of Beta(k, n - k + 1) (0 when k = 0); with no error it is (1 - level)^(1/n).

The rule: the candidate bars are the confidences observed; `auto_at` is the LOWEST candidate t with L(t) >= target.
It is a property of the set a bar automates, A(auto_at), not of every bar above it (the top bars hold a handful of
answers and never qualify: one correct answer bounds precision at 1 - level). Consequences (tested): a higher target
or level never lowers `auto_at`; one more correct answer never raises it and one more wrong one never lowers it;
answers tied at a bar are automatic together. The bound is that of the chosen set; choosing it among many bars is
not corrected for (a data set fitted on is optimistic: check the policy on held-out data, `omni policy check --on`).
When no bar qualifies, `auto_at = 1.0` (a bar of 1.0 sends every answer to review) and the fit says
why: the best bound reached and, when the question had no error at all, the labelled answers that would be needed,
the smallest n with (1 - level)^(1/n) >= target.

Per medium (`per_modality`): for each medium (image, audio, video) some of a question's requests carry, the same rule
on the answers of the requests that carry it; written as `auto_at_with[medium]` only when that subset supports a bar
AND the bar is stricter than the question's `auto_at` (the server takes the strictest bar that applies). A medium
whose subset supports no bar gets none (the base bar applies) and the fit says so.
Pure numpy/scipy: knows nothing of torch, the model, files, argv or HTTP.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from omni.contract.answers import build_answers
from omni.contract.config import EngineConfig
from omni.contract.errors import OmniError
from omni.contract.json_values import JSONObject
from omni.contract.outcomes import decide_outcome, read_answer
from omni.contract.policy import MODALITIES, Policy, QuestionPolicy, answer_key
from omni.contract.types import Answer, Question


class PolicyFitError(OmniError):
    """A fit that cannot be made: a bad target or level, a question whose type differs between records or from the
    existing policy."""


@dataclass(frozen=True)
class AnsweredQuestion:
    """One labelled question of one record, answered as the server would answer it."""

    line: int                                 # the record's line in the data (one decision)
    question_id: str
    question_type: str
    options: tuple[str, ...]                  # the question's answers (request order; score: level indexes)
    answer: JSONObject                        # the System One answer
    chosen: Answer
    confidence: float
    label: str                                # the label as an answer key: "true", a choice id, a level index
    modalities: frozenset[str] = frozenset()  # media the request carried (image, audio, video)

    @property
    def correct(self) -> bool:
        return answer_key(self.chosen) == self.label


def answered(question: Question, head_order_probabilities: Iterable[float], label: str, line: int,
             modalities: Iterable[str] = (), config: EngineConfig | None = None) -> AnsweredQuestion:
    """The server's answer to `question` for these probabilities (head order), with its label."""
    config = config or EngineConfig()
    probabilities = [float(p) for p in head_order_probabilities]
    answer = build_answers([question], [probabilities], confidence=config.confidence,
                           decimals=config.probability_decimals)[question.id]
    chosen, confidence = read_answer(answer)
    return AnsweredQuestion(line, question.id, question.type, tuple(o.id for o in question.options), answer, chosen,
                            confidence, label, frozenset(modalities))


# ------------------------------------------------------------------------------------------------ statistics
def lower_bound(correct: int, automatic: int, level: float) -> float:
    """Clopper–Pearson one-sided lower confidence bound of a precision of correct / automatic at `level`."""
    if correct <= 0 or automatic <= 0:
        return 0.0
    from scipy.stats import beta  # here, not at import: `omni policy check` never needs it (0.85 s)

    return float(beta.ppf(1.0 - level, correct, automatic - correct + 1))


def needed_sample_size(target: float, level: float) -> int | None:
    """The fewest answers, all correct, whose lower bound reaches `target` (None for a target of 1 or more)."""
    if target >= 1.0:
        return None
    if target <= 0.0:
        return 1
    n = max(1, math.ceil(math.log(1.0 - level) / math.log(target)))
    while lower_bound(n, n, level) < target:                  # the closed form, settled by the bound itself
        n += 1
    while n > 1 and lower_bound(n - 1, n - 1, level) >= target:
        n -= 1
    return n


@dataclass(frozen=True)
class CurvePoint:
    """The answers automatic at one bar."""

    auto_at: float
    automatic: int
    correct: int
    coverage: float
    precision: float
    lower_bound: float


def precision_curve(confidences: Sequence[float], correct: Sequence[bool], level: float) -> list[CurvePoint]:
    """One point per distinct confidence (a candidate bar), highest bar first."""
    conf = np.asarray(confidences, dtype=np.float64)
    if conf.size == 0:
        return []
    order = np.argsort(-conf, kind="stable")
    descending = conf[order]
    right = np.cumsum(np.asarray(correct, dtype=np.int64)[order])
    bars = np.unique(conf)[::-1]
    automatic = np.searchsorted(-descending, -bars, side="right")       # answers with confidence >= bar
    k = right[automatic - 1]
    from scipy.stats import beta

    bounds = np.where(k > 0, beta.ppf(1.0 - level, np.maximum(k, 1), automatic - k + 1), 0.0)
    return [CurvePoint(float(t), int(n), int(c), float(n / conf.size), float(c / n), float(b))
            for t, n, c, b in zip(bars, automatic, k, bounds, strict=True)]


def choose(curve: Sequence[CurvePoint], target: float) -> CurvePoint | None:
    """The lowest bar whose automatic answers have a lower bound >= target; None when no bar has."""
    qualifying = [point for point in curve if point.lower_bound >= target]
    return min(qualifying, key=lambda point: point.auto_at) if qualifying else None


def check_target(target: float, level: float) -> None:
    if not (isinstance(target, float | int) and 0.0 < target < 1.0):
        raise PolicyFitError(f"target_precision: {target!r} must be between 0 and 1 (exclusive): no finite set of "
                             "answers bounds a precision of 1")
    if not (isinstance(level, float | int) and 0.0 < level < 1.0):
        raise PolicyFitError(f"confidence_level: {level!r} must be between 0 and 1 (exclusive), e.g. 0.95")


# ------------------------------------------------------------------------------------------------ one question
@dataclass(frozen=True)
class QuestionFit:
    question_id: str
    question_type: str
    labelled: int
    auto_at: float                               # 1.0 when nothing qualifies
    chosen: CurvePoint | None                    # the automatic answers at auto_at (None: unsupported)
    best: CurvePoint | None                      # the highest lower bound reached (None: no answers)
    needed: int | None                           # answers needed, when there was no error and too few
    target: float
    level: float
    curve: list[CurvePoint] = field(repr=False, default_factory=list)
    by_medium: dict[str, QuestionFit] = field(default_factory=dict)
    auto_at_with: dict[str, float] = field(default_factory=dict)   # the stricter per-medium bars written

    @property
    def supported(self) -> bool:
        return self.chosen is not None

    def verdict(self) -> str:
        """One sentence: the bar and what it automates, or why no bar can be supported."""
        if self.chosen is not None:
            c = self.chosen
            return (f"auto_at {c.auto_at:.4f}: {c.automatic} of {self.labelled} answers automatic (coverage "
                    f"{c.coverage:.3f}), precision {c.precision:.4f}, lower bound {c.lower_bound:.4f} >= "
                    f"{self.target}")
        if self.best is None:
            return "no labelled answers: auto_at = 1.0, everything to review"
        b = self.best
        head = (f"cannot support precision {self.target} at {self.level:.0%} confidence: auto_at = 1.0, everything "
                f"to review. Best lower bound {b.lower_bound:.4f} (auto_at {b.auto_at:.4f}: {b.correct} correct of "
                f"{b.automatic})")
        if self.needed is not None:
            return (f"{head}; no error in {self.labelled} answers, but that is too few: {self.needed} answers, "
                    f"all correct, would be needed")
        if b.precision < self.target:
            return f"{head}; the model is too weak here (observed precision {b.precision:.4f} < {self.target})"
        return f"{head}; the set is too small for its errors (observed precision {b.precision:.4f})"


def fit_question(rows: Sequence[AnsweredQuestion], target: float, level: float, question_id: str = "",
                 question_type: str = "", per_modality: bool = False) -> QuestionFit:
    """The rule of the module docstring on one question's answers (any order)."""
    check_target(target, level)
    curve = precision_curve([r.confidence for r in rows], [r.correct for r in rows], level)
    chosen = choose(curve, target)
    best = max(curve, key=lambda p: (p.lower_bound, -p.auto_at)) if curve else None
    no_error = bool(rows) and all(r.correct for r in rows)
    needed = needed_sample_size(target, level) if chosen is None and no_error else None
    auto_at = chosen.auto_at if chosen is not None else 1.0
    qid = question_id or (rows[0].question_id if rows else "")
    kind = question_type or (rows[0].question_type if rows else "")
    by_medium: dict[str, QuestionFit] = {}
    with_bars: dict[str, float] = {}
    if per_modality:
        for medium in MODALITIES:
            subset = [r for r in rows if medium in r.modalities]
            if subset:
                by_medium[medium] = fit_question(subset, target, level, qid, kind)
                if chosen is not None and by_medium[medium].chosen is not None \
                        and by_medium[medium].auto_at > auto_at:
                    with_bars[medium] = by_medium[medium].auto_at
    return QuestionFit(qid, kind, len(rows), auto_at, chosen, best, needed, target, level, curve, by_medium,
                       with_bars)


# ------------------------------------------------------------------------------------------------ applying a policy
@dataclass(frozen=True)
class AppliedFigures:
    """A policy applied to labelled answers of one question: automatic = not sent to review."""

    labelled: int
    automatic: int
    correct: int
    acted: int

    @property
    def coverage(self) -> float:
        return self.automatic / self.labelled if self.labelled else 0.0

    @property
    def precision(self) -> float | None:
        return self.correct / self.automatic if self.automatic else None


def apply_policy(policy: Policy, rows: Sequence[AnsweredQuestion]) -> dict[str, AppliedFigures]:
    """Each record's answers through `decide_outcome`, exactly as the server decides; figures per question."""
    by_record: dict[int, list[AnsweredQuestion]] = {}
    for row in rows:
        by_record.setdefault(row.line, []).append(row)
    counts: dict[str, list[int]] = {}
    for record in by_record.values():
        outcome = decide_outcome(policy, {r.question_id: r.answer for r in record}, record[0].modalities)
        for row in record:
            decided = outcome.questions.get(row.question_id)
            if decided is None:
                continue
            tally = counts.setdefault(row.question_id, [0, 0, 0, 0])
            tally[0] += 1
            if decided.outcome != "review":
                tally[1] += 1
                tally[2] += row.correct
                tally[3] += decided.outcome == "act"
    return {qid: AppliedFigures(*tally) for qid, tally in counts.items()}


# ------------------------------------------------------------------------------------------------ the policy
@dataclass(frozen=True)
class PolicyFit:
    """What `fit_policy` chose: the per-question fits and the rules the policy file says (fitted, then kept)."""

    version: str
    target: float
    level: float
    questions: dict[str, QuestionFit]            # fitted, in the data's order
    rules: dict[str, QuestionPolicy]             # every rule of the file: the fitted ones, then those kept
    default: QuestionPolicy | None = None        # kept from the old policy (never fitted)
    notes: tuple[str, ...] = ()                  # what the report must say beside the figures


def fit_policy(rows: Sequence[AnsweredQuestion], target: float, level: float = 0.95, *, per_modality: bool = False,
               old: Policy | None = None, version: str | None = None) -> PolicyFit:
    """Fit every labelled question; keep from `old` its version (unless `version`), act_on, auto_at_for, type and
    options (and auto_at_with, unless `per_modality`), its [default] and the rules of questions the data lacks.
    Without `old`: act_on = [] (nothing acts until the team names act_on), type and options from the data."""
    check_target(target, level)
    by_question: dict[str, list[AnsweredQuestion]] = {}
    for row in rows:
        by_question.setdefault(row.question_id, []).append(row)
    fits: dict[str, QuestionFit] = {}
    rules: dict[str, QuestionPolicy] = {}
    notes: list[str] = []
    nothing_acts: list[str] = []
    for qid, answers in by_question.items():
        fits[qid] = fit = fit_question(answers, target, level, qid, _one_type(qid, answers), per_modality)
        options = _options(qid, answers, notes)
        kept = old.questions.get(qid) if old is not None else None
        if old is None or kept is None:
            rules[qid] = QuestionPolicy(fit.auto_at, (), {}, dict(fit.auto_at_with), fit.question_type, options)
            nothing_acts.append(qid)
            continue
        rules[qid] = _kept_rule(old, kept, fit, options, per_modality, notes)
        if not kept.act_on:
            nothing_acts.append(qid)
    if old is not None:
        _keep_the_rest(old, rules, notes)
    if nothing_acts:
        notes.append(f"act_on = [] for {', '.join(nothing_acts)}: nothing acts (automatic answers pass) until the "
                     "team names the answers that call for action")
    name = version or (old.version if old is not None else "fitted")
    return PolicyFit(name, target, level, fits, rules, old.default if old is not None else None, tuple(notes))


def _one_type(qid: str, answers: Sequence[AnsweredQuestion]) -> str:
    """The question's one type in the data; a question of two types is refused."""
    kinds = sorted({r.question_type for r in answers})
    if len(kinds) > 1:
        raise PolicyFitError(f"question {qid!r} is {' and '.join(kinds)} in different records: a rule is for one "
                             "type of question; give the questions distinct ids")
    return kinds[0]


def _options(qid: str, answers: Sequence[AnsweredQuestion], notes: list[str]) -> tuple[str, ...] | None:
    """The question's options when every record has the same ones; else None (and a note)."""
    option_sets = {r.options for r in answers}
    options = next(iter(option_sets)) if len(option_sets) == 1 else None
    if options is None:
        notes.append(f"{qid}: its answers differ between records, so its rule names no options")
    return options


def _kept_rule(old: Policy, kept: QuestionPolicy, fit: QuestionFit, options: tuple[str, ...] | None,
               per_modality: bool, notes: list[str]) -> QuestionPolicy:
    """The fitted bar in the old rule: its act_on, auto_at_for, type and options (and auto_at_with, unless
    `per_modality`) kept; a type that differs from the data's is refused, what else differs is noted."""
    qid, kind = fit.question_id, fit.question_type
    if kept.type is not None and kept.type != kind:
        raise PolicyFitError(f"{old.source}: questions.{qid} is a rule for a {kept.type} question; in the data "
                             f"{qid!r} is a {kind} question")
    if kept.options is not None and options is not None and set(kept.options) != set(options):
        notes.append(f"{qid}: {old.source} names the answers {', '.join(kept.options)}, the data "
                     f"{', '.join(options)}: kept as {old.source} has them (the server sends a mismatch to review)")
    if kept.auto_at_for:
        notes.append(f"{qid}: auto_at_for kept from {old.source} ({', '.join(kept.auto_at_for)}): those answers "
                     "keep their own bar, which this fit did not choose")
    return QuestionPolicy(fit.auto_at, kept.act_on, dict(kept.auto_at_for),
                          dict(fit.auto_at_with) if per_modality else dict(kept.auto_at_with),
                          kept.type or kind, kept.options if kept.options is not None else options)


def _keep_the_rest(old: Policy, rules: dict[str, QuestionPolicy], notes: list[str]) -> None:
    """The old rules of questions the data lacks, as they were, and a note for them and for its [default]."""
    for qid, rule in old.questions.items():
        if qid not in rules:
            rules[qid] = rule
            notes.append(f"{qid}: not in the data; its rule is kept from {old.source} as it was")
    if old.default is not None:
        notes.append(f"[default] kept from {old.source} as it was (not fitted: it is for questions the policy "
                     "does not name)")
