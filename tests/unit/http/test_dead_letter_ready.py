"""A webhook dead-letter file that stops being writable is the same loss as a decision log that does: /ready turns
503 naming it while letters cannot be kept (the real app and engine, the FakeModel behind them, /dev/full as the
file), the letters wait in memory and are written once the file takes them again (a real 64 KiB tmpfs, filled and
then freed), exactly once each and whole."""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from api.http.webhooks import WebhookConfig, WebhookSender
from tests.unit.http.serving import body, served

SECRET = "s3cret-webhook-key-0123"
POLICY = 'version = "v1"\n[questions.ok]\nauto_at = 0.5\nact_on = [true]\n'     # ok is true at 0.5: act


def refused_url() -> str:
    """A loopback URL nothing listens on: every attempt is a refused connection."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/hook"


def wait_until(condition, guard_s: float = 30.0) -> None:
    give_up = time.monotonic() + guard_s      # a guard against a hang, not a timing assertion
    while not condition():
        assert time.monotonic() < give_up, "condition never held"
        time.sleep(0.01)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a file every write to fails: ENOSPC)")
def test_ready_is_503_while_the_dead_letter_file_cannot_be_written(tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    with served(policy=str(policy), webhook=refused_url(), webhook_check=False, webhook_secret=SECRET,
                webhook_tries=1, webhook_dead_letter="/dev/full") as (client, _engine):
        assert client.get("/ready").status_code == 200
        decided = client.post("/v1/systemone", json=body())
        assert decided.json()["x_outcome"]["overall"] == "act"
        sender = client.app.state.service.webhooks
        wait_until(lambda: sender.stats()["dead_letter_errors"] == 1)
        ready = client.get("/ready")
        assert ready.status_code == 503
        assert ready.json()["status"] == "failed"
        assert ready.json()["message"].startswith("the webhook dead-letter file cannot be written: /dev/full is full")
        assert ready.headers["retry-after"] == "5"


def test_unwritten_letters_wait_and_are_written_once_the_file_takes_them(tmp_path, tiny_filesystem):
    folder = tiny_filesystem("size=64k")
    filler = folder / "filler"
    config = WebhookConfig(url=refused_url(), secret=SECRET, dead_letter_path=folder / "dead.jsonl", max_tries=1,
                           timeout_s=1.0, drain_timeout_s=5.0, dead_letter_retry_s=0.05)
    sender = WebhookSender(config)
    sender.start()
    try:
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass                                # the filesystem is full
        finally:
            os.close(fd)
        assert sender.dead_letter_problem() is None
        payloads = [{"request_id": f"req-{i}", "outcome": "act", "pad": "p" * 3000} for i in range(3)]
        for payload in payloads:
            assert sender.offer(payload, payload["request_id"])
        wait_until(lambda: sender.stats()["dead_letter_errors"] == 3)
        assert "is full" in (sender.dead_letter_problem() or "")
        filler.unlink()                         # room again: the letters kept in memory are written
        wait_until(lambda: sender.dead_letter_problem() is None)
        stats = sender.stats()
    finally:
        sender.stop()
    assert stats["dead_lettered"] == 3
    letters = [json.loads(line) for line in Path(config.dead_letter_path).read_text().splitlines()]
    assert sorted(letter["request_id"] for letter in letters) == ["req-0", "req-1", "req-2"]
    assert all(letter["payload"]["pad"] == "p" * 3000 for letter in letters)
