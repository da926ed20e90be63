"""The drain gate: once the server drains (SIGTERM), every new request is refused with 503 (`Draining`: Retry-After,
Connection: close) while the ones that arrived before finish; the probes and the metrics (`/health`, `/ready`,
`/metrics`) still answer, and `/ready` says draining.

Pure ASGI middleware, inside the request-context middleware (which turns the refusal into the error shape). It runs
before routing, so it names the error envelope of the paths that have their own (`envelopes`: a route's path regex
-> envelope, as the route would have set it).
Knows nothing of uvicorn, the service's state (it asks `draining()`), the routes' work, the model or the environment.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from starlette.types import ASGIApp, Receive, Scope, Send

from api.http.errors import Draining

OPEN_WHILE_DRAINING = frozenset({"/health", "/ready", "/metrics"})


class DrainGate:
    def __init__(self, app: ASGIApp, draining: Callable[[], bool],
                 envelopes: Mapping[re.Pattern[str], str] | None = None) -> None:
        self.app = app
        self.draining = draining
        self.envelopes = dict(envelopes or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path not in OPEN_WHILE_DRAINING and self.draining():
            envelope = next((name for pattern, name in self.envelopes.items() if pattern.match(path)), None)
            if envelope is not None:
                scope.setdefault("state", {})["envelope"] = envelope
            raise Draining("the server is draining: send the request again to another replica or after it restarts")
        await self.app(scope, receive, send)
