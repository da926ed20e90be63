"""A shadow candidate's score in the decision log: the live decision's line gets a `shadow` block once the candidate
has scored it (`log_decision`), never before and never on the response's path.

`shadow_block(score, outcome)` is the block's shape (`omni.serve.decision_log` documents it): the candidate's name,
its files' sha256, its answers and probabilities, and its outcome under the policy the live answer was taken under
(`candidate_outcome`), or null without one. A score that resolves to None (dropped or failed: the server counts it)
leaves the line without a block. Knows nothing of the model, the engine's internals or the environment.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from omni.contract.json_values import JSONObject
from omni.contract.outcomes import decide_outcome, modalities_of_slots
from omni.contract.policy import Policy
from omni.contract.types import Decision, DecisionRequest, ShadowScore

if TYPE_CHECKING:
    from omni.serve.decision_log import DecisionLog

log = logging.getLogger("omni.api")


def shadow_block(score: ShadowScore, outcome: JSONObject | None) -> JSONObject:
    """The decision log's `shadow` block of one candidate's score (`outcome`: its `x_outcome`, or None)."""
    return {"model": score.model, "adapter_sha256": score.adapter_sha256, "answers": dict(score.answers),
            "probabilities": {qid: dict(p) for qid, p in score.probabilities.items()}, "x_outcome": outcome}


def candidate_outcome(score: ShadowScore, request: DecisionRequest, policy: Policy | None) -> JSONObject | None:
    """The candidate's answers under `policy` (the one the live answer was taken under) as an `x_outcome`."""
    if policy is None:
        return None
    return decide_outcome(policy, score.answers, modalities_of_slots(item.slot for item in request.media)).to_wire()


def log_decision(decision_log: DecisionLog, request: DecisionRequest, decision: Decision, wire: JSONObject,
                 audit: JSONObject, policy_for: Callable[[str], Policy | None]) -> None:
    """Append the decision to the log (with its evidence when it has any: asked for, or kept for review): at once
    without a shadow candidate; with one, when its score resolves (with the block, or without it when the score was
    dropped or failed). The candidate's outcome is taken under the policy that governs it (`policy_for(candidate)`:
    its own bound one, else the server's). Never raises, never waits."""
    assert decision.audit is not None
    decided_at = decision.audit.decided_at

    def append(shadow: JSONObject | None) -> None:   # a full queue is counted, never waited on
        decision_log.append(request, wire, audit, request_id=request.request_id, decided_at=decided_at,
                            shadow=shadow, evidence=decision.evidence)

    scored = decision.shadow
    if scored is None:
        append(None)
        return

    def done(future: Future[ShadowScore | None]) -> None:
        block = None
        try:
            score = future.result() if not future.cancelled() else None
            if score is not None:
                block = shadow_block(score, candidate_outcome(score, request, policy_for(score.model)))
        except Exception:   # the live decision is logged all the same
            log.warning("request %s: the shadow score could not be logged", request.request_id, exc_info=True)
        append(block)

    scored.add_done_callback(done)
