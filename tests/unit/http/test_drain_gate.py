"""Once the server drains, every new request is a 503 in its route's error shape with Retry-After and
Connection: close, while the probes and /metrics still answer (the real app and engine, the FakeModel behind them;
the real `omni serve` between SIGTERM and its exit: tests/integration/cli/test_serve_drain.py)."""
from __future__ import annotations

import pytest

from tests.unit.http.serving import body, served


@pytest.mark.parametrize(("method", "path", "payload"), [
    ("POST", "/v1/systemone", body()),
    ("GET", "/v1/models", None),
    ("GET", "/v1/whoami", None),
    ("GET", "/v2/nothing", None),
])
def test_a_new_request_while_draining_is_503_and_closes_its_connection(method, path, payload):
    with served() as (client, _):
        client.app.state.service.begin_drain()
        refused = client.request(method, path, json=payload)
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "5"
    assert refused.headers["connection"] == "close"
    assert refused.json()["detail"]["error_type"] == "not_ready"
    assert "draining" in refused.json()["detail"]["message"]
    assert refused.json()["request_id"] == refused.headers["x-request-id"]


def test_the_cloudflare_route_refuses_in_its_envelope():
    with served() as (client, _):
        client.app.state.service.begin_drain()
        refused = client.post("/accounts/a/ai/run/@cf/cloudflare/clef-omni", json=body(model="clef-omni"))
    assert refused.status_code == 503
    assert refused.json()["success"] is False
    assert refused.json()["errors"][0]["code"] == 3040


def test_probes_and_metrics_still_answer_while_draining():
    with served() as (client, _):
        client.app.state.service.begin_drain()
        health, ready, metrics = client.get("/health"), client.get("/ready"), client.get("/metrics")
    assert health.status_code == 200
    assert ready.status_code == 503
    assert ready.json()["status"] == "draining"
    assert metrics.status_code == 200
