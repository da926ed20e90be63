"""Appeals routes (DSA Art. 20's internal complaint handling): `POST /v1/decisions/{request_id}/appeal` (role caller)
contests a logged decision with the caller's reason; `GET /v1/appeals[?state=pending]` and
`GET /v1/appeals/{request_id}` show the appeals queue (role reviewer): each appeal with the logged decision, its
answers, its outcome, its kept evidence summary and the reason; `POST /v1/appeals/{request_id}/decision`
(role reviewer) upholds or reverses it, recorded with who and when; a reversal is sent to the webhook (when one is
configured) as `{"event": "appeal_reversed", ...}`, keyed by the request id.

Appeals need the decision log (`--decision-log`: the decision appealed must be logged) and the review directory
(`--review-dir`: where `appeals.jsonl` is kept). A body over APPEAL_BODY_MAX_BYTES is a 413, one that is not a JSON
object a 422, a reason missing, empty or over MAX_REASON_CHARS a 422 naming `reason` and the limit; an unknown or
unlogged decision a 404 (a 503 naming the damaged line when the decision log has damaged lines the decision may be
on: the log is searched past them); a decision appealed already, or an appeal decided already, a 409 saying since
when.
Knows nothing of the engine, the model or how the log is stored beyond `read_records`.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from anyio import to_thread
from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse

from api.http.dependencies import ServiceState, require_role, service
from api.http.errors import BodyTooLarge
from api.http.identity import caller_of
from omni.contract.errors import InvalidRequest
from omni.contract.json_values import JSONObject
from omni.review.appeals import MAX_REASON_CHARS, RESULTS, AppealBook, AppealLogDamaged, AppealNotFound

log = logging.getLogger("omni.api")

APPEAL_BODY_MAX_BYTES = 16 * 1024
MAX_NOTE_CHARS = 2000
NO_APPEALS = "appeals need the decision log and a review directory (start the server with --decision-log DIR " \
             "and --review-dir DIR)"
router = APIRouter(tags=["appeals"])


@router.post("/v1/decisions/{request_id}/appeal", status_code=201, response_model=None,
             dependencies=[Depends(require_role("caller"))],
             summary="Appeal a logged decision, with the caller's reason (it goes to the appeals queue)")
async def appeal(request: Request, request_id: str) -> JSONResponse:
    svc = service(request)
    book = _book(svc)
    body = await _json_object(request)
    reason = body.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidRequest.one(("reason",), "required: a non-empty string saying why the decision is wrong",
                                 "missing" if reason is None else "string_type")
    _encodable(reason, "reason")
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidRequest.one(("reason",), f"at most {MAX_REASON_CHARS} characters, not {len(reason)}",
                                 "string_too_long")
    if book.get(request_id) is None:           # a known appeal is the book's 409, without reading the log
        logged = await to_thread.run_sync(_logged, svc, request_id)
        if logged is None:
            raise AppealNotFound(f"no logged decision has the request id {request_id!r} (only decisions the "
                                 f"decision log kept can be appealed)")
    else:
        logged = {}
    made = await to_thread.run_sync(book.appeal, request_id, reason.strip(), caller_of(request).name, logged)
    return JSONResponse(made.to_wire(), status_code=201)


@router.get("/v1/appeals", response_model=None, dependencies=[Depends(require_role("reviewer"))],
            summary="The appeals queue: every appeal (or those of one state) with the decision it contests")
async def appeals(request: Request, state: str | None = None) -> JSONResponse:
    if state is not None and state not in ("pending", *RESULTS):
        raise InvalidRequest.one(("state",), f"one of pending, {', '.join(RESULTS)}, not {state!r}", "enum")
    book = _book(service(request))
    return JSONResponse({"appeals": [a.to_wire() for a in book.all(state)]})


@router.get("/v1/appeals/{request_id}", response_model=None, dependencies=[Depends(require_role("reviewer"))],
            summary="One appeal with the decision it contests")
async def one_appeal(request: Request, request_id: str) -> JSONResponse:
    found = _book(service(request)).get(request_id)
    if found is None:
        raise AppealNotFound(f"no appeal of the decision {request_id!r}")
    return JSONResponse(found.to_wire())


@router.post("/v1/appeals/{request_id}/decision", response_model=None,
             dependencies=[Depends(require_role("reviewer"))],
             summary="Uphold or reverse an appealed decision (recorded with who and when; a reversal is sent to "
                     "the webhook)")
async def decide_appeal(request: Request, request_id: str) -> JSONResponse:
    svc = service(request)
    book = _book(svc)
    body = await _json_object(request)
    result, note = body.get("result"), body.get("note")
    if result not in RESULTS:
        raise InvalidRequest.one(("result",), f"one of {', '.join(RESULTS)}", "enum")
    if note is not None and (not isinstance(note, str) or len(note) > MAX_NOTE_CHARS):
        raise InvalidRequest.one(("note",), f"a string of at most {MAX_NOTE_CHARS} characters", "string_type")
    if note is not None:
        _encodable(note, "note")
    decided = await to_thread.run_sync(book.decide, request_id, result, caller_of(request).name, note)
    if result == "reversed" and svc.webhooks is not None:
        svc.webhooks.offer({"event": "appeal_reversed", "request_id": request_id, "appeal": decided.to_wire()},
                           f"{request_id}:appeal")
    return JSONResponse(decided.to_wire())


def _book(svc: ServiceState) -> AppealBook:
    if svc.appeals is None:
        raise HTTPException(404, NO_APPEALS)
    return svc.appeals


async def _json_object(request: Request) -> dict[str, Any]:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > APPEAL_BODY_MAX_BYTES:
        raise BodyTooLarge(f"an appeal's body of {declared} bytes is over the {APPEAL_BODY_MAX_BYTES}-byte limit")
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > APPEAL_BODY_MAX_BYTES:
            raise BodyTooLarge(f"an appeal's body is over the {APPEAL_BODY_MAX_BYTES}-byte limit")
    try:
        body = json.loads(bytes(raw))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):    # RecursionError: nested past any use
        raise InvalidRequest.one((), "the body is not JSON: send {\"reason\": \"...\"}", "json_invalid") from None
    if not isinstance(body, dict):
        raise InvalidRequest.one((), "the body must be a JSON object", "dict_type")
    return body


def _encodable(text: str, field: str) -> None:
    """A JSON string may carry a lone surrogate (\\ud800), which no UTF-8 file can hold: refused, naming the field."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest.one((field,), "not valid Unicode text: a lone surrogate (\\ud800-\\udfff) escape",
                                 "string_unicode") from None


def _logged(svc: ServiceState, request_id: str) -> JSONObject | None:
    """The logged decision with `request_id`, summarised for the appeal (what was decided and on what), or None.
    The log's queue is flushed first, so a decision answered a moment ago is found."""
    from omni.serve.decision_log_files import read_records

    decision_log = svc.decision_log
    assert decision_log is not None                # _book checked it
    decision_log.flush(timeout_s=10.0)
    found: JSONObject | None = None
    damage: list[Exception] = []
    for logged in read_records(decision_log.directory, damage.append):   # the last record of that id: the answered one
        if logged.record.get("request_id") == request_id:
            found = logged.record
    if found is None and damage:
        log.error("decision log damaged: %s", "; ".join(map(str, damage[:5])))
        raise AppealLogDamaged(f"no readable record of the decision log has the request id {request_id!r}, and "
                               f"{len(damage)} of its lines are damaged ({damage[0]}): it may be one of them; the "
                               f"operator has to repair the log")
    if found is None:
        return None
    response = found.get("response") if isinstance(found.get("response"), dict) else {}
    assert isinstance(response, dict)
    return {"model": response.get("model"), "decided_at": found.get("decided_at"),
            "answers": response.get("answers"), "x_outcome": response.get("x_outcome"),
            "x_match": response.get("x_match"), "evidence": found.get("evidence"),
            "request": {"state": (found.get("request") or {}).get("state") if isinstance(found.get("request"), dict)
                        else None}}
