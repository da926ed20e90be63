"""Pydantic wire models: the System One shapes for the OpenAPI docs and the response models of simple routes.

These describe shapes only. The validation authority is `omni.contract.request.parse_request`; the decision route never
validates the body with these models (it must also read zstd/gzip bodies and multipart uploads).
Knows nothing of the model, the engine or the environment.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Entry = Annotated[Any, Field(description="string | object | array | null")]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class NoulQuestion(_Open):
    type: Literal["noul"]
    instructions: Entry = None
    criteria: dict[Literal["true", "false"], Entry] | None = None


class ChoiceQuestion(_Open):
    type: Literal["choice"]
    instructions: Entry = None
    criteria: dict[str, Entry] = Field(description="option name -> description (or null); 2-255 options")


class ScoreQuestion(_Open):
    type: Literal["score"]
    instructions: Entry = None
    criteria: list[Entry] = Field(description="ordered levels, lowest first; 2-10 levels")


Question = Annotated[NoulQuestion | ChoiceQuestion | ScoreQuestion, Field(discriminator="type")]


class MediaObject(BaseModel):
    content_type: str = Field(examples=["image/png", "audio/wav", "video/mp4"])
    base64: str


class DataMediaObject(BaseModel):
    """avrik's form (avrik-sdk's `image()`); in any of the three slots, mixed freely with the other forms."""

    data: str = Field(description="the bytes, standard base64 (padded); not a data URL")
    media_type: str | None = Field(None, examples=["image/png", "image/jpeg", "image/webp"],
                                   description="informational: the format is sniffed from the bytes")


MediaItem = Annotated[str | MediaObject | DataMediaObject,
                      Field(description="base64 data URL, {content_type, base64} or {data, media_type}")]


class Asset(BaseModel):
    type: Literal["image"]
    format: Literal["png", "jpg", "jpeg"] | None = Field(None, description="required with data_base64")
    data_base64: str | None = None
    part: str | None = Field(None, description="multipart part name holding the bytes (multipart only)")


class SystemOneRequest(_Open):
    """POST /v1/systemone as JSON. Unknown top-level fields are ignored."""

    model: str | None = Field(None, description="optional: the served name or an alias (jev-latest, clef-omni)")
    state: Annotated[str | dict[str, Any] | list[Any], Field(description="string, object or array")]
    questions: dict[str, Question] = Field(description="caller-chosen id -> question; answers use the same ids")
    images: list[MediaItem] | None = Field(None, description="Clef: PNG/JPEG/WebP, placed before the state")
    audio: list[MediaItem] | None = Field(None, description="Clef-omni: WAV/MP3/...")
    videos: list[MediaItem] | None = Field(None, description="Clef-omni: MP4/WebM")
    assets: dict[str, Asset] | None = Field(
        None, description="TypeSafe: placeholder -> image; each placeholder in state/instructions/criteria strings "
                          "becomes `[image N]`, N its position among the request's images")
    files: list[str] | None = Field(None, description="llama.cpp: data URLs (image/audio/video)")
    truncate: bool = Field(True, description="false: refuse (413) instead of truncating a long state")
    x_isolation: Literal["joint", "isolated"] | None = Field(
        None, description="joint (the reference): the questions are decided together; isolated: each question as if "
                          "asked alone about the same state and media. Default: the server's --isolation")
    x_audit: bool = Field(False, description="true: the response carries the decision's audit record as `x_audit` "
                                             "(also sent for every request under --audit always)")


class MultipartRequest(BaseModel):
    """POST /v1/systemone as multipart/form-data."""

    request: bytes = Field(description="the JSON body (same shape as the JSON request)")
    images: list[bytes] | None = Field(None, description="repeatable; appended after JSON images, in order")
    audio: list[bytes] | None = Field(None, description="repeatable")
    videos: list[bytes] | None = Field(None, description="repeatable")


class NoulAnswer(BaseModel):
    type: Literal["noul"]
    noul: float = Field(ge=0, le=1, description="P(yes)")


class ChoiceAnswer(BaseModel):
    type: Literal["choice"]
    choice: str
    probabilities: dict[str, float]
    confidence: float


class ScoreAnswer(BaseModel):
    type: Literal["score"]
    score: float = Field(description="sum of level * probability")
    legend: dict[str, Any]
    probabilities: dict[str, float]
    confidence: float


class Usage(BaseModel):
    input_tokens: int
    output_tokens: int


class SystemOneResponse(BaseModel):
    model: str
    answers: dict[str, Annotated[NoulAnswer | ChoiceAnswer | ScoreAnswer, Field(discriminator="type")]]
    usage: Usage
    x_truncated_state_tokens: int | None = Field(
        None, description="state tokens cut to fit the context (estimated when the state is far longer than fits)")
    x_truncated_state_chars: int | None = Field(None, description="state characters cut to fit the context (exact)")
    x_usage: dict[str, int] | None = Field(None, description="input tokens by modality")
    x_outcome: dict[str, Any] | None = Field(
        None, description="under the server's --policy: {overall: act|review|pass, questions: {id: {outcome, answer, "
                          "confidence, auto_at}}, policy: {version, sha256}}")
    x_audit: dict[str, Any] | None = Field(
        None, description="the audit record (format omni-audit/1), when asked for: model and calibration sha256, the "
                          "prompt's input-ids sha256 and tokens, each medium's sha256 and what was used of it, "
                          "software versions and device, request id, decided_at, unrounded probabilities")


class ValidationIssue(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorBody(BaseModel):
    detail: list[ValidationIssue]
    request_id: str


class ErrorDetail(BaseModel):
    error_type: str
    message: str


class ErrorBody(BaseModel):
    detail: ErrorDetail
    request_id: str


class ModelCard(BaseModel):
    """System One's model entry (`name`, `description`, `release_date`) plus our extras."""

    name: str
    description: str
    release_date: str = Field(description="YYYY-MM-DD: the checkpoint's release metadata, else its head file's date",
                              examples=["2026-10-09"])
    context: int = Field(description="context window in tokens")
    aliases: list[str]
    tiny_default: bool = Field(description="true: the embedded tiny demo model (trained on a synthetic inspection task only; not real answers)")
    limits: dict[str, Any] = Field(description="`inputs`: per-modality and per-request limits")


class OpenAIModel(BaseModel):
    id: str
    object: Literal["model"] = "model"
    owned_by: str = "omni-decide"


class ModelList(BaseModel):
    models: list[ModelCard]
    object: Literal["list"] = "list"
    data: list[OpenAIModel] = Field(description="the same models, OpenAI-style (llama.cpp clients)")


class CloudflareResponse(BaseModel):
    """Cloudflare's REST envelope around the System One response."""

    result: SystemOneResponse
    success: Literal[True] = True
    errors: list[Any] = Field(default_factory=list)
    messages: list[Any] = Field(default_factory=list)


class CloudflareError(BaseModel):
    code: int = Field(description="Cloudflare's code: 10000 auth, 5012 validation/inference, 5021 too large, "
                                  "6003 unreadable body, 7000 no route, 3040 capacity")
    message: str


class CloudflareErrorBody(BaseModel):
    result: None = None
    success: Literal[False] = False
    errors: list[CloudflareError]
    messages: list[Any] = Field(default_factory=list)


class Status(BaseModel):
    status: str
    message: str | None = None


# The decision routes read the body themselves (zstd/gzip, multipart); these document what they take.
DECISION_REQUEST_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"$ref": "#/components/schemas/SystemOneRequest"}},
    "multipart/form-data": {"schema": {"$ref": "#/components/schemas/MultipartRequest"}}}}}

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "unknown model"},
    401: {"model": ErrorBody, "description": "API keys are configured and the Bearer key is missing or wrong"},
    413: {"model": ErrorBody, "description": "body, media or context too large (media/context: detail[] shape)"},
    415: {"model": ErrorBody, "description": "unsupported Content-Type / Content-Encoding / media format"},
    422: {"model": ValidationErrorBody, "description": "validation error"},
    429: {"model": ErrorBody, "description": "queue full; honour Retry-After"},
    503: {"model": ErrorBody, "description": "model not loaded yet, or draining"},
    504: {"model": ErrorBody, "description": "the request outlived its deadline"},
    500: {"model": ErrorBody, "description": "a bug; the message carries the request id only"},
}


# ------------------------------------------------------------------------------------------------ admin
class PolicyRule(BaseModel):
    type: str | None = Field(description="noul, choice or score; null when the file does not say")
    auto_at: float
    act_on: list[bool | int | str]
    auto_at_for: dict[str, float]
    auto_at_with: dict[str, float]


class PolicyDefault(BaseModel):
    auto_at: float
    auto_at_with: dict[str, float]


class PolicyInForce(BaseModel):
    """GET /v1/admin/policy and the reload's answer: the policy decisions are taken under now."""

    version: str
    sha256: str = Field(description="sha256 of the policy file's bytes (what x_outcome and audit records name)")
    source: str = Field(description="the file it was read from")
    reloads: int = Field(description="reloads that worked since the start")
    questions: dict[str, PolicyRule]
    default: PolicyDefault | None


FORBIDDEN: dict[str, Any] = {"model": ErrorBody, "description": "the key's role is below the one this route needs "
                                                                 "(caller < reviewer < admin); the message names both"}
ADMIN_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: ERROR_RESPONSES[401],
    403: FORBIDDEN,
    404: {"model": ErrorBody, "description": "the server runs without a policy (--policy FILE)"},
    422: {"model": ErrorBody, "description": "the policy file no longer reads (the message names the key and line); "
                                             "the policy in force stays"},
    500: ERROR_RESPONSES[500],
}


# ------------------------------------------------------------------------------------------------ review
class ReviewQueue(BaseModel):
    id: str
    kind: Literal["batch", "kept", "policy", "disagreements"]
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
    skipped: bool = Field(False, description="the caller skipped it (skipped items come last)")


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


# ------------------------------------------------------------------------------------------------ identity
class WhoAmI(BaseModel):
    name: str = Field(description="recorded with every label and comment: the key's name, else the X-Omni-Reviewer "
                                  "header's, else \"anonymous\"")
    role: Literal["caller", "reviewer", "admin"]
    named_by: Literal["key", "header", "none"]
    keys: bool = Field(description="the server checks API keys (false: auth off, the page asks for a name)")


class Guidelines(BaseModel):
    markdown: str = Field(description="the queue's guidelines file as written (\"\" when it has none)")
    html: str = Field(description="the markdown rendered as CommonMark with raw HTML escaped and unsafe links refused")
