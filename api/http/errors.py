"""The ONE error table: exception class -> HTTP status, body shape, headers and Cloudflare code. Nothing else maps
errors.

Two body shapes on the System One routes, both with a top-level `request_id`:
- field faults (something at a place in the body): FastAPI style `{"detail": [{"loc": ["body", ...], "msg", "type"}]}`
- request faults: TypeSafe style `{"detail": {"error_type": ..., "message": ...}}`
and Cloudflare's envelope on its route (`envelope="cloudflare"`): `{"result": null, "success": false, "errors":
[{"code", "message"}], "messages": []}`, same status, one error per issue. Cloudflare's codes, as measured on
Workers AI: 10000 auth, 5006 a request it cannot use (Cloudflare: no questions or an unknown type; here: an unknown
model, 400), 5012 validation and inference failures, 5021 too large, 6003 unreadable body, 7000 no route, 3040
capacity.
avrik's published client (`envelope="avrik"`, chosen by its User-Agent) reads every refusal as `{"error": {"code",
"message", "field"}}`: it gets the System One body with that object added (`code` avrik's stable code where one
names the same fault — `context_too_large`, `model_unavailable` — else our `error_type`; `field` the first issue's
place, dotted; `message` its text).
Adapters (api/http/adapters.py): AdapterError 400 `adapter_error`, AdapterBusy 409 `conflict`; the admin routes
answer 404 for a name not served and 409 for a name already served (HTTPException).
Client faults are never 5xx; a 500 carries the request id and a fixed message, never the exception text.
Knows the core's exception classes and Starlette's HTTPException; knows nothing of routes or the model.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from omni.banks.entries import BankError
from omni.contract.errors import (
    AdapterBusy,
    AdapterError,
    CheckpointError,
    ContextTooLong,
    DeadlineExceeded,
    InferenceFailed,
    InvalidRequest,
    NotReady,
    Overloaded,
    UnknownModel,
)
from omni.contract.policy import PolicyError
from omni.review.appeals import AppealConflict, AppealLogDamaged, AppealNotFound
from preprocess.errors import CorruptMedia, MediaError, MediaErrors, MediaTooLarge, UnsupportedMedia

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------- edge errors (raised only in api/)
class ApiError(Exception):
    """Base of the errors the HTTP edge raises itself."""


class Unauthorized(ApiError):
    """No Bearer key, or not one of the configured keys."""


class Forbidden(ApiError):
    """A known caller whose role is below the one the route needs (the message names both)."""


class BodyTooLarge(ApiError):
    """The body (as sent, or once decompressed) is over the configured cap."""


class UnsupportedContentType(ApiError):
    """Content-Type or Content-Encoding this server does not read."""


class BodyTimeout(ApiError):
    """The body did not arrive within the configured body deadline."""


class NoRoute(ApiError):
    """A Cloudflare model route this server does not run (e.g. @cf/cloudflare/clef-flash)."""


class Draining(ApiError):
    """A request that arrived after the server began to drain (SIGTERM): try another replica, or again later."""


# ---------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Rule:
    status: int | None                      # None: take exc.status_code (Starlette HTTPException)
    error_type: str
    cf_code: int                            # Cloudflare's error code for the same fault (its envelope)
    field: bool = False                     # True: detail[] with loc; False: detail{error_type, message}
    message: Callable[[BaseException], str] | None = None   # None: str(exc)
    headers: Callable[[BaseException], dict[str, str]] | None = None


def _retry_after(exc: BaseException) -> dict[str, str]:
    seconds = max(0.1, exc.retry_after_s if isinstance(exc, Overloaded) else 1.0)
    return {"Retry-After": str(math.ceil(seconds)), "retry-after-ms": str(int(seconds * 1000))}


_INTERNAL = "internal error; quote the request id when reporting it"

# `cf_code`: Cloudflare's code for the same fault, as measured on Workers AI (the list is in the module docstring).
TABLE: dict[type[Exception], Rule] = {
    Unauthorized: Rule(401, "authentication_error", 10000, headers=lambda e: {"WWW-Authenticate": "Bearer"}),
    Forbidden: Rule(403, "permission_error", 10000),
    BodyTooLarge: Rule(413, "request_too_large", 5021),
    BodyTimeout: Rule(408, "request_timeout", 5012, headers=lambda e: {"Connection": "close"}),
    # the client hung up mid-upload: nobody reads the answer; 499 (nginx's "client closed request") keeps it out of
    # the 5xx counts and the error log
    ClientDisconnect: Rule(499, "client_disconnected", 5012),
    UnsupportedContentType: Rule(415, "unsupported_media_type", 6003),
    NoRoute: Rule(400, "no_route", 7000),
    RequestValidationError: Rule(422, "validation_error", 5012, field=True),
    InvalidRequest: Rule(422, "validation_error", 5012, field=True),
    ContextTooLong: Rule(413, "context_too_long", 5021, field=True),
    MediaError: Rule(422, "media_error", 5012, field=True),
    CorruptMedia: Rule(422, "corrupt_media", 5012, field=True),
    MediaTooLarge: Rule(413, "media_too_large", 5021, field=True),
    UnsupportedMedia: Rule(415, "unsupported_media", 5012, field=True),
    # several bad items of mixed kinds (of one kind: that kind's row, `rule_for`): every entry typed as its own
    MediaErrors: Rule(422, "media_error", 5012, field=True),
    UnknownModel: Rule(400, "api_usage_error", 5006),
    # an adapter that cannot be used: a bad name or folder, a wrong base (both fingerprints named), not served; on the
    # decision path too (its folder went bad since it was served): the caller's model choice, never a 5xx
    AdapterError: Rule(400, "adapter_error", 5006),
    AdapterBusy: Rule(409, "conflict", 5012),         # unload while requests (or a shadow pair) hold the adapter
    PolicyError: Rule(422, "policy_error", 5012),     # the operator's policy file no longer reads (a reload)
    BankError: Rule(422, "bank_error", 5012),         # a bank file no longer reads (a reload)
    AppealNotFound: Rule(404, "not_found", 7000),     # no such logged decision, or no such appeal
    AppealConflict: Rule(409, "conflict", 5012),      # appealed already, or the appeal decided already
    AppealLogDamaged: Rule(503, "decision_log_damaged", 3040),   # not found, and damaged lines may hold it
    Overloaded: Rule(429, "rate_limit_error", 3040, headers=_retry_after),
    NotReady: Rule(503, "not_ready", 3040, headers=lambda e: {"Retry-After": "5"}),
    Draining: Rule(503, "not_ready", 3040, headers=lambda e: {"Retry-After": "5", "Connection": "close"}),
    DeadlineExceeded: Rule(504, "timeout", 5012),
    StarletteHTTPException: Rule(None, "http_error", 7000, message=lambda e: str(getattr(e, "detail", "")),
                                 headers=lambda e: dict(getattr(e, "headers", None) or {})),
    InferenceFailed: Rule(500, "internal_error", 5012),
    CheckpointError: Rule(500, "internal_error", 5012),
    Exception: Rule(500, "internal_error", 5012),     # anything unexpected is a bug: 500, text never shown
}

_HTTP_TYPES = {404: "not_found", 405: "method_not_allowed", 400: "api_usage_error", 409: "conflict"}


def rule_for(exc: BaseException) -> Rule:
    """The most specific row: the first class of the exception's MRO that the table names. Several bad media items
    of one kind answer as that kind does (two unsupported files: 415); mixed kinds, as `MediaErrors` (422)."""
    if isinstance(exc, MediaErrors) and len({type(error) for error in exc.errors}) == 1:
        return rule_for(exc.errors[0])
    for cls in type(exc).__mro__:
        if cls in TABLE:
            return TABLE[cls]
    return TABLE[Exception]


def handled_classes() -> tuple[type[Exception], ...]:
    """Classes to register as FastAPI exception handlers (Exception itself is caught by the request middleware)."""
    return tuple(cls for cls in TABLE if cls is not Exception)


def error_payload(exc: BaseException, request_id: str,
                  envelope: str = "systemone") -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, JSON body, headers) for `exc`, in the System One shape or Cloudflare's (`envelope="cloudflare"`)."""
    rule = rule_for(exc)
    status = rule.status if rule.status is not None else int(getattr(exc, "status_code", 500))
    headers = rule.headers(exc) if rule.headers else {}
    detail: list[dict[str, Any]] | dict[str, str]
    if rule.field:
        detail = _field_issues(exc)
    else:
        error_type = _HTTP_TYPES.get(status, rule.error_type) if rule.status is None else rule.error_type
        message = rule.message(exc) if rule.message else str(exc)
        detail = {"error_type": error_type, "message": message}
    if status == 499:
        log.info("request %s: the client disconnected before its body arrived", request_id)
    raw = exc.raw if isinstance(exc, (InvalidRequest, MediaError)) else None
    if raw:                           # what a library said, kept from the caller
        log.info("request %s: %s (%s)", request_id, type(exc).__name__, raw)
    if status == 500:  # a bug or a device fault: log everything, show nothing
        log.error("request %s failed: %s", request_id, type(exc).__name__, exc_info=exc)
        detail = {"error_type": "internal_error", "message": f"{_INTERNAL} ({request_id})"}
    if envelope == "cloudflare":
        return status, _cloudflare_errors(detail, rule.cf_code), headers
    body: dict[str, Any] = {"detail": detail, "request_id": request_id}
    if envelope == "avrik":
        body["error"] = _avrik_error(detail, rule.error_type if status != 500 else "internal_error")
    return status, body, headers


# avrik's stable codes for the faults it names the same way (avrik_sdk.errors); the others keep our error_type
_AVRIK_CODES = {"context_too_long": "context_too_large", "not_ready": "model_unavailable"}


def _avrik_error(detail: list[dict[str, Any]] | dict[str, str], error_type: str) -> dict[str, Any]:
    """avrik's `{"code", "message", "field"}` for one refusal: the first issue's place and text (and how many more)."""
    if isinstance(detail, list) and detail:
        first = detail[0]
        more = f" (and {len(detail) - 1} more issues)" if len(detail) > 1 else ""
        field = ".".join(map(str, first["loc"][1:])) or None
        return {"code": _AVRIK_CODES.get(error_type, error_type), "message": f"{field}: {first['msg']}{more}"
                if field else f"{first['msg']}{more}", "field": field}
    message = detail["message"] if isinstance(detail, dict) else ""
    error_type = detail.get("error_type", error_type) if isinstance(detail, dict) else error_type
    return {"code": _AVRIK_CODES.get(error_type, error_type), "message": message, "field": None}


def _cloudflare_errors(detail: list[dict[str, Any]] | dict[str, str], code: int) -> dict[str, Any]:
    """Cloudflare's error envelope: one {code, message} per issue (a field issue's message names its place)."""
    if isinstance(detail, list):
        errors = [{"code": code, "message": ".".join(map(str, issue["loc"][1:])) + f": {issue['msg']}"}
                  for issue in detail]
    else:
        errors = [{"code": code, "message": detail["message"]}]
    return {"result": None, "success": False, "errors": errors, "messages": []}


def _field_issues(exc: BaseException) -> list[dict[str, Any]]:
    if isinstance(exc, RequestValidationError):
        return [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "value_error")}
                for e in exc.errors()]
    if isinstance(exc, InvalidRequest):
        return [{"loc": ["body", *i.loc], "msg": i.msg, "type": i.type} for i in exc.issues]
    if isinstance(exc, MediaErrors):  # every bad item of the request, each at its place
        return [issue for error in exc.errors for issue in _field_issues(error)]
    if isinstance(exc, MediaError):   # the item says where it sits and how it was sent
        return [{"loc": ["body", *exc.item.loc], "msg": exc.message, "type": exc.type}]
    return [{"loc": ["body"], "msg": str(exc), "type": "value_error"}]
