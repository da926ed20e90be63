"""The decision log behind `omni serve` (the real app and engine, the FakeModel behind them): every decision is
appended with its request (media by hash), the response sent and its audit record, whether or not the caller asked
for `x_audit`; /metrics counts what was written and dropped; a log that cannot be created stops the app from being
built; one that stops being writable makes /ready say so."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from api.http.app import create_app
from omni.serve.decision_log import DecisionLog
from omni.serve.decision_log_files import DecisionLogError, read_records
from tests.unit.fake_model import media
from tests.unit.http.serving import body, served, settings_with


def test_every_decision_is_logged_with_its_audit_record_and_media_by_hash(tmp_path):
    log_dir = tmp_path / "log"
    photo = media("image")
    with served(decision_log=str(log_dir)) as (client, _engine):
        plain = client.post("/v1/systemone", json=body(), headers={"x-request-id": "log-1"})
        upload = client.post("/v1/systemone", data={"request": json.dumps(body(state="photo"))},
                             files={"images": ("unit.png", photo, "image/png")}, headers={"x-request-id": "log-2"})
        cloudflare = client.post("/accounts/a/ai/run/@cf/cloudflare/clef-omni", json=body(state="cf", model="clef-omni"),
                                 headers={"x-request-id": "log-3"})
        assert plain.status_code == upload.status_code == cloudflare.status_code == 200
        assert "x_audit" not in plain.json()                 # logged, not shown: the caller did not ask
        metrics = client.get("/metrics").text
    records = {r.record["request_id"]: r for r in read_records(log_dir)}      # the app closed the log: all written
    assert set(records) == {"log-1", "log-2", "log-3"}
    first = records["log-1"].record
    assert first["response"] == plain.json() and first["audit"]["request_id"] == "log-1"
    assert first["decided_at"] == first["audit"]["decided_at"]
    [entry] = records["log-2"].request["images"]
    digest = hashlib.sha256(photo).hexdigest()
    assert entry.startswith(f"media/{digest}.") and (log_dir / entry).read_bytes() == photo
    assert records["log-2"].audit["media"][0]["sha256"] == digest
    assert 'omni_decision_log_records_total{outcome="written"}' in metrics


def test_a_log_that_cannot_be_created_is_an_error_before_serving(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(DecisionLogError, match="cannot be created"):
        create_app(settings_with(decision_log=str(blocker / "log")))


def test_ready_fails_while_the_log_cannot_be_written(tmp_path):
    full = {"disk": False}                        # filled up after the log was opened

    def write(fd: int, data: bytes) -> int:
        if full["disk"]:
            raise OSError(28, "No space left on device")
        return os.write(fd, data)

    with served(decision_log=str(tmp_path / "log")) as (client, _engine):
        app_log = client.app.state.service.decision_log
        failing = DecisionLog(tmp_path / "failing", write=write).open()
        full["disk"] = True
        client.app.state.service.decision_log = failing
        try:
            assert client.post("/v1/systemone", json=body()).status_code == 200      # the answer is still given
            failing.flush(10)
            ready = client.get("/ready")
            assert ready.status_code == 503 and "decision log" in ready.json()["message"]
            assert "full" in ready.json()["message"] and failing.stats().dropped == 1
        finally:
            client.app.state.service.decision_log = app_log
            failing.close()
    assert Path(tmp_path / "log").is_dir()
