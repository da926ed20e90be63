"""What a reviewer may narrow a review queue's list to (`ItemFilter`), and the error for a filter, comment, flag or
skip that cannot be taken as given (`ReviewInputError`, naming the field).

Knows nothing of HTTP, queues' storage, the engine or the model.
"""
from __future__ import annotations

from dataclasses import dataclass

from omni.contract.answers import answer_confidence, top_answer
from omni.contract.outcomes import OUTCOMES
from omni.review.history import STATES, ItemState
from omni.review.sources import Decided

STATE_FILTERS = (*STATES, "flagged")


class ReviewInputError(ValueError):
    """A filter, comment, flag or skip a reviewer cannot give as it is; `field` names what, the message the rule."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ItemFilter:
    """Which items of a queue a list shows (every field optional; given ones must all hold).
    `answer` is the model's top answer (label id) to `question`; the confidence bounds apply to the question's
    confidence when `question` is given, else the item's; `outcome` is a routed decision's overall policy outcome;
    `reviewer` keeps the items they labelled, commented or flagged; `state` is unlabelled, partly, done or flagged;
    `model` keeps the items a model answered (the base's served name or an adapter's)."""

    question: str | None = None
    answer: str | None = None
    min_confidence: float | None = None
    max_confidence: float | None = None
    outcome: str | None = None
    reviewer: str | None = None
    state: str | None = None
    model: str | None = None

    def __post_init__(self) -> None:
        if self.answer is not None and self.question is None:
            raise ReviewInputError("answer", "answer filters the model's answer to a question: give question too")
        for name in ("min_confidence", "max_confidence"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ReviewInputError(name, f"{name} is a probability: 0..1, got {value}")
        if self.min_confidence is not None and self.max_confidence is not None \
                and self.min_confidence > self.max_confidence:
            raise ReviewInputError("min_confidence", f"min_confidence {self.min_confidence} is above max_confidence "
                                                     f"{self.max_confidence}")
        if self.outcome is not None and self.outcome not in OUTCOMES:
            raise ReviewInputError("outcome", f"outcome is one of {', '.join(OUTCOMES)}, not {self.outcome!r}")
        if self.state is not None and self.state not in STATE_FILTERS:
            raise ReviewInputError("state", f"state is one of {', '.join(STATE_FILTERS)}, not {self.state!r}")

    def keeps(self, record: Decided, item: ItemState, state: str) -> bool:
        if self.question is not None:
            answer = record.answers.get(self.question)
            if answer is None or self.answer is not None and top_answer(answer) != self.answer:
                return False
            confidence = answer_confidence(answer)
        else:
            confidence = record.confidence
        if self.min_confidence is not None and confidence < self.min_confidence - 1e-12:
            return False
        if self.max_confidence is not None and confidence > self.max_confidence + 1e-12:
            return False
        if self.outcome is not None and record.outcome != self.outcome:
            return False
        if self.reviewer is not None and not item.touched_by(self.reviewer):
            return False
        if self.model is not None and record.model != self.model:
            return False
        return self.state is None or (item.flagged() if self.state == "flagged" else state == self.state)
