"""A policy file rewritten nested thousands deep, reloaded on a running server (the real app and engine, the
FakeModel behind them): the admin route answers 422 policy_error naming the nesting limit, SIGHUP's handler logs the
documented line, and the policy in force stays in both cases."""
from __future__ import annotations

import logging
import signal
from pathlib import Path

import pytest

from omni.contract.toml_text import MAX_TOML_DEPTH
from tests.unit.http.serving import body, served

POLICY = 'version = "v1"\n[questions.ok]\nauto_at = 0.5\nact_on = [true]\n'
DEEP = 'version = "v2"\n[questions.ok]\nauto_at = 0.5\nact_on = ' + "[" * 5000 + "\n"


@pytest.fixture
def policy_file(tmp_path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY, encoding="utf-8")
    return path


def test_the_reload_route_answers_422_naming_the_nesting_limit(policy_file):
    with served(policy=str(policy_file)) as (client, _engine):
        policy_file.write_text(DEEP, encoding="utf-8")
        refused = client.post("/v1/admin/policy/reload")
        assert refused.status_code == 422, refused.text
        detail = refused.json()["detail"]
        assert detail["error_type"] == "policy_error"
        assert f"nested more than {MAX_TOML_DEPTH} levels" in detail["message"]
        assert len(detail["message"]) < 400
        assert client.get("/v1/admin/policy").json()["version"] == "v1"
        assert client.post("/v1/systemone", json=body()).json()["x_outcome"]["policy"]["version"] == "v1"


def test_sighup_logs_the_refusal_and_keeps_the_policy(policy_file, caplog):
    from api.cli.serve import _reload_on_sighup

    with served(policy=str(policy_file)) as (client, _engine):
        previous = signal.getsignal(signal.SIGHUP)
        try:
            _reload_on_sighup(client.app.state.service)
            policy_file.write_text(DEEP, encoding="utf-8")
            with caplog.at_level(logging.ERROR, logger="omni.serve"):
                signal.raise_signal(signal.SIGHUP)
        finally:
            signal.signal(signal.SIGHUP, previous)
        assert client.post("/v1/systemone", json=body()).json()["x_outcome"]["policy"]["version"] == "v1"
    [record] = [r for r in caplog.records if r.name == "omni.serve"]
    assert record.getMessage().startswith("SIGHUP: the policy was not reloaded, the one in force stays: ")
    assert f"nested more than {MAX_TOML_DEPTH} levels" in record.getMessage()
