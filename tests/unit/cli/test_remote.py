"""api.cli.remote: backlog lines posted to a server (httpx MockTransport) — the body the server's own transport reads
back, 429/503 retried after the server's wait, other errors kept as the server said them, a refused key or an
unreachable server stops the run."""
from __future__ import annotations

import json

import httpx
import pytest

from api.cli.remote import RemoteBackend, retry_after_s
from api.http.transport import read_body
from omni.serve.backlog import BackendUnavailable, LineFailed
from tests.unit.fake_model import media

ANSWER = {"model": "clef-omni", "answers": {"ok": {"type": "noul", "noul": 0.5}}, "usage": {"input_tokens": 3,
                                                                                              "output_tokens": 0}}
LINE = {"state": "s", "questions": {"ok": {"type": "noul", "instructions": "Fine?"}}, "labels": {"ok": True}}


def backend(handler, tmp_path, **kwargs) -> tuple[RemoteBackend, list[float]]:
    waits: list[float] = []
    remote = RemoteBackend("http://omni.test", tmp_path, transport=httpx.MockTransport(handler), sleep=waits.append,
                           **kwargs)
    return remote, waits


def test_a_line_with_media_files_goes_as_multipart_that_the_servers_transport_reads_back(tmp_path):
    (tmp_path / "media").mkdir()
    (tmp_path / "media" / "a.png").write_bytes(media("image"))
    (tmp_path / "media" / "hum.wav").write_bytes(media("audio"))
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=ANSWER)

    remote, _ = backend(handler, tmp_path, api_key="k1")
    text = json.dumps({**LINE, "images": ["media/a.png"], "audio": ["media/hum.wav"]}).encode()
    assert remote.answer(text, "rid-1") == ANSWER
    request = seen[0]
    assert request.headers["authorization"] == "Bearer k1" and request.headers["x-request-id"] == "rid-1"
    wire = read_body(request.read(), request.headers["content-type"], max_parts=64)
    assert wire.body == {"state": "s", "questions": LINE["questions"], "x_audit": True}   # labels, paths dropped
    assert [(p.name, p.data) for p in wire.parts] == [("images", media("image")), ("audio", media("audio"))]
    assert "media/a.png" in wire.parts[0].origin                               # the server's messages name the file


def test_a_line_without_files_goes_as_json(tmp_path):
    seen: list[httpx.Request] = []
    remote, _ = backend(lambda r: seen.append(r) or httpx.Response(200, json=ANSWER), tmp_path)
    remote.answer(json.dumps({"state": "\ud800?", "questions": {}}).encode(), "rid")
    assert seen[0].headers["content-type"] == "application/json"
    assert json.loads(seen[0].read()) == {"state": "\ud800?", "questions": {}, "x_audit": True}   # surrogate as it came


def test_429_and_503_are_retried_after_the_servers_wait_then_kept_as_the_line_error(tmp_path):
    replies = [httpx.Response(429, headers={"Retry-After": "2", "retry-after-ms": "1500"}, json={"detail": "busy"}),
               httpx.Response(503, headers={"Retry-After": "120"}, json={"detail": "draining"}),
               httpx.Response(200, json=ANSWER)]
    remote, waits = backend(lambda r: replies.pop(0), tmp_path, max_wait_s=30.0)
    assert remote.answer(json.dumps(LINE).encode(), "rid") == ANSWER
    assert waits == [1.5, 30.0]                     # retry-after-ms first; a long wait is capped
    always = httpx.Response(429, json={"detail": {"error_type": "rate_limit_error"}})
    remote, waits = backend(lambda r: always, tmp_path, retries=2)
    with pytest.raises(LineFailed) as failed:
        remote.answer(json.dumps(LINE).encode(), "rid")
    assert failed.value.status == 429 and failed.value.body == {"detail": {"error_type": "rate_limit_error"}}
    assert len(waits) == 2


def test_other_errors_are_the_line_record_as_the_server_said_them(tmp_path):
    body = {"detail": [{"loc": ["body", "state"], "msg": "Field required", "type": "missing"}], "request_id": "x"}
    remote, waits = backend(lambda r: httpx.Response(422, json=body), tmp_path)
    with pytest.raises(LineFailed) as failed:
        remote.answer(json.dumps(LINE).encode(), "rid")
    assert (failed.value.status, failed.value.body, waits) == (422, body, [])
    remote, _ = backend(lambda r: httpx.Response(502, text="<html>bad gateway</html>"), tmp_path)
    with pytest.raises(LineFailed) as failed:
        remote.answer(json.dumps(LINE).encode(), "rid")
    assert failed.value.body == {"text": "<html>bad gateway</html>"}


def test_a_refused_key_or_an_unreachable_server_stops_the_run(tmp_path):
    remote, _ = backend(lambda r: httpx.Response(401, json={"detail": "no"}), tmp_path)
    with pytest.raises(BackendUnavailable, match="401"):
        remote.answer(json.dumps(LINE).encode(), "rid")

    def refuse(request):
        raise httpx.ConnectError("connection refused", request=request)

    remote, waits = backend(refuse, tmp_path, retries=3)
    with pytest.raises(BackendUnavailable, match="ConnectError"):
        remote.answer(json.dumps(LINE).encode(), "rid")
    assert waits == [0.5, 1.0, 2.0]


def test_retry_after_reads_milliseconds_then_seconds_else_one_second():
    assert retry_after_s(httpx.Headers({"retry-after-ms": "250", "Retry-After": "9"}), 60) == 0.25
    assert retry_after_s(httpx.Headers({"Retry-After": "3"}), 60) == 3.0
    assert retry_after_s(httpx.Headers({"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}), 60) == 1.0
    assert retry_after_s(httpx.Headers({}), 0.2) == 0.2
