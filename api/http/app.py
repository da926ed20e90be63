"""`create_app(settings, engine=None)`: the FastAPI application around one DecisionEngine.

Wires the routes, the error table, a request-context middleware (request id and nosniff on every response, access
metrics, the 500 fallback) and the lifespan: the engine loads in a background thread so /health answers at once and
/ready turns 200 when the model is warm; shutdown drains the engine. No module-level app, engine or settings.
Knows nothing of argv, uvicorn or the environment (see api/http/settings.py and api/cli/serve.py).
"""
from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.http import schemas
from api.http.adapters import router as adapters_router
from api.http.admin import router as admin_router
from api.http.appeals import router as appeals_router
from api.http.cloudflare import router as cloudflare_router
from api.http.dependencies import ServiceState
from api.http.drain import DrainGate
from api.http.errors import error_payload, handled_classes
from api.http.guidelines import Guidelines
from api.http.metrics import Metrics
from api.http.review import report_dirs
from api.http.review import router as review_router
from api.http.routes import router
from api.http.settings import Settings
from api.http.settings_lists import bank_pdq_thresholds
from api.http.ui import router as ui_router
from omni.contract.avrik import AVRIK_CLIENT_AGENT
from omni.serve.surface import ServingEngine
from preprocess.media import MiB

if TYPE_CHECKING:
    from api.http.webhooks import WebhookSender
    from omni.banks.shelf import BankShelf
    from omni.contract.policy import PolicySource
    from omni.review.queues import ReviewQueues
    from omni.serve.decision_log import DecisionLog

log = logging.getLogger("omni.api")
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
NOSNIFF = (b"x-content-type-options", b"nosniff")
VERSION = "0.1.0"


def create_app(settings: Settings, engine: ServingEngine | None = None, *,  # noqa: C901 (the wiring of every optional part, each one `if`; splitting it would scatter the one place that shows them all)
               on_load_failure: Callable[[BaseException], None] | None = None,
               on_loaded: Callable[[], None] | None = None, request_id_header: bool = True) -> FastAPI:
    """The app. `engine` defaults to `omni.serve.engine.DecisionEngine(settings.engine)`; it is started (in a thread)
    at startup unless already ready, and stopped with drain at shutdown. `on_load_failure` lets the server exit;
    `on_loaded` runs in the loading thread once the engine is ready, before /ready says so. `request_id_header`
    False: a proxy in front already answers `x-request-id` with the id it put in the request (Ray Serve's)."""
    if engine is None:
        from omni.serve.engine import DecisionEngine  # lazily: importing api.http.app never loads torch by itself
        engine = DecisionEngine(settings.engine)
    policy = _policy(settings)                      # PolicyError (naming key and line) before anything starts
    banks = _banks(settings)                        # BankError (naming file, line and field) likewise
    webhooks = _webhooks(settings)                  # WebhookError when the receiver cannot be reached
    svc = ServiceState(settings=settings, engine=engine, metrics=Metrics(), review=_review(settings, policy),
                       reports=report_dirs(settings.review_reports), decision_log=_decision_log(settings),
                       policy=policy, webhooks=webhooks, banks=banks)
    svc.guidelines = Guidelines.load(settings, svc.review)   # SettingsError when a QUEUE= names no queue
    if svc.decision_log is not None and settings.review_dir is not None:   # appeals: of logged decisions, kept beside
        from omni.review.appeals import AppealBook  # the reviewers' work

        svc.appeals = AppealBook(settings.review_dir)
    if svc.decision_log is not None:
        svc.metrics.watch_decision_log(svc.decision_log)
    if policy is not None:
        svc.metrics.set_policy(policy.current)
    if webhooks is not None:
        svc.metrics.watch_webhooks(webhooks)
    if banks is not None:
        svc.metrics.set_banks(banks.described())
        svc.metrics.watch_video_hasher(banks.video_hasher.stats)
    if svc.review is not None and policy is not None:      # the QA estimate, from the labelled QA samples
        svc.metrics.watch_qa(_qa_estimate(svc))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        svc.parse_limiter = anyio.CapacityLimiter(settings.parse_threads)
        svc.drain_started = None           # serving (again: an app drained and started anew takes requests)
        if webhooks is not None:
            webhooks.start()
        if not engine.ready:
            threading.Thread(target=_load, args=(svc, on_load_failure, on_loaded), name="engine-load",
                             daemon=True).start()
        else:
            _announce(svc)
        yield
        svc.begin_drain()
        await anyio.to_thread.run_sync(lambda: engine.stop(drain=True))
        log.info("engine stopped")
        if webhooks is not None:             # what the drained requests queued is delivered or dead-lettered
            await anyio.to_thread.run_sync(webhooks.stop)
            log.info("webhooks stopped: %s", webhooks.stats())
        decision_log = svc.decision_log
        if decision_log is not None:         # what the drained requests queued is written before the exit
            stats = await anyio.to_thread.run_sync(lambda: decision_log.close(drain=True))
            log.info("decision log closed: %d written, %d dropped", stats.written, stats.dropped)
        if banks is not None:                # the vPDQ hashing workers, if any started
            await anyio.to_thread.run_sync(banks.close)

    app = FastAPI(title="omni-decide", version=VERSION, lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None,   # served by routes.py, behind the API keys unless --public-docs
                  description="Self-hosted multimodal decisions: TypeSafe System One API, Clef-omni media.")
    app.state.service = svc
    app.include_router(router)
    app.include_router(cloudflare_router)
    app.include_router(review_router)
    app.include_router(admin_router)
    app.include_router(appeals_router)
    app.include_router(adapters_router)
    if settings.ui:
        app.include_router(ui_router)
    for cls in handled_classes():
        app.add_exception_handler(cls, _handle)
    app.add_middleware(DrainGate, draining=lambda: svc.drain_started is not None,     # its 503: RequestContext shapes it
                       envelopes={route.path_regex: "cloudflare" for route in cloudflare_router.routes
                                  if isinstance(route, Route)})
    app.add_middleware(RequestContext, metrics=svc.metrics, request_id_header=request_id_header)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]  # FastAPI's documented way to extend it
    return app


def _review(settings: Settings, policy: PolicySource | None = None) -> ReviewQueues | None:
    """The review queues with --review-dir (its labels and kept decisions, plus the batch outputs named; under a
    policy, the decisions it sent to review), else None."""
    if settings.review_dir is None:
        return None
    from omni.review.directory import ReviewDir
    from omni.review.queues import ReviewQueues
    from omni.review.wellness import Wellness

    wellness = (Wellness(settings.review_shield, settings.review_daily_limit, settings.review_dir)
                if settings.review_shield or settings.review_daily_limit else None)
    return ReviewQueues(ReviewDir(settings.review_dir, k=settings.review_k), list(settings.review_batches),
                        settings.engine, policy=(lambda: policy.current) if policy is not None else None,
                        max_comment_chars=settings.review_max_comment_chars, wellness=wellness)


def _qa_estimate(svc: ServiceState) -> Callable[[], dict[str, dict]]:
    """The running QA estimate per question, under the policy in force's targets (computed at scrape time)."""
    from omni.contract.qa import qa_target
    from omni.governance.qa import qa_report

    def estimate() -> dict[str, dict]:
        policy = svc.current_policy()
        if svc.review is None or policy is None:
            return {}
        return qa_report(svc.review.review_dir.kept_with_labels(), lambda qid: qa_target(policy, qid))["questions"]

    return estimate


def _banks(settings: Settings) -> BankShelf | None:
    """The hash banks with --bank, read and indexed (BankError naming the file, line and field), else None."""
    if not settings.bank:
        return None
    from omni.banks.opening import open_banks

    return open_banks(settings.bank, bank_pdq_thresholds(settings.bank_pdq_threshold), settings.bank_vpdq_workers,
                      settings.bank_vpdq_timeout_s)


def _policy(settings: Settings) -> PolicySource | None:
    """The policy with --policy, read and checked (PolicyError naming the key and its line), else None."""
    if settings.policy is None:
        return None
    from omni.contract.policy import PolicySource

    source = PolicySource(settings.policy)
    log.info("policy %r (sha256 %s) from %s", source.current.version, source.current.sha256, settings.policy)
    return source


def _webhooks(settings: Settings) -> WebhookSender | None:
    """The webhook sender with --webhook (its receiver checked first unless --webhook-check false), else None."""
    if settings.webhook is None or settings.webhook_secret is None:
        return None
    from pathlib import Path

    from api.http.webhooks import WebhookConfig, WebhookError, WebhookSender, check_reachable

    if settings.webhook_check:
        check_reachable(settings.webhook, timeout_s=min(5.0, settings.webhook_timeout_s))
    cache = Path(settings.engine.cache_dir) if settings.engine.cache_dir else Path.home() / ".cache" / "omni-decide"
    dead_letter = Path(settings.webhook_dead_letter) if settings.webhook_dead_letter else \
        cache / "webhooks" / "dead-letter.jsonl"
    if not settings.webhook_dead_letter:
        dead_letter.parent.mkdir(parents=True, exist_ok=True)
    try:                                             # a dead-letter file that cannot be written stops the start
        with open(dead_letter, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise WebhookError(f"--webhook-dead-letter {str(dead_letter)!r}: cannot be written ({exc.strerror})") from None
    config = WebhookConfig(url=settings.webhook, secret=settings.webhook_secret, dead_letter_path=dead_letter,
                           on=frozenset(settings.webhook_on), max_tries=settings.webhook_tries,
                           timeout_s=settings.webhook_timeout_s, queue_size=settings.webhook_queue,
                           drain_timeout_s=min(settings.drain_s, 30.0))
    log.info("webhooks to %s for %s decisions; undeliverable ones go to %s", settings.webhook,
             "/".join(settings.webhook_on), dead_letter)
    return WebhookSender(config)


def _decision_log(settings: Settings) -> DecisionLog | None:
    """The decision log with --decision-log, opened (DecisionLogError at once when it cannot be written), else None."""
    if settings.decision_log is None:
        return None
    from omni.serve.decision_log import DecisionLog

    return DecisionLog(settings.decision_log, media=settings.decision_log_media,
                       segment_bytes=int(settings.decision_log_segment_mb * MiB),
                       retain_days=settings.retain_days).open()


def _load(svc: ServiceState, on_failure: Callable[[BaseException], None] | None,
          on_loaded: Callable[[], None] | None = None) -> None:
    try:
        svc.engine.load()
        if on_loaded is not None:
            on_loaded()
        svc.engine.start()
    except Exception as exc:  # a missing or broken checkpoint: say so, fail /ready and /health, let the server exit
        svc.load_error = f"model failed to load: {type(exc).__name__}: {exc}"
        log.exception("model failed to load")
        if on_failure is not None:
            on_failure(exc)
        return
    _announce(svc)


def _announce(svc: ServiceState) -> None:
    info = svc.engine.info
    svc.metrics.set_model(info["name"], bool(info.get("tiny_default")))
    svc.metrics.watch_engine(svc.engine)
    registry = svc.engine.adapters
    if registry is not None:
        svc.metrics.watch_adapters(registry.stats, svc.engine.shadow_stats)
        log.info("adapters served: %s", ", ".join(registry.names()) or "none yet")
    tiny = " — the embedded TINY DEMO model (synthetic inspection task only, not real answers; use --model DIR|HUB_ID)" if info.get("tiny_default") else ""
    log.info("ready: model %r, context %s tokens%s", info["name"], info.get("context_tokens"), tiny)


async def _handle(request: Request, exc: Exception) -> JSONResponse:
    status, body, headers = error_payload(exc, _request_id(request.scope), _envelope(request.scope))
    return JSONResponse(body, status_code=status, headers=headers)


def _request_id(scope: Scope) -> str:
    return scope.setdefault("state", {}).get("request_id") or "unknown"


def _envelope(scope: Scope) -> str:
    """The error body shape the route asked for (`api.http.cloudflare` sets "cloudflare"), else avrik's for its
    client (by User-Agent), else System One's."""
    chosen = scope.setdefault("state", {}).get("envelope")
    if chosen:
        return chosen
    agent = next((value for name, value in scope.get("headers") or () if name == b"user-agent"), b"")
    return "avrik" if agent.decode("latin-1").startswith(AVRIK_CLIENT_AGENT) else "systemone"


class RequestContext:
    """Pure ASGI middleware: request id (the caller's `x-request-id` if sane, else a new one) and
    `X-Content-Type-Options: nosniff` on every response, access metrics by route template, and a 500 with the request
    id (no internals) for anything unhandled."""

    def __init__(self, app: ASGIApp, metrics: Metrics, request_id_header: bool = True):
        self.app = app
        self.metrics = metrics
        self.id_headers = ((b"x-request-id", b"x-typesafe-request-id") if request_id_header
                           else (b"x-typesafe-request-id",))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        supplied = dict(scope.get("headers") or ()).get(b"x-request-id", b"").decode("latin-1")
        request_id = supplied if _CLIENT_ID.match(supplied) else uuid.uuid4().hex
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        state["started_at"] = time.monotonic()
        status = {"code": 500, "started": False}

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"], status["started"] = message["status"], True
                ids = request_id.encode("latin-1")
                headers = [*message.get("headers", []), *((name, ids) for name in self.id_headers)]
                if not any(name.lower() == NOSNIFF[0] for name, _ in headers):
                    headers.append(NOSNIFF)      # a browser takes every body as the type it is sent as, never guesses
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            if status["started"]:
                log.exception("request %s failed after the response started", request_id)
                raise
            code, body, headers = error_payload(exc, request_id, _envelope(scope))
            await JSONResponse(body, status_code=code, headers=headers)(scope, receive, send_with_id)
        finally:
            route = scope.get("route")
            self.metrics.observe_request(route.path if isinstance(route, Route) else "unmatched", status["code"],
                                         time.monotonic() - state["started_at"])


def _openapi(app: FastAPI) -> dict:
    """Default schema plus the wire models the decision route documents but does not validate with."""
    if app.openapi_schema:
        return app.openapi_schema
    spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = spec.setdefault("components", {}).setdefault("schemas", {})
    for model in (schemas.SystemOneRequest, schemas.MultipartRequest):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
    app.openapi_schema = spec
    return spec
