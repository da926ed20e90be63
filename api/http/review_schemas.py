"""Pydantic wire models and OpenAPI request bodies of the review routes (`api.http.review`, `api.http.guidelines`):
queues, items, labels, comments, flags, skips, undo, agreement and reports.

These describe shapes only; the rules are `omni.review.queues`'s. Knows nothing of the model, the engine or the
environment.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.http.schemas import ERROR_RESPONSES, FORBIDDEN, Entry, ErrorBody, ValidationErrorBody


class ReviewQueue(BaseModel):
    id: str
    kind: Literal["batch", "kept", "policy", "qa", "disagreements"]
    name: str
    items: int
    reviewed: int = Field(description="items done: every question labelled by k reviewers (the disagreements queue: 0)")
    k: int = Field(1, description="reviewers per item (--review-k)")
    failed: int = Field(0, description="a batch's lines that got an error record (no item to review)")
    failures: list[dict[str, Any]] = Field(default_factory=list,
                                           description="the first 50 of them: line, status, message")


class ReviewQueueList(BaseModel):
    queues: list[ReviewQueue]


class ReviewEntry(BaseModel):
    key: str
    confidence: float = Field(description="the item's least confident question's top probability")
    questions: int
    labelled: int = Field(description="questions with a label the caller sees (k>=2: their own)")
    preview: str
    state: Literal["unlabelled", "partly", "done"] = "unlabelled"
    flagged: bool = False
    reviewers: list[str] = Field(default_factory=list, description="who has a label on the item, first first")
    outcome: str | None = Field(None, description="the policy's overall outcome (act, review, pass), if any")
    model: str | None = Field(None, description="the model that answered: the base's name or an adapter's")
    skipped: bool = Field(False, description="the caller skipped it (skipped items come last)")
    shielded: bool = Field(False, description="its media are shown blurred, greyscale and muted until revealed "
                                              "(--review-shield)")


class ReviewEntryList(BaseModel):
    items: list[ReviewEntry]


class ReviewQuestion(BaseModel):
    id: str
    type: Literal["noul", "choice", "score"]
    instructions: Entry = None
    options: list[dict[str, Any]]
    model: str | None = Field(description="the model's answer as a label id")
    wire: dict[str, Any]


class ReviewMedia(BaseModel):
    index: int
    slot: Literal["images", "audio", "videos"]
    kind: Literal["image", "audio", "video"]
    type: str | None


class ReviewChange(BaseModel):
    id: str
    question: str
    old: str | None
    new: str | None
    reviewer: str
    at: str = Field(description="ISO 8601 UTC")
    action: Literal["label", "revert"]
    queue: str = Field(description="where it was given (\"disagreements\": an adjudication)")


class ReviewComment(BaseModel):
    id: str
    text: str
    reviewer: str
    at: str


class ReviewMark(BaseModel):
    id: str
    reason: str | None
    reviewer: str
    at: str


class ReviewItem(BaseModel):
    key: str
    state: Entry
    questions: list[ReviewQuestion]
    answers: dict[str, Any]
    confidence: float
    labels: dict[str, str] = Field(description="k=1: the item's labels; k>=2: the caller's own (blind), in the "
                                               "disagreements queue the consensus")
    labelled_by: dict[str, list[str]] = Field(default_factory=dict, description="question -> who labelled it")
    consensus: dict[str, str] = Field(default_factory=dict, description="the item's labels (k=1: == the last given)")
    k: int = 1
    review_state: Literal["unlabelled", "partly", "done"] = Field(
        "unlabelled", description="done: every question labelled by k reviewers (`state` is the request's state)")
    flagged: bool = False
    history: list[ReviewChange] = Field(default_factory=list, description="label changes, oldest first (k>=2: the "
                                                                          "caller's own, unless admin)")
    comments: list[ReviewComment] = Field(default_factory=list)
    flags: list[ReviewMark] = Field(default_factory=list, description="flags in force")
    skips: list[ReviewMark] = Field(default_factory=list, description="skips in force")
    by_reviewer: dict[str, dict[str, str]] | None = Field(
        None, description="reviewer -> their labels (only in the disagreements queue, or for admins)")
    disagreements: list[str] | None = Field(None, description="in the disagreements queue: the questions that differ")
    media: list[ReviewMedia]
    reasons: list[dict[str, Any]] | None = Field(
        None, description="in the policy's queue: why the decision is under review (question, answer, confidence, "
                          "auto_at)")
    x_outcome: dict[str, Any] | None = Field(None, description="in the policy's queue: the decision's outcome")
    shield: dict[str, Any] | None = Field(
        None, description="with --review-shield, when a rule holds: `media` (the indexes shown shielded until "
                          "revealed), `revealed` (those the caller revealed), `exposure` ({today, limit}: shielded "
                          "media the caller revealed today, and their daily limit or null)")
    qa: dict[str, Any] | None = Field(
        None, description="in the QA queue: the draw that chose this automatic decision (seed, draw, share) and the "
                          "automatic answers it checks; the automatic action already stood")
    evidence: dict[str, Any] | None = Field(
        None, description="where each answer came from (x_evidence, docs/evidence.md): when the caller asked for it, "
                          "or computed for a decision the policy routed to review")


class ReviewLabels(BaseModel):
    labels: dict[str, str] = Field(description="question id -> label id (noul true/false, choice id, score level)")
    events: list[str] = Field(default_factory=list, description="the history events this change made, one per "
                                                                "question whose value changed")
    review_state: Literal["unlabelled", "partly", "done"] = Field("unlabelled", description="the item's, after it")


class ReviewUndone(BaseModel):
    labels: dict[str, str]
    flags: list[ReviewMark]
    skips: list[ReviewMark]
    event: str = Field(description="the id of the revert event")
    review_state: Literal["unlabelled", "partly", "done"] = "unlabelled"


class QuestionAgreement(BaseModel):
    items: int = Field(description="items the kappa is over (labelled by at least two reviewers)")
    reviewers: list[str]
    kappa: float | None = Field(description="Cohen's (two reviewers) or Fleiss' (more) kappa; null when undefined")
    method: Literal["cohen", "fleiss"] | None
    observed: float | None = Field(description="the share of agreement observed")
    model: float | None = Field(description="the share of reviewer labels equal to the model's answer")
    labels: int = Field(description="how many reviewer labels `model` is over")


class ReviewAgreement(BaseModel):
    k: int
    questions: dict[str, QuestionAgreement]


class ReportRef(BaseModel):
    id: str
    name: str


class ReportList(BaseModel):
    reports: list[ReportRef]


class Report(BaseModel):
    id: str
    name: str
    metrics: dict[str, Any]
    markdown: str
    figures: list[str]


REVIEW_LABELS_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["labels"], "properties": {"labels": {
        "type": "object", "additionalProperties": {"type": ["string", "boolean", "integer", "null"]},
        "description": "question id -> label (noul true/false, choice id, score level index; as labels.jsonl writes "
                       "them or as strings) or null to clear"}}}}}}}


def _body(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "required": required, "properties": properties}}}}}


REVIEW_COMMENT_BODY = _body(["text"], {"text": {"type": "string", "minLength": 1, "description": (
    "the comment; at most the server's --review-max-comment-chars (default 2000) characters")}})
REVIEW_FLAG_BODY = _body(["reason"], {"reason": {"type": "string", "minLength": 1, "maxLength": 500,
                                                 "description": "why the item needs attention"}})
REVIEW_SKIP_BODY = _body([], {"reason": {"type": ["string", "null"], "maxLength": 500}})
REVIEW_UNDO_BODY = _body(["event"], {"event": {"type": "string", "description": (
    "the id of the caller's own label, flag or skip event (from `events`, `flags`, `skips` or `history`)")}})

REVIEW_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: ERROR_RESPONSES[401],
    403: FORBIDDEN,
    404: {"model": ErrorBody, "description": "no such queue, item, event, media item or report; or review is off"},
    422: {"model": ValidationErrorBody, "description": "a label that is not an answer of its question, an empty or "
                                                       "too long comment, a flag without a reason, a bad filter"},
}
UNDO_RESPONSES: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorBody, "description": "not undone: someone else's event, already undone, not a label, flag or "
                                             "skip, or a label changed since (the message says by whom)"}}


class ReviewReveal(BaseModel):
    exposure: dict[str, Any] | None = Field(description="shielded media the caller revealed today, and their limit")
    shielded: bool = Field(description="the medium was shielded (its reveal was counted once for the caller)")
