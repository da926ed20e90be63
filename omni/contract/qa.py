"""QA samples: which automatic decisions also go to people, so that the precision of what runs unattended is measured.

An automatic decision is one whose overall outcome under the policy is `act` or `pass` (the model's answers were
trusted; a bank's answer is not the model's and is never sampled). Each is drawn for QA:
- as a whole, with the share `[qa] sample`: every automatic question of it is then checked;
- question by question, with a question's `qa_sample`: that question is checked.
A draw is uniform in [0, 1): the first 64 bits of blake2b("<seed>:<request id>:<scope>"), the scope `_decision` or
the question's id, against the share. Draws need no state: the same seed and request id give the same draw in every
replica and after every restart, and the route records the seed and each draw, so anyone can check the choice.
Knows nothing of HTTP, files, the model or review queues.
"""
from __future__ import annotations

import hashlib

from omni.contract.json_values import JSONObject
from omni.contract.policy import Policy
from omni.contract.types import Outcome

AUTOMATIC = ("act", "pass")
DECISION_SCOPE = "_decision"


def qa_draw(seed: int, request_id: str, scope: str) -> float:
    digest = hashlib.blake2b(f"{seed}:{request_id}:{scope}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def qa_sample(policy: Policy, outcome: Outcome, request_id: str | None) -> JSONObject | None:
    """The QA part of a route (`x_route.qa`) when the decision is drawn, else None: the seed, the policy, the
    decision's draw and share, and per checked question its automatic answer, outcome, confidence, share and draw."""
    plan = policy.qa
    if plan is None or request_id is None or outcome.match is not None or outcome.overall not in AUTOMATIC:
        return None
    automatic = {qid: q for qid, q in outcome.questions.items() if q.outcome in AUTOMATIC}
    if not automatic:
        return None
    whole = qa_draw(plan.seed, request_id, DECISION_SCOPE)
    checked: dict[str, JSONObject] = {}
    for qid, question in automatic.items():
        rule = policy.rule_for(qid)
        share = rule.qa_sample if rule is not None and rule.qa_sample is not None else None
        draw = qa_draw(plan.seed, request_id, qid)
        if whole < plan.sample or (share is not None and draw < share):
            checked[qid] = {"answer": question.answer, "outcome": question.outcome,
                            "confidence": question.confidence, "share": share if share is not None else plan.sample,
                            "draw": round(draw, 6), "by": "decision" if whole < plan.sample else "question"}
    if not checked:
        return None
    return {"seed": plan.seed, "policy": {"version": policy.version, "sha256": policy.sha256},
            "draw": round(whole, 6), "share": plan.sample, "questions": checked}


def qa_target(policy: Policy, question: str) -> float | None:
    """The precision a question's automatic answers must keep: its `qa_target`, else `[qa] target`, else None."""
    rule = policy.rule_for(question)
    if rule is not None and rule.qa_target is not None:
        return rule.qa_target
    return policy.qa.target if policy.qa is not None else None
