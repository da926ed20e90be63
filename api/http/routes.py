"""HTTP routes: /v1/systemone, /v1/models, /v1/whoami, /health, /ready, /metrics.

The decision route: auth -> readiness -> capped body read -> (thread pool) decompress and split the body into JSON
plus named parts (`api/http/transport.py`), `parse_request` (the one wire parser, which also checks the model name)
-> with `--bank`, the media's hashes looked up (docs/banks.md: a match that decides answers here, without the model)
-> `engine.submit` (admission, decode pool, micro-batcher) awaited with the request's deadline -> System One JSON +
Server-Timing. `decide` is that whole path, so another wire envelope is a thin route around it (see
`api/http/cloudflare.py`). Errors are raised, never caught here: `api/http/errors.py` maps them. Who may call is
checked by the dependencies of `api/http/dependencies.py`, which also holds the service's state.
Async code never touches torch; all engine work happens behind `engine.submit`'s future.
Knows nothing of how the engine batches or decodes, nor of the environment.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from starlette.background import BackgroundTask

from api.http import schemas
from api.http.adapters import adapter_names, model_cards
from api.http.dependencies import (
    ServiceState,
    require_api_key,
    require_key_for_docs,
    require_key_for_metrics,
    service,
)
from api.http.errors import BodyTimeout, BodyTooLarge
from api.http.identity import caller_of
from api.http.shadow import log_decision
from api.http.transport import check_content_headers, decompress, read_body
from omni.contract.avrik import AVRIK_CLIENT_AGENT, avrik_audit
from omni.contract.errors import DeadlineExceeded, NotReady
from omni.contract.evidence_summary import LOGGED_ASK
from omni.contract.json_values import JSONObject
from omni.contract.outcomes import with_outcome
from omni.contract.qa import qa_sample
from omni.contract.request import parse_request
from omni.contract.types import Decision, DecisionRequest

if TYPE_CHECKING:
    from omni.banks.gate import Consulted
    from omni.review.queues import ReviewQueues

log = logging.getLogger("omni.api")
INLINE_PARSE_MAX_BYTES = 16 * 1024  # smaller uncompressed bodies are parsed on the event loop


router = APIRouter()


@router.post("/v1/systemone", dependencies=[Depends(require_api_key)], response_model=None, tags=["decisions"],
             summary="Answer typed questions about a state and its media in one prefill",
             responses={200: {"model": schemas.SystemOneResponse}, **schemas.ERROR_RESPONSES},
             openapi_extra=schemas.DECISION_REQUEST_BODY)
async def systemone(request: Request) -> Response:
    avrik = request.headers.get("user-agent", "").startswith(AVRIK_CLIENT_AGENT)   # its client needs `audit`
    decision, server_timing = await decide(request, audit=avrik)
    wire = decision.to_wire()
    if avrik and decision.audit is not None:
        wire["audit"] = avrik_audit(decision.audit, request.state.decision_request)
    keep = kept(request, decision, wire)
    return JSONResponse(wire, headers={"Server-Timing": server_timing}, background=keep)   # kept after it is sent


def kept(request: Request, decision: Decision, wire: JSONObject) -> BackgroundTask | None:
    """A served decision goes to the decision log (queued: the writer thread does the I/O), to the webhook when its
    outcome is one it is sent for (queued too), and, with a review directory, is kept for review after its answer
    was sent (the returned task); all with its audit record. Under a policy only the decisions whose outcome is
    `review` are kept, in a queue of their own with the reasons, and the automatic ones its `[qa]` draws
    (omni/contract/qa.py), in the QA queue; without one, every decision is (a hash bank's answers too, in the
    kept decisions' queue). A decision a shadow
    candidate scores goes to the log once the candidate's score is in (api/http/shadow.py), with its outcome under
    the policy the live answer was taken under."""
    svc, decision_request = service(request), request.state.decision_request
    audit = decision.audit.to_wire() if decision.audit is not None else None
    if svc.decision_log is not None and audit is not None:   # with a shadow candidate: once it has scored
        log_decision(svc.decision_log, decision_request, decision, wire, audit, svc.policy_for)
    outcome = decision.outcome
    if svc.webhooks is not None and outcome is not None and outcome.overall in svc.settings.webhook_on:
        svc.webhooks.offer(webhook_payload(decision, wire, audit, decision_request.request_id),
                           decision_request.request_id or "")               # a full queue is counted, never waited on
    if svc.review is None:
        return None
    if outcome is not None and outcome.match is not None and svc.policy is None:
        return BackgroundTask(_keep, svc.review, decision_request, wire, audit, None)   # no policy: kept as all are
    if outcome is not None and outcome.overall != "review":     # automatic: to QA review when drawn for it
        policy = svc.policy_for(decision.model)
        qa = qa_sample(policy, outcome, decision_request.request_id) if policy is not None else None
        if qa is None:
            return None
        svc.metrics.observe_qa(qa)
        return BackgroundTask(_keep, svc.review, decision_request, wire, audit,
                              {"queue": "qa", "qa": qa, **wire_outcome(wire)})
    route = {"queue": "policy", "reasons": outcome.review_reasons(), **wire_outcome(wire),
             **({"evidence": decision.evidence} if decision.evidence is not None else {})} if outcome else None
    return BackgroundTask(_keep, svc.review, decision_request, wire, audit, route)


def webhook_payload(decision: Decision, wire: JSONObject, audit: JSONObject | None,
                    request_id: str | None) -> JSONObject:
    """What a webhook receiver gets for one decision."""
    outcome = wire.get("x_outcome")
    payload: JSONObject = {"request_id": request_id,
                           "decided_at": decision.audit.decided_at if decision.audit is not None else None,
                           "outcome": outcome.get("overall") if isinstance(outcome, dict) else None,
                           "model": wire.get("model"), "answers": wire.get("answers"), "x_outcome": outcome}
    if "x_match" in wire:
        payload["x_match"] = wire["x_match"]
    if audit is not None:
        payload["audit"] = audit
    return payload


def wire_outcome(wire: JSONObject) -> JSONObject:
    return {"x_outcome": wire["x_outcome"]} if "x_outcome" in wire else {}


def _keep(review: ReviewQueues, decision_request: DecisionRequest, wire: JSONObject,
          audit: JSONObject | None, route: JSONObject | None = None) -> None:
    """Keep a served decision for review (after its answer was sent); a failure here never reaches the caller."""
    try:
        review.review_dir.keep_decision(decision_request, wire, audit, route)
    except Exception:   # a full disk, a vanished directory: the service goes on, the operator reads why
        log.warning("request %s: could not keep the decision for review", decision_request.request_id, exc_info=True)


async def decide(request: Request, adapt_body: Callable[[Any], Any] | None = None,
                 audit: bool = False) -> tuple[Decision, str]:
    """The decision path of every wire envelope: (the Decision, its Server-Timing header value).

    `adapt_body(body) -> body` runs on the parsed JSON before the wire parser (an envelope's own rules about it);
    `audit`: the decision gets its audit record whatever the body says (a client that needs one).
    """
    svc = service(request)
    arrived = request.state.started_at
    if svc.drain_started is not None and arrived >= svc.drain_started:
        raise NotReady("the server is draining")  # requests that arrived before the signal still finish
    if not svc.engine.ready:
        raise NotReady("the model is still loading")
    check_content_headers(request.headers.get("content-type"), request.headers.get("content-encoding"))
    raw = await _read_capped(request, svc.settings.body_cap_bytes, svc.settings.body_timeout_s)

    t_parse = time.monotonic()
    overlap = _Overlap(svc, arrived) if svc.banks is not None else None
    try:
        decision_request, consulted = await _parsed(svc, request, raw, adapt_body, audit, overlap)
        parse_s = time.monotonic() - t_parse - (consulted.verdict.lookup_ms / 1000 if consulted else 0.0)
        svc.metrics.observe_parse(parse_s)
        request.state.decision_request = decision_request
        if consulted is not None:
            svc.metrics.observe_banks(consulted.verdict)
        decision = await _decided(svc, decision_request, consulted, overlap, arrived)
    finally:
        if overlap is not None:          # whatever happened: a request held at its gate is never left there
            overlap.close(go_on=False)
    policy = svc.policy_for(decision.model)          # the adapter's own, else the server's when it governs it
    decision = shown_evidence(with_outcome(decision, decision_request, policy), decision_request)
    svc.metrics.observe_decision(decision)
    if decision.outcome is not None and policy is not None:
        svc.metrics.observe_outcome(decision.outcome, policy)
    timings = {"parse": parse_s * 1000, **decision.timings_ms, "total": (time.monotonic() - arrived) * 1000}
    entries = [f"{name.removesuffix('_ms')};dur={ms:.2f}" for name, ms in timings.items()]
    # a cache hit skips stages: media (sniff, decode, encode) or the prefix's prefill
    entries += [f'{name}-cache;desc="{outcome}"' for name, outcome in decision.cache.items()]
    return decision, ", ".join(entries)


async def _parsed(svc: ServiceState, request: Request, raw: bytes, adapt_body: Callable[[Any], Any] | None,
                  audit: bool, overlap: _Overlap | None) -> tuple[DecisionRequest, Consulted | None]:
    """The request parsed and, with banks, its media consulted — in the edge thread pool, but for a small plain body,
    parsed on the loop (cheaper than a thread hop) and consulted in the pool after."""
    prepare_args = (svc, raw, dict(request.headers), request.state.request_id, adapt_body, audit, overlap)
    if len(raw) <= INLINE_PARSE_MAX_BYTES and not request.headers.get("content-encoding"):
        decision_request, consulted = _prepare(*prepare_args, consult=False)
        if svc.banks is not None and decision_request.media:   # hashing (a decode, a vPDQ): never on the loop
            consulted = await anyio.to_thread.run_sync(_consulted, svc, decision_request, overlap,
                                                       limiter=svc.parse_limiter)
        return decision_request, consulted
    return await anyio.to_thread.run_sync(_prepare, *prepare_args, limiter=svc.parse_limiter)


async def _decided(svc: ServiceState, decision_request: DecisionRequest, consulted: Consulted | None,
                   overlap: _Overlap | None, arrived: float) -> Decision:
    """The bank's decision when a match decides (no forward pass; media decoded meanwhile are dropped), else the
    engine's, with the match riding along."""
    answered = consulted.answer(decision_request, svc.settings.engine) if consulted is not None else None
    if answered is not None:
        if overlap is not None:
            overlap.close(go_on=False)
        return answered
    started = overlap.close(go_on=True) if overlap is not None else None
    future = started if started is not None else _submitted(svc, decision_request, arrived)
    decision = await _awaited(svc, future, arrived)
    return consulted.joined(decision) if consulted is not None else decision


def _submitted(svc: ServiceState, decision_request: DecisionRequest, arrived: float,
               gate: concurrent.futures.Future[bool] | None = None) -> Any:
    """The engine's future for the request (Overloaded / NotReady at once), given what is left of its deadline."""
    remaining_s = svc.settings.engine.request_timeout_s - (time.monotonic() - arrived)
    if remaining_s <= 0:
        raise DeadlineExceeded("the request outlived its deadline while its body was read")
    return svc.engine.submit(explained(svc, decision_request), deadline_s=remaining_s, gate=gate)


async def _awaited(svc: ServiceState, future: Any, arrived: float) -> Decision:
    """The engine's decision, awaited within what is left of the request's deadline."""
    remaining_s = svc.settings.engine.request_timeout_s - (time.monotonic() - arrived)
    svc.metrics.inflight.inc()
    try:
        wrapped = asyncio.wrap_future(future) if isinstance(future, concurrent.futures.Future) else future
        decision: Decision = await asyncio.wait_for(wrapped, timeout=max(remaining_s, 0.0))
    except asyncio.TimeoutError:
        future.cancel()  # not computed yet -> the batcher skips it; computing -> the result is dropped
        raise DeadlineExceeded(f"no answer within {svc.settings.engine.request_timeout_s:g} s") from None
    finally:
        svc.metrics.inflight.dec()
    return decision


class _Overlap:
    """A request's media decoded for the model while the banks wait on its videos' vPDQ hashes (the slow part of a
    consultation: about a second for a 1080p phone clip), held before the forward pass until the banks have
    answered: a match that decides withdraws it (no forward pass), else it goes on — the wait is the longer of the
    two, not their sum. `waiting_for_videos` (from the consulting thread) asks the event loop to submit it with a
    gate; `close(go_on)` ends the gate and returns the engine's future when it was submitted, else None."""

    def __init__(self, svc: ServiceState, arrived: float):
        self.svc, self.arrived = svc, arrived
        self.loop = asyncio.get_running_loop()
        self.gate: concurrent.futures.Future[bool] = concurrent.futures.Future()
        self.decision_request: DecisionRequest | None = None
        self.started: Any = None                       # the engine's future, or the error its submit raised

    def waiting_for_videos(self, decision_request: DecisionRequest) -> None:
        self.decision_request = decision_request
        self.loop.call_soon_threadsafe(self._start)

    def _start(self) -> None:                          # on the event loop
        if self.gate.done() or self.decision_request is None:
            return                                     # the banks answered first: nothing to start
        try:
            self.started = _submitted(self.svc, self.decision_request, self.arrived, self.gate)
        except Exception as exc:  # noqa: BLE001 (Overloaded, NotReady, a deadline: raised if the model is needed)
            self.started = exc
            return
        self.started.add_done_callback(_retrieved)

    def close(self, go_on: bool) -> Any:
        if not self.gate.done():
            self.gate.set_result(go_on)
        if not go_on:
            return None
        if isinstance(self.started, Exception):       # the model is needed, and its submit was refused
            raise self.started
        return self.started


def _retrieved(future: Any) -> None:
    """A withdrawn request's future is never awaited: its error is read here so no 'never retrieved' is logged."""
    if not future.cancelled():
        future.exception()


def explained(svc: ServiceState, decision_request: DecisionRequest) -> DecisionRequest:
    """The request as the engine is asked it: with evidence (`LOGGED_ASK`) when its caller did not ask for any but
    the decision log or the review queue would keep it, should the policy route the decision to review (a log or a
    review directory, and a policy for the model asked). The caller's own request (`request.state.decision_request`)
    is the one logged and kept."""
    if decision_request.evidence is not None or (svc.decision_log is None and svc.review is None):
        return decision_request
    if svc.policy_for(decision_request.model or svc.settings.engine.served_name) is None:
        return decision_request
    return dataclasses.replace(decision_request, evidence=LOGGED_ASK)


def shown_evidence(decision: Decision, decision_request: DecisionRequest) -> Decision:
    """Evidence the caller did not ask for is never in the response: kept on the decision for the log when its
    outcome is review, else dropped."""
    if decision.evidence is None or decision_request.evidence is not None:
        return decision
    review = decision.outcome is not None and decision.outcome.overall == "review"
    return dataclasses.replace(decision, evidence=decision.evidence if review else None, evidence_shown=False)


async def _read_capped(request: Request, cap_bytes: int, timeout_s: float) -> bytes:
    """The whole body, or BodyTooLarge past the cap, BodyTimeout when it has not all arrived within `timeout_s`
    (a client that announces 500 bytes and sends 2 gets its 408 and frees the connection), and ClientDisconnect when
    the client hangs up mid-upload."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap_bytes:
        raise BodyTooLarge(f"body of {declared} bytes is over the {cap_bytes}-byte limit")
    body = bytearray()
    try:
        with anyio.fail_after(timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > cap_bytes:
                    raise BodyTooLarge(f"body is over the {cap_bytes}-byte limit")
    except TimeoutError:
        raise BodyTimeout(f"the request body did not arrive within {timeout_s:g} s ({len(body)} bytes received); "
                          "send it in one go or raise --body-timeout-s") from None
    return bytes(body)


def _prepare(svc: ServiceState, raw: bytes, headers: dict[str, str], request_id: str,
             adapt_body: Callable[[Any], Any] | None, audit: bool, overlap: _Overlap | None, consult: bool = True
             ) -> tuple[DecisionRequest, Consulted | None]:
    """Runs in the edge thread pool: CPU work (inflate, JSON, multipart, base64, the media's hashes) stays off the
    event loop. With banks in force, media sent and `consult`: the banks consulted and what they found (a small body
    parsed on the loop is consulted in the pool after, by `_consulted`)."""
    data = decompress(raw, headers.get("content-encoding"), svc.settings.body_cap_bytes)
    wire = read_body(data, headers.get("content-type"), svc.settings.max_multipart_parts)
    body = wire.body if adapt_body is None else adapt_body(wire.body)
    decision_request = parse_request(body, svc.settings.engine, wire.parts, adapters=adapter_names(svc.engine, svc.settings.engine))
    decision_request = dataclasses.replace(decision_request, request_id=request_id,
                                           audit=decision_request.audit or audit)
    if not consult or svc.banks is None or not decision_request.media:
        return decision_request, None
    return decision_request, _consulted(svc, decision_request, overlap)


def _consulted(svc: ServiceState, decision_request: DecisionRequest, overlap: _Overlap | None) -> Consulted | None:
    """The banks in force and what they found for the request's media (a photo's decode and PDQ hash, a video's wait
    for its vPDQ worker: the edge thread pool's work, never the event loop's); once it waits on the videos alone,
    `overlap` starts the model's decoding."""
    from omni.banks.gate import consult

    waiting = (lambda: overlap.waiting_for_videos(decision_request)) if overlap is not None else None
    return consult(svc.banks, decision_request, svc.settings.engine.media, waiting)


@router.get("/v1/models", dependencies=[Depends(require_api_key)], response_model=schemas.ModelList,
            tags=["models"], responses={401: schemas.ERROR_RESPONSES[401]})
async def models(request: Request) -> dict:
    """The base model (with its aliases in `data`) and every adapter served beside it (api/http/adapters.py)."""
    svc = service(request)
    info = svc.engine.info
    name = info["name"]
    aliases = [a for a in svc.settings.engine.model_aliases if a != name]
    card = {"name": name, "description": info["description"], "release_date": info["release_date"],
            "context": int(info["context_tokens"]), "aliases": aliases, "tiny_default": bool(info["tiny_default"]),
            "limits": info["limits"], "base": None, "mode": "base", "resident": True}
    adapters = model_cards(svc.engine, svc.settings.engine, card)
    data = [{"id": n, "base": None, "mode": "base", "release_date": card["release_date"], "resident": True}
            for n in [name, *aliases]]
    data += [{"id": a["name"], **{k: a[k] for k in ("base", "mode", "release_date", "resident")}} for a in adapters]
    return {"models": [card, *adapters], "object": "list", "data": data}


@router.get("/v1/whoami", response_model=schemas.WhoAmI, tags=["identity"],
            summary="who the server takes the caller for: name, role, where the name came from, whether keys are on",
            responses={401: schemas.ERROR_RESPONSES[401], 422: schemas.ERROR_RESPONSES[422]})
async def whoami(request: Request, _: None = Depends(require_api_key)) -> dict:
    caller = caller_of(request)
    return {"name": caller.name, "role": caller.role, "named_by": caller.named_by,
            "keys": bool(service(request).keyring())}


@router.get("/health", response_model=schemas.Status, tags=["probes"], summary="liveness")
async def health(request: Request) -> JSONResponse:
    svc = service(request)
    if svc.load_error:
        return JSONResponse({"status": "failed", "message": svc.load_error}, status_code=503)
    return JSONResponse({"status": "ok"})


@router.get("/ready", response_model=schemas.Status, tags=["probes"], summary="model loaded and warmed up",
            responses={503: {"model": schemas.Status}})
async def ready(request: Request) -> JSONResponse:
    svc = service(request)
    draining = svc.drain_started is not None
    decision_log = svc.decision_log
    if decision_log is not None and not decision_log.healthy:   # decisions would not be kept: take no traffic
        problem = decision_log.stats().last_error or "its writer is not running"
        return JSONResponse({"status": "failed", "message": f"the decision log cannot be written: {problem}"},
                            status_code=503, headers={"Retry-After": "5"})
    lost = svc.webhooks.dead_letter_problem() if svc.webhooks is not None else None
    if lost is not None:                # undeliverable decisions could not be kept either: the same loss
        return JSONResponse({"status": "failed", "message": f"the webhook dead-letter file cannot be written: {lost}"},
                            status_code=503, headers={"Retry-After": "5"})
    if svc.engine.ready and not draining:
        return JSONResponse({"status": "ready"})
    status = "failed" if svc.load_error else "draining" if draining else "loading"
    return JSONResponse({"status": status, "message": svc.load_error}, status_code=503,
                        headers={"Retry-After": "5"})


@router.get("/metrics", dependencies=[Depends(require_key_for_metrics)], tags=["probes"], summary="Prometheus metrics",
            response_class=Response, responses={401: schemas.ERROR_RESPONSES[401]})
async def metrics(request: Request) -> Response:
    body, content_type = service(request).metrics.render()
    return Response(body, media_type=content_type)


@router.get("/openapi.json", dependencies=[Depends(require_key_for_docs)], include_in_schema=False)
async def openapi_document(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@router.get("/docs", dependencies=[Depends(require_key_for_docs)], include_in_schema=False)
async def docs(request: Request) -> Response:
    from fastapi.openapi.docs import get_swagger_ui_html

    return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{request.app.title} — API")
