"""The line's own small HTTP server: `/metrics` (Prometheus), `/health` and `/status` (JSON for `omni line --status`).

`status_app(runner)` is a FastAPI app over the runner's `LineStats` and its sources' and sinks' own figures;
`serve_status(app, host, port)` runs it with uvicorn on the line's event loop, leaving the process's signals to the
line. `/health` is 200 while the line takes units, with `"status": "degraded"` and the parts that are down when a
source or sink reports `connected` 0; 503 once it stops.
Knows nothing of transports, the engine or the ledger's format.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from api.line.runner import LineRunner
from api.line.stats import render


def down_parts(runner: LineRunner) -> list[str]:
    parts: list[Any] = [*runner.sources, *runner.sinks]
    return [part.name for part in parts if part.stats().get("connected", 1) == 0]


def status_app(runner: LineRunner) -> FastAPI:
    app = FastAPI(title=f"omni line {runner.line}", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(render(runner.stats, runner.sources, runner.sinks), media_type=CONTENT_TYPE_LATEST)

    @app.get("/health")
    def health() -> JSONResponse:
        down = down_parts(runner)
        status = "stopped" if not runner.running else "degraded" if down else "ok"
        return JSONResponse({"status": status, "line": runner.line, "down": down},
                            status_code=200 if runner.running else 503)

    @app.get("/status")
    def status() -> JSONResponse:
        snapshot = runner.stats.snapshot(runner.sources, runner.sinks)
        return JSONResponse({**snapshot, "running": runner.running, "down": down_parts(runner),
                             "ledger_decided": runner.ledger.decided_count(),
                             "ledger_results_held": runner.ledger.results_held()})

    return app


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:     # the line handles SIGTERM / SIGINT itself
        yield


def status_server(app: FastAPI, host: str, port: int) -> uvicorn.Server:
    """A uvicorn server for the app; `await server.serve()` on the line's loop, `server.should_exit = True` ends it."""
    return _Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off"))
