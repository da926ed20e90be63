"""Review routes (/v1/review/...): the queues, their items and media, what reviewers do (labels, comments, flags,
skips, undo), agreement between them, eval reports.

The queue routes need the reviewer role, reports and agreement the admin role (`require_role`); every action is
recorded under the caller's name (`caller_of`). Queues and reports are the ones the operator named when starting the
server (`--review-dir`, `--review-batches`, `--review-reports`); callers pick them by id and never name a path. File
work runs in FastAPI's thread pool (plain `def` routes, or `anyio.to_thread` where a route reads its body itself, so
unreadable JSON is the same 422 json_invalid as on /v1/systemone). Answers: an unknown queue, item or event 404; a bad
label, comment, flag reason or filter 422 naming the field and the rule; an undo that would revert what is not the
caller's last change 409 saying why. Without `--review-dir` the queue routes answer 404 saying how to turn them on.
Knows nothing of the engine or the model; the queues' rules are `omni.review.queues`'s.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import anyio
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from api.http import review_schemas, schemas
from api.http.dependencies import require_role, service
from api.http.guidelines import EMPTY
from api.http.identity import caller_of
from omni.contract.answers import label_id
from omni.contract.errors import InvalidRequest, clipped, quoted
from omni.contract.json_values import load_json
from omni.contract.outcomes import OUTCOMES
from omni.review.filters import STATE_FILTERS, ItemFilter, ReviewInputError
from omni.review.history import UndoRefused
from omni.review.queues import ORDERS, ReviewQueues, Viewer
from omni.review.wellness import ExposureLimit

T = TypeVar("T")

router = APIRouter(prefix="/v1/review", dependencies=[Depends(require_role("reviewer"))], tags=["review"],
                   responses=review_schemas.REVIEW_RESPONSES)
REPORT_FILES = ("metrics.json", "report.md")


def _queues(request: Request) -> ReviewQueues:
    queues = service(request).review
    if queues is None:
        raise HTTPException(404, "review is off: start the server with --review-dir DIR (and --review-batches OUT.jsonl "
                                 "to review batch outputs)")
    return queues


def _found(call: Callable[..., T], *args: object) -> T:
    try:
        return call(*args)
    except KeyError as exc:
        raise HTTPException(404, str(exc.args[0]) if exc.args else "not found") from None


def _viewer(request: Request) -> Viewer:
    """The caller as the queues see them: their name, and whether every reviewer's labels are theirs to see (an admin
    known by key; without keys everyone is an admin, so blind labels stay blind)."""
    caller = caller_of(request)
    return Viewer(caller.name, sees_all=caller.role == "admin" and caller.named_by == "key")


async def _run(call: Callable[..., T], *args: object) -> T:
    """A queues call in the thread pool: KeyError -> 404, a bad input -> 422 at its body field, a refused undo -> 409."""
    try:
        return await anyio.to_thread.run_sync(_found, call, *args)
    except ReviewInputError as exc:
        raise InvalidRequest.one((exc.field,), str(exc)) from None
    except UndoRefused as exc:
        raise HTTPException(409, str(exc)) from None


async def _body(request: Request, example: str) -> dict:
    body = load_json(await request.body())          # unreadable JSON: 422 json_invalid, as on /v1/systemone
    if not isinstance(body, dict):
        raise InvalidRequest.one((), f"send a JSON object: {example}", "dict_type")
    return body


@router.get("/queues", response_model=review_schemas.ReviewQueueList,
            summary="the review queues: batch outputs, kept decisions, disagreements (k>=2)")
def queues(request: Request) -> dict:
    return {"queues": _queues(request).queues()}


@router.get("/queues/{queue_id}/items", response_model=review_schemas.ReviewEntryList,
            summary="a queue's items, most uncertain first (the caller's skipped ones last), filtered")
def items(request: Request, queue_id: str, order: str = Query("confidence", pattern="^(" + "|".join(ORDERS) + ")$"),
          threshold: float = Query(0.9, ge=0.0, le=1.0),
          question: str | None = Query(None, description="items with this question (needed by answer)"),
          answer: str | None = Query(None, description="the model's top answer (label id) to `question`"),
          min_confidence: float | None = Query(None, ge=0.0, le=1.0,
                                               description="the item's confidence, or the question's with `question`"),
          max_confidence: float | None = Query(None, ge=0.0, le=1.0),
          outcome: str | None = Query(None, pattern="^(" + "|".join(OUTCOMES) + ")$",
                                      description="the policy's overall outcome of a routed decision"),
          reviewer: str | None = Query(None, description="items this reviewer labelled, commented or flagged"),
          state: str | None = Query(None, pattern="^(" + "|".join(STATE_FILTERS) + ")$"),
          model: str | None = Query(None, description="items this model answered (the base or an adapter)")) -> dict:
    try:
        where = ItemFilter(question, answer, min_confidence, max_confidence, outcome, reviewer, state, model)
    except ReviewInputError as exc:
        raise RequestValidationError([{"loc": ("query", exc.field), "msg": str(exc), "type": "value_error"}]) from None
    return {"items": _found(_queues(request).items, queue_id, order, threshold, where, _viewer(request))}


@router.get("/queues/{queue_id}/items/{key}", response_model=review_schemas.ReviewItem,
            summary="one item: state, questions, answers, labels, history, comments, flags, skips, media")
def item(request: Request, queue_id: str, key: str) -> dict:
    return _found(_queues(request).item, queue_id, key, _viewer(request))


@router.get("/queues/{queue_id}/items/{key}/media/{index}", response_class=Response,
            summary="the bytes of an item's media item, typed for the browser")
def media(request: Request, queue_id: str, key: str, index: int) -> Response:
    data, media_type = _found(_queues(request).media, queue_id, key, index)
    return Response(data, media_type=media_type, headers={"Cache-Control": "private, max-age=3600"})


@router.post("/queues/{queue_id}/items/{key}/media/{index}/reveal", response_model=review_schemas.ReviewReveal,
             summary="reveal a shielded medium: counted once per reviewer and day (429 past their daily limit)")
async def reveal(request: Request, queue_id: str, key: str, index: int) -> dict:
    try:
        return await _run(_queues(request).reveal, queue_id, key, index, _viewer(request))
    except ExposureLimit as exc:
        raise HTTPException(429, str(exc)) from None


@router.put("/queues/{queue_id}/items/{key}/labels", response_model=review_schemas.ReviewLabels,
            summary="save labels (null clears one); saved at once, each change in the history",
            openapi_extra=review_schemas.REVIEW_LABELS_BODY)
async def label(request: Request, queue_id: str, key: str) -> dict:
    body = load_json(await request.body())          # unreadable JSON: 422 json_invalid, as on /v1/systemone
    labels = body.get("labels") if isinstance(body, dict) else None
    if not isinstance(labels, dict):
        raise InvalidRequest.one(("labels",), "send {\"labels\": {question_id: answer id or null}}", "dict_type")
    for qid, value in labels.items():        # as labels.jsonl writes them (true, 2) or as ids ("true", "2")
        if isinstance(value, (bool, int)):
            labels[qid] = label_id(value)
        elif value is not None and not isinstance(value, str):
            raise InvalidRequest.one(("labels", clipped(qid)), "a label is an answer: true or false (noul), an "
                                                      "option id (choice), a level index (score), or null to clear it")
    queues = _queues(request)
    try:
        return await anyio.to_thread.run_sync(_found, queues.label, queue_id, key, labels, _viewer(request))
    except ValueError as exc:
        raise InvalidRequest.one(("labels",), str(exc)) from None


@router.post("/queues/{queue_id}/items/{key}/comments", status_code=201, response_model=review_schemas.ReviewComment,
             summary="comment on an item", openapi_extra=review_schemas.REVIEW_COMMENT_BODY)
async def comment(request: Request, queue_id: str, key: str) -> dict:
    body = await _body(request, '{"text": "…"}')
    return await _run(_queues(request).comment, queue_id, key, body.get("text"), _viewer(request))


@router.post("/queues/{queue_id}/items/{key}/flag", status_code=201, response_model=review_schemas.ReviewMark,
             summary="flag an item for attention, with a reason", openapi_extra=review_schemas.REVIEW_FLAG_BODY)
async def flag(request: Request, queue_id: str, key: str) -> dict:
    body = await _body(request, '{"reason": "…"}')
    return await _run(_queues(request).flag, queue_id, key, body.get("reason"), _viewer(request))


@router.post("/queues/{queue_id}/items/{key}/skip", status_code=201, response_model=review_schemas.ReviewMark,
             summary="skip an item (it goes last in the caller's list)", openapi_extra=review_schemas.REVIEW_SKIP_BODY)
async def skip(request: Request, queue_id: str, key: str) -> dict:
    body = await _body(request, '{"reason": "…"} or {}') if await request.body() else {}
    return await _run(_queues(request).skip, queue_id, key, body.get("reason"), _viewer(request))


@router.post("/queues/{queue_id}/items/{key}/undo", response_model=review_schemas.ReviewUndone,
             responses=review_schemas.UNDO_RESPONSES, summary="undo the caller's own label change, flag or skip",
             openapi_extra=review_schemas.REVIEW_UNDO_BODY)
async def undo(request: Request, queue_id: str, key: str) -> dict:
    body = await _body(request, '{"event": "e-…"}')
    event = body.get("event")
    if not isinstance(event, str) or not event:
        raise InvalidRequest.one(("event",), "send {\"event\": id}: the id of your label, flag or skip event",
                                 "string_type")
    return await _run(_queues(request).undo, queue_id, key, event, _viewer(request))


@router.get("/agreement", dependencies=[Depends(require_role("admin"))], response_model=review_schemas.ReviewAgreement,
            summary="agreement per question: between reviewers (Cohen's or Fleiss' kappa) and with the model")
def agreement(request: Request) -> dict:
    return _queues(request).agreement()


# ------------------------------------------------------------------------------------------------ reports
def report_dirs(paths: tuple[str, ...]) -> dict[str, Path]:
    """Report id -> directory of an `omni eval --out` report (ids are stable for a path)."""
    return {"r-" + hashlib.sha1(str(Path(p).resolve()).encode()).hexdigest()[:10]: Path(p).resolve() for p in paths}


@router.get("/reports", dependencies=[Depends(require_role("admin"))], response_model=review_schemas.ReportList, summary="the eval reports this server shows")
def reports(request: Request) -> dict:
    return {"reports": [{"id": rid, "name": path.name} for rid, path in service(request).reports.items()]}


@router.get("/reports/{report_id}", dependencies=[Depends(require_role("admin"))], response_model=review_schemas.Report, summary="one eval report: metrics.json, report.md, its figures")
def report(request: Request, report_id: str) -> dict:
    path = _report(request, report_id)
    metrics = json.loads((path / "metrics.json").read_text(encoding="utf-8"))
    markdown = (path / "report.md").read_text(encoding="utf-8") if (path / "report.md").exists() else ""
    return {"id": report_id, "name": path.name, "metrics": metrics, "markdown": markdown,
            "figures": sorted(p.name for p in path.glob("*.png"))}


@router.get("/reports/{report_id}/figures/{name}", dependencies=[Depends(require_role("admin"))], response_class=Response, summary="a report's PNG figure")
def figure(request: Request, report_id: str, name: str) -> Response:
    path = _report(request, report_id)
    figures = {p.name: p for p in path.glob("*.png")}
    if name not in figures:                      # only names listed in the directory: never a caller's path
        raise HTTPException(404, f"report {report_id} has no figure {quoted(name)}")
    return Response(figures[name].read_bytes(), media_type="image/png")


def _report(request: Request, report_id: str) -> Path:
    path = service(request).reports.get(report_id)
    if path is None:
        raise HTTPException(404, f"no report {quoted(report_id)}")
    return path


@router.get("/queues/{queue_id}/guidelines", response_model=schemas.Guidelines,
            summary="the queue's guidelines: markdown as written and safe HTML (both \"\" when it has none)")
def queue_guidelines(request: Request, queue_id: str) -> dict:
    svc = service(request)
    if svc.review is None:
        raise HTTPException(404, "review is off: start the server with --review-dir DIR")
    source = svc.review.sources.get(queue_id)
    if source is None and queue_id != "disagreements":
        raise HTTPException(404, f"no review queue {quoted(queue_id)}")
    labels = (queue_id, source.name, source.kind) if source is not None else (queue_id,)
    return svc.guidelines.for_queue(*labels) if svc.guidelines is not None else EMPTY
