"""Review routes (/v1/review/...): the queues, their items and media, the labels a reviewer saves, eval reports.

Behind the API keys like /v1/systemone. Queues and reports are the ones the operator named when starting the server
(`--review-dir`, `--review-batches`, `--review-reports`); callers pick them by id and never name a path. File work
runs in FastAPI's thread pool (plain `def` routes; the label route reads its body itself, so unreadable JSON
is the same 422 json_invalid as on /v1/systemone). Without `--review-dir` the queue routes answer 404 saying how to
turn them on. Knows nothing of the engine or the model; the queues' rules are `omni.learn.review_queue`'s.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import anyio
from fastapi import APIRouter, Depends, Query, Request, Response
from starlette.exceptions import HTTPException

from api.http import schemas
from api.http.routes import require_api_key, service
from omni.contract.errors import InvalidRequest
from omni.contract.json_values import load_json
from omni.learn.review import label_id
from omni.learn.review_queue import ORDERS, ReviewQueues

T = TypeVar("T")

router = APIRouter(prefix="/v1/review", dependencies=[Depends(require_api_key)], tags=["review"],
                   responses=schemas.REVIEW_RESPONSES)
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


@router.get("/queues", response_model=schemas.ReviewQueueList, summary="the review queues: batch outputs and kept decisions")
def queues(request: Request) -> dict:
    return {"queues": _queues(request).queues()}


@router.get("/queues/{queue_id}/items", response_model=schemas.ReviewEntryList, summary="a queue's items, most uncertain first")
def items(request: Request, queue_id: str, order: str = Query("confidence", pattern="^(" + "|".join(ORDERS) + ")$"),
          threshold: float = Query(0.9, ge=0.0, le=1.0)) -> dict:
    return {"items": _found(_queues(request).items, queue_id, order, threshold)}


@router.get("/queues/{queue_id}/items/{key}", response_model=schemas.ReviewItem, summary="one item: state, questions, answers, labels, media")
def item(request: Request, queue_id: str, key: str) -> dict:
    return _found(_queues(request).item, queue_id, key)


@router.get("/queues/{queue_id}/items/{key}/media/{index}", response_class=Response,
            summary="the bytes of an item's media item, typed for the browser")
def media(request: Request, queue_id: str, key: str, index: int) -> Response:
    data, media_type = _found(_queues(request).media, queue_id, key, index)
    return Response(data, media_type=media_type, headers={"Cache-Control": "private, max-age=3600"})


@router.put("/queues/{queue_id}/items/{key}/labels", response_model=schemas.ReviewLabels,
            summary="save labels (null clears one); saved at once", openapi_extra=schemas.REVIEW_LABELS_BODY)
async def label(request: Request, queue_id: str, key: str) -> dict:
    body = load_json(await request.body())          # unreadable JSON: 422 json_invalid, as on /v1/systemone
    labels = body.get("labels") if isinstance(body, dict) else None
    if not isinstance(labels, dict):
        raise InvalidRequest.one(("labels",), "send {\"labels\": {question_id: answer id or null}}", "dict_type")
    for qid, value in labels.items():        # as labels.jsonl writes them (true, 2) or as ids ("true", "2")
        if isinstance(value, (bool, int)):
            labels[qid] = label_id(value)
        elif value is not None and not isinstance(value, str):
            raise InvalidRequest.one(("labels", qid), "a label is an answer: true or false (noul), an option id "
                                                      "(choice), a level index (score), or null to clear it")
    queues = _queues(request)
    try:
        saved = await anyio.to_thread.run_sync(_found, queues.label, queue_id, key, labels)
    except ValueError as exc:
        raise InvalidRequest.one(("labels",), str(exc)) from None
    return {"labels": saved}


# ------------------------------------------------------------------------------------------------ reports
def report_dirs(paths: tuple[str, ...]) -> dict[str, Path]:
    """Report id -> directory of an `omni eval --out` report (ids are stable for a path)."""
    return {"r-" + hashlib.sha1(str(Path(p).resolve()).encode()).hexdigest()[:10]: Path(p).resolve() for p in paths}


@router.get("/reports", response_model=schemas.ReportList, summary="the eval reports this server shows")
def reports(request: Request) -> dict:
    return {"reports": [{"id": rid, "name": path.name} for rid, path in service(request).reports.items()]}


@router.get("/reports/{report_id}", response_model=schemas.Report, summary="one eval report: metrics.json, report.md, its figures")
def report(request: Request, report_id: str) -> dict:
    path = _report(request, report_id)
    metrics = json.loads((path / "metrics.json").read_text(encoding="utf-8"))
    markdown = (path / "report.md").read_text(encoding="utf-8") if (path / "report.md").exists() else ""
    return {"id": report_id, "name": path.name, "metrics": metrics, "markdown": markdown,
            "figures": sorted(p.name for p in path.glob("*.png"))}


@router.get("/reports/{report_id}/figures/{name}", response_class=Response, summary="a report's PNG figure")
def figure(request: Request, report_id: str, name: str) -> Response:
    path = _report(request, report_id)
    figures = {p.name: p for p in path.glob("*.png")}
    if name not in figures:                      # only names listed in the directory: never a caller's path
        raise HTTPException(404, f"report {report_id} has no figure {name!r}")
    return Response(figures[name].read_bytes(), media_type="image/png")


def _report(request: Request, report_id: str) -> Path:
    path = service(request).reports.get(report_id)
    if path is None:
        raise HTTPException(404, f"no report {report_id!r}")
    return path
