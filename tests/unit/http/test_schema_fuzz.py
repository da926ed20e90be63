"""Schemathesis over the app's own OpenAPI schema, in-process (the real app and engine, a FakeModel behind them):
for bodies that follow the schema and bodies that break it, every route answers without a 5xx and in its documented
shape (the response schema of its status). Bounded in examples so CI stays fast."""
from __future__ import annotations

import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from api.http.app import create_app
from omni.serve.engine import DecisionEngine
from tests.unit.fake_model import FakeModel
from tests.unit.http.serving import settings_with

POLICY = Path(tempfile.mkdtemp(prefix="omni-fuzz-policy-")) / "policy.toml"
POLICY.write_text('version = "fuzz"\n[default]\nauto_at = 0.5\n[questions.q]\nauto_at = 0.9\nact_on = [true]\n')
SETTINGS = settings_with(max_wait_ms=0, review_dir=tempfile.mkdtemp(prefix="omni-fuzz-review-"), policy=str(POLICY))
ENGINE = DecisionEngine(SETTINGS.engine, FakeModel(SETTINGS.engine)).start()   # ready before any request
APP = create_app(SETTINGS, ENGINE)


async def served_without_lifespan(scope, receive, send):
    """The app as a long-running server: Schemathesis' client would start and stop (drain) it around every call."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await APP(scope, receive, send)


schema = schemathesis.openapi.from_asgi("/openapi.json", served_without_lifespan)


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_5xx_and_every_answer_in_its_documented_shape(case):
    response = case.call()
    case.validate_response(response, checks=[not_a_server_error, status_code_conformance,
                                             response_schema_conformance])
    assert "x-request-id" in response.headers
