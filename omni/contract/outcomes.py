"""Answers + a policy -> outcomes: act, review or pass for each question the policy names, and overall (`x_outcome`).

A question's answer and confidence come from its System One answer, as the caller sees it: noul -> `p >= 0.5`,
confidence `max(p, 1 - p)`; choice -> its `choice` and `confidence`; score -> its most probable level (the first, on a
tie) and `confidence`. Its bar is the strictest that applies: `auto_at` (or `auto_at_for` the answer, which may be
looser or stricter) raised by `auto_at_with` each medium the request carries. The outcome is `review` when the
confidence is below the bar (or the bar is 1.0: everything to review), else `act` when the answer is in `act_on`, else
`pass`. A question whose rule cannot fit it (another type, an answer the rule's options lack) is sent to review with
the reason, never refused: the policy is the server's, the request is valid. Overall: `act` if any question acts, else
`review` if any is under review, else `pass`; questions the policy does not name (and no `[default]`) get no outcome.
`with_outcome` puts it on a Decision (and the policy's sha256 in its audit record) — a decision a hash bank answered
without the model takes its match's action instead (`x_outcome.by = "bank"`); `final_outcome` is a reviewed
decision's outcome once a reviewer labelled it. Knows nothing of HTTP, torch, the model or files.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from omni.contract.json_values import JSONObject
from omni.contract.policy import Policy, QuestionPolicy, answer_key
from omni.contract.types import Answer, Decision, DecisionRequest, Outcome, QuestionOutcome

OUTCOMES = ("act", "review", "pass")
MODALITY_OF_SLOT = {"images": "image", "audio": "audio", "videos": "video"}


def modalities_of_slots(slots: Iterable[str]) -> frozenset[str]:
    """The media a request carries (image, audio, video) from its items' slots."""
    return frozenset(MODALITY_OF_SLOT[slot] for slot in slots if slot in MODALITY_OF_SLOT)


def with_outcome(decision: Decision, request: DecisionRequest, policy: Policy | None) -> Decision:
    """The decision with its outcome under `policy` (None: as it is), and its audit record naming the policy. A
    decision a hash bank answered (no forward) has its match's action as its outcome, with or without a policy."""
    if decision.answered_by_bank and decision.match is not None:
        outcome = Outcome(str(decision.match["action"]), {}, policy.version if policy else None,
                          policy.sha256 if policy else None, match=decision.match)
        audit = (dataclasses.replace(decision.audit, policy_sha256=policy.sha256)
                 if decision.audit is not None and policy is not None else decision.audit)
        return dataclasses.replace(decision, outcome=outcome, audit=audit)
    if policy is None:
        return decision
    outcome = decide_outcome(policy, decision.answers, modalities_of_slots(item.slot for item in request.media))
    audit = dataclasses.replace(decision.audit, policy_sha256=policy.sha256) if decision.audit is not None else None
    return dataclasses.replace(decision, outcome=outcome, audit=audit)


def final_outcome(policy: Policy, automatic: JSONObject, labels: Mapping[str, bool | int | str]) -> JSONObject:
    """A reviewed decision's final outcome: `automatic` (its `x_outcome`) with each labelled question's outcome
    taken from the reviewer's label (act when the label is in the rule's act_on, else pass); questions left
    unlabelled keep theirs. Overall by the same rule. Names the policy whose act_on was applied."""
    questions: dict[str, JSONObject] = {}
    automatic_questions = automatic.get("questions")
    for qid, before in (automatic_questions.items() if isinstance(automatic_questions, dict) else ()):
        rule = policy.rule_for(qid)
        if qid in labels and rule is not None:
            label = labels[qid]
            acts = any(answer_key(value) == answer_key(label) and type(value) is type(label) for value in rule.act_on)
            questions[qid] = {"outcome": "act" if acts else "pass", "answer": label, "by": "reviewer"}
        elif isinstance(before, dict):
            questions[qid] = {"outcome": before.get("outcome"), "answer": before.get("answer"), "by": "model"}
    kinds = {q["outcome"] for q in questions.values()}
    overall = "act" if "act" in kinds else "review" if "review" in kinds else "pass"
    return {"overall": overall, "questions": questions, "policy": {"version": policy.version, "sha256": policy.sha256}}


def decide_outcome(policy: Policy, answers: Mapping[str, JSONObject], modalities: frozenset[str] = frozenset(),
                   ) -> Outcome:
    """The outcome of one decision's answers under `policy` (see the module docstring)."""
    questions = {}
    for qid, answer in answers.items():
        rule = policy.rule_for(qid)
        if rule is not None:
            questions[qid] = question_outcome(rule, answer, modalities)
    kinds = {q.outcome for q in questions.values()}
    overall = "act" if "act" in kinds else "review" if "review" in kinds else "pass"
    return Outcome(overall, questions, policy.version, policy.sha256)


def question_outcome(rule: QuestionPolicy, answer: JSONObject, modalities: frozenset[str]) -> QuestionOutcome:
    kind = answer.get("type")
    chosen, confidence = read_answer(answer)
    key = answer_key(chosen)
    bar = max([rule.auto_at_for.get(key, rule.auto_at),
               *(rule.auto_at_with[m] for m in modalities if m in rule.auto_at_with)])
    mismatch = None
    if rule.type is not None and rule.type != kind:
        mismatch = f"the policy's rule is for a {rule.type} question; this one is {kind}"
    elif rule.options is not None and kind != "noul" and set(_options_of(answer)) != set(rule.options):
        mismatch = (f"the policy's rule names the answers {', '.join(rule.options)}; this question's are "
                    f"{', '.join(_options_of(answer))}")
    if mismatch:
        return QuestionOutcome("review", chosen, confidence, bar, mismatch)
    if confidence < bar or bar >= 1.0:            # a bar of 1.0 sends every answer to review, even one at 1.0
        return QuestionOutcome("review", chosen, confidence, bar)
    acts = any(answer_key(value) == key and _same_kind(value, kind) for value in rule.act_on)
    return QuestionOutcome("act" if acts else "pass", chosen, confidence, bar)


def read_answer(answer: JSONObject) -> tuple[Answer, float]:
    """(the answer, its confidence) of one System One answer."""
    kind = answer.get("type")
    if kind == "noul":
        p = float(answer["noul"])
        return p >= 0.5, max(p, 1.0 - p)
    if kind == "choice":
        return str(answer["choice"]), float(answer["confidence"])
    if kind == "score":
        probabilities = answer["probabilities"]
        assert isinstance(probabilities, dict)
        levels = sorted(probabilities, key=int)
        best = max(levels, key=lambda level: (probabilities[level], -int(level)))
        return int(best), float(answer["confidence"])
    raise ValueError(f"not a System One answer: type {kind!r}")


def _options_of(answer: JSONObject) -> list[str]:
    probabilities = answer.get("probabilities")
    if answer.get("type") == "score" and isinstance(probabilities, dict):
        return sorted(probabilities, key=int)
    return list(probabilities) if isinstance(probabilities, dict) else []


def _same_kind(value: Answer, kind: object) -> bool:
    """An act_on value can only match an answer of its own kind (True is not the level 1)."""
    if isinstance(value, bool):
        return kind == "noul"
    if isinstance(value, int):
        return kind == "score"
    return kind == "choice"
