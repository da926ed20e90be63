"""What a real `omni serve` does between SIGTERM and its exit, as docs/serving.md promises: a request in flight (the
route waiting for its body) finishes with its answer, while a new connection meanwhile gets a 503 in the error shape
with Retry-After and Connection: close (not a refused connection); /ready says draining; then the process exits 0."""
from __future__ import annotations

import json
import signal
import socket
import time

import httpx

from tests.integration.cli.test_serve_subprocess import BODY, Server
from tests.integration.cli.test_serve_uploads import read_response


def upload_in_flight(port: int, length: int) -> socket.socket:
    """A decision whose body is not sent yet, but which the app is already reading: with `Expect: 100-continue`
    the server says `100 Continue` only once the route asks for the body."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Expect: 100-continue\r\nContent-Length: " + str(length).encode() + b"\r\n\r\n")
    interim = b""
    while b"\r\n\r\n" not in interim:
        chunk = sock.recv(1)
        assert chunk, "the server closed the connection"
        interim += chunk
    assert interim.startswith(b"HTTP/1.1 100 "), interim
    return sock


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
        sock = upload_in_flight(srv.port, len(whole))               # in flight: its body comes later
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
        sock.sendall(whole)
        status, _headers, answer = read_response(sock)
        sock.close()
        assert status == 200, answer[:300]
        assert list(json.loads(answer)["answers"]) == list(BODY["questions"])
        assert srv.proc.wait(60) == 0
    finally:
        srv.stop()
