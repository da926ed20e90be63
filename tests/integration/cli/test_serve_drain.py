"""What a real `omni serve` does between SIGTERM and its exit, as docs/serving.md promises: a request in flight (its
body still arriving) finishes with its answer, while a new connection meanwhile gets a 503 in the error shape with
Retry-After and Connection: close (not a refused connection); /ready says draining; then the process exits 0."""
from __future__ import annotations

import json
import signal
import time

import httpx

from tests.integration.cli.test_serve_subprocess import BODY, Server
from tests.integration.cli.test_serve_uploads import partial_upload, read_response


def first_answer_after_the_signal(srv: Server, path: str) -> httpx.Response:
    """GET `path` on a new connection each time until the server stops answering as before the signal (200)."""
    give_up = time.monotonic() + 30         # a guard against a hang, not a timing assertion
    while True:
        assert time.monotonic() < give_up, "the server never began to drain"
        response = httpx.get(srv.url + path, timeout=30)     # a new connection: no keep-alive
        if response.status_code != 200:
            return response
        time.sleep(0.02)


def test_new_requests_get_503_while_the_ones_in_flight_finish(tiny_dir, tmp_path):
    srv = Server(tmp_path, "--model", str(tiny_dir), "--body-timeout-s", "60", "--drain-timeout-s", "60").wait_ready()
    try:
        whole = json.dumps(BODY).encode()
        sock = partial_upload(srv.port, len(whole), whole[:10])     # in flight: the rest of its body comes later
        time.sleep(0.5)                     # let the server read its head (a head start, not an assertion)
        srv.proc.send_signal(signal.SIGTERM)
        try:
            refused = first_answer_after_the_signal(srv, "/v1/models")
        except httpx.ConnectError as exc:
            raise AssertionError(f"a new connection was refused during the drain: {exc}") from None
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "5"
        assert refused.headers["connection"] == "close"
        assert refused.json()["detail"]["error_type"] == "not_ready"
        assert "draining" in refused.json()["detail"]["message"]
        ready = httpx.get(srv.url + "/ready", timeout=30)
        assert ready.status_code == 503
        assert ready.json()["status"] == "draining"
        assert srv.proc.poll() is None                              # still draining: the upload is in flight
        sock.sendall(whole[10:])
        status, _headers, answer = read_response(sock)
        sock.close()
        assert status == 200, answer[:300]
        assert list(json.loads(answer)["answers"]) == list(BODY["questions"])
        assert srv.proc.wait(60) == 0
    finally:
        srv.stop()
