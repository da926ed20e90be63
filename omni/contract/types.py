"""Frozen value types of the decision core: questions, requests, decisions and a decision's outcome under a policy
(the values only: `outcomes.py` decides them).

Knows nothing of HTTP, pydantic, torch or the model: these are plain data shared by every layer. A request's media
are `preprocess.item.MediaItem`s (the one typed value of a media item; it lives in `preprocess` because the decoders'
errors carry it and `preprocess` may not import `omni`).
"""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Literal

from omni.contract.audit import AuditRecord
from omni.contract.json_values import JSONObject, JSONValue
from preprocess.item import MediaItem

QuestionType = Literal["noul", "choice", "score"]
Answer = bool | str | int                    # one answer as a policy or a label names it: noul bool, choice id, level
QUESTION_TYPES: tuple[str, ...] = ("noul", "choice", "score")
# joint: every question in one schema, decided together (the Clef reference); isolated: each question answered as if
# it had been asked alone about the same state and media (one shared prefix, one block per question)
ISOLATION_MODES: tuple[str, ...] = ("joint", "isolated")
# Index into the head's type embedding (clef-reference §1.4: noul 0, choice 1, score 2).
TYPE_INDEX = {"noul": 0, "choice": 1, "score": 2}

NOUL_DEFAULT_TRUE = "The proposition is true or the answer is yes."
NOUL_DEFAULT_FALSE = "The proposition is false or the answer is no."


@dataclass(frozen=True)
class Option:
    """One allowed answer. `description` is any JSON value; None means "no description" (omitted from the prompt)."""

    id: str
    description: JSONValue = None


@dataclass(frozen=True)
class Question:
    """A typed question.

    `options` are in *request* order (noul: true, false; choice: the criteria map order; score: level order).
    The prompt/head order (choice sorted by id) is derived by `prompt_options`.
    """

    id: str
    type: QuestionType
    options: tuple[Option, ...]
    instructions: JSONValue = None

    @property
    def prompt_options(self) -> tuple[Option, ...]:
        """Options in the reference prompt order (= head order): choice sorted by code point, others as given."""
        if self.type == "choice":
            return tuple(sorted(self.options, key=lambda o: o.id))
        return self.options


@dataclass(frozen=True)
class Part:
    """A named upload beside the JSON body: a multipart file part, an `omni decide --image` file, a dataset's file.

    A part named after a media slot (`images`, `audio`, `videos`) joins that slot; any other part must be claimed
    by a TypeSafe asset (`{"type": "image", "part": NAME}`). `origin` says how it was sent, for messages.
    """

    name: str
    data: bytes = field(repr=False)
    content_type: str | None = None
    origin: str | None = None


EVIDENCE_OPTIONS = ("chosen", "all")
MAX_EVIDENCE_TOP = 16


@dataclass(frozen=True)
class EvidenceAsk:
    """`x_evidence`: for which options the evidence is mapped (the chosen answer, or every option) and how many
    of the top boxes, spans, moments and windows each map lists."""

    options: str = "chosen"
    top: int = 3

    def to_wire(self) -> JSONValue:
        return True if self == EvidenceAsk() else {"options": self.options, "top": self.top}


@dataclass(frozen=True)
class DecisionRequest:
    """A validated System One request in core terms."""

    state: JSONValue
    questions: tuple[Question, ...]
    model: str | None = None
    media: tuple[MediaItem, ...] = ()        # prompt order: images, audio, videos
    truncate: bool = True
    request_id: str | None = None
    isolation: str | None = None             # x_isolation: "joint" | "isolated"; None = the server's default
    audit: bool = False                      # x_audit: the caller asks for the audit record in the response
    evidence: EvidenceAsk | None = None      # x_evidence: where each answer came from (None: not asked)


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int = 0


@dataclass(frozen=True)
class QuestionOutcome:
    outcome: str                          # act | review | pass
    answer: Answer
    confidence: float
    auto_at: float                        # the bar this answer met or missed
    reason: str | None = None             # why a rule did not fit (then the outcome is review)

    def to_wire(self) -> JSONObject:
        wire: JSONObject = {"outcome": self.outcome, "answer": self.answer, "confidence": self.confidence,
                            "auto_at": self.auto_at}
        if self.reason:
            wire["reason"] = self.reason
        return wire


@dataclass(frozen=True)
class Outcome:
    overall: str
    questions: dict[str, QuestionOutcome]
    policy_version: str | None                # None: no policy in force (a bank's outcome without one)
    policy_sha256: str | None
    match: JSONObject | None = None           # a bank match that decided it without the model (`x_match`)

    def to_wire(self) -> JSONObject:
        wire: JSONObject = {
            "overall": self.overall, "questions": {qid: q.to_wire() for qid, q in self.questions.items()},
            "policy": ({"version": self.policy_version, "sha256": self.policy_sha256}
                       if self.policy_sha256 is not None else None)}
        if self.match is not None:
            wire["by"] = "bank"
        return wire

    def review_reasons(self) -> list[JSONObject]:
        """Why the decision is under review: each such question with its answer, confidence and bar; or the bank
        match that sent it there."""
        if self.match is not None:
            return [{"bank": self.match.get("bank"), "label": self.match.get("label"),
                     "medium": self.match.get("medium"), "distance": self.match.get("distance")}]
        return [{"question": qid, "answer": q.answer, "confidence": q.confidence, "auto_at": q.auto_at,
                 **({"reason": q.reason} if q.reason else {})}
                for qid, q in self.questions.items() if q.outcome == "review"]


@dataclass(frozen=True)
class ShadowScore:
    """A shadow candidate's answers to a request another model answered (never sent to the caller: logged)."""

    model: str                               # the candidate adapter's name
    adapter_sha256: str | None
    answers: dict[str, JSONObject]           # System One answers, as the live response's
    probabilities: dict[str, dict[str, float]]   # unrounded, question -> option (request order)
    same_forward: bool                       # scored from the live request's forward (head-only) or its own


@dataclass(frozen=True)
class Decision:
    """The engine's answer: System One `answers` (JSON-ready dicts in request key order) plus accounting."""

    model: str
    answers: dict[str, JSONObject]
    usage: Usage
    truncated_state_tokens: int = 0          # exact, or estimated when the state was read only as far as it fits
    truncated_state_chars: int = 0           # exact
    tokens_by_modality: dict[str, int] = field(default_factory=dict)
    timings_ms: dict[str, float] = field(default_factory=dict)
    batch_size: int = 1
    cache: dict[str, str] = field(default_factory=dict)    # media / prefix: hit, partial or miss (absent: off)
    audit: AuditRecord | None = None         # when the request asked for it or the engine keeps one for every decision
    audit_shown: bool = False                # the response carries it (`x_audit`)
    outcome: Outcome | None = None           # act / review / pass under the server's policy (`x_outcome`)
    shadow: Future[ShadowScore | None] | None = None   # a shadow candidate's score, when one scores this model's
                                                       # requests (None inside: dropped before it would delay)
    evidence: JSONObject | None = None       # `x_evidence`, when the request asked for it (docs/evidence.md)
    evidence_shown: bool = True              # the response carries it (False: computed for the decision log only)
    match: JSONObject | None = None          # `x_match`: the hash-bank entry a medium matched (docs/banks.md)
    answered_by_bank: bool = False           # no forward ran: the match's action is the outcome, `answers` is empty

    def to_wire(self) -> JSONObject:
        """System One response body. Extensions are `x_`-prefixed as jevcompat asks."""
        body: JSONObject = {
            "model": self.model,
            "answers": self.answers,
            "usage": {"input_tokens": self.usage.input_tokens, "output_tokens": self.usage.output_tokens},
        }
        if self.truncated_state_tokens:
            body["x_truncated_state_tokens"] = self.truncated_state_tokens
            body["x_truncated_state_chars"] = self.truncated_state_chars
        if self.tokens_by_modality:
            body["x_usage"] = dict(self.tokens_by_modality)
        if self.outcome is not None:
            body["x_outcome"] = self.outcome.to_wire()
        if self.audit is not None and self.audit_shown:
            body["x_audit"] = self.audit.to_wire()
        if self.evidence is not None and self.evidence_shown:
            body["x_evidence"] = self.evidence
        if self.match is not None:
            body["x_match"] = self.match
        return body
