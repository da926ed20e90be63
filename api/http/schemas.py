"""Pydantic wire models: the System One shapes for the OpenAPI docs and the response models of simple routes.

These describe shapes only. The validation authority is `omni.contract.request.parse_request`; the decision route never
validates the body with these models (it must also read zstd/gzip bodies and multipart uploads). The admin adapter
routes' small JSON bodies (`AdapterLoad`, `ShadowCandidate`) are read with theirs (a missing field: 422).
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
    x_evidence: bool | dict[str, Any] = Field(
        False, description='true, or {"options": "chosen" | "all", "top": 1..16}: the response carries `x_evidence`, '
                           "where in the state and media each answer came from (docs/evidence.md)")


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
    x_evidence: dict[str, Any] | None = Field(
        None, description="when asked for: {method, questions: {id: {answer, share, state, images, audio, videos}}} "
                          "(docs/evidence.md)")


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
    base: str | None = Field(None, description="an adapter's base model (its served name); null for the base")
    mode: Literal["base", "head", "lora"] | None = Field(
        None, description="base: the checkpoint; head: an adapter with its own head only; lora: its own head and LoRA "
                          "weights; null: the adapter's folder does not read (the description says why)")
    resident: bool = Field(True, description="its weights are in memory now (an adapter that is not is loaded on "
                                             "its next request)")


class OpenAIModel(BaseModel):
    id: str
    object: Literal["model"] = "model"
    owned_by: str = "omni-decide"
    base: str | None = Field(None, description="an adapter's base model; null for the base")
    mode: Literal["base", "head", "lora"] | None = None
    release_date: str | None = None
    resident: bool = True


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
    400: {"model": ErrorBody, "description": "unknown model (the message names the models served), or an adapter "
                                             "that cannot be loaded (adapter_error, naming it and the cause)"},
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


# ------------------------------------------------------------------------------------------------ adapters (admin)
class AdapterLoad(BaseModel):
    """POST /v1/admin/adapters: serve the adapter folder `path` as `name`."""

    name: str = Field(description="the model name requests give; letters, digits, `.`, `_`, `-` (no `/`, no `..`)")
    path: str = Field(description="an adapter folder ON THE SERVER (an existing directory holding adapter.json)")


class ShadowCandidate(BaseModel):
    """PUT /v1/admin/shadows/{live}: the served adapter that scores the live model's requests too."""

    candidate: str


class AdapterCard(BaseModel):
    name: str
    mode: Literal["head", "lora"] | None = None
    base_sha256: str | None = Field(None, description="the fingerprint of the base it was trained on")
    created: str | None = None
    resident: bool = False
    sha256: str | None = Field(None, description="sha256 of its files (when resident)")
    bytes: int | None = Field(None, description="bytes resident (when resident)")
    error: str | None = Field(None, description="why its folder does not read")


class AdaptersServed(BaseModel):
    adapters: list[AdapterCard]
    stats: dict[str, int] = Field(description="served, resident, resident_lora, resident_bytes, in_flight, loads, "
                                              "reloads, unloads, evictions, load_failures, max_resident")
    shadows: dict[str, str] = Field(description="live model -> candidate adapter")
    shadow_stats: dict[str, int] = Field(description="shadow scores: same_forward, own_forward, dropped, failed")


class AdapterUnloaded(BaseModel):
    name: str
    unloaded: Literal[True] = True


class ShadowPairs(BaseModel):
    shadows: dict[str, str] = Field(description="live model -> candidate adapter, after the change")


ADAPTER_ADMIN_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "adapter_error: a bad name, a folder that is not an adapter (a missing, "
                                             "truncated or mis-shaped file), a base whose fingerprint differs (both "
                                             "named), a shadow candidate that is not served"},
    401: ERROR_RESPONSES[401],
    403: FORBIDDEN,
    404: {"model": ErrorBody, "description": "the adapter (or shadow pair) named in the path is not served, or the "
                                             "server serves no adapters"},
    409: {"model": ErrorBody, "description": "the name is already served, or the adapter is in use (requests in "
                                             "flight, a shadow pair)"},
    422: ERROR_RESPONSES[422],
    500: ERROR_RESPONSES[500],
}


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
