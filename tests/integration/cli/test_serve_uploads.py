"""Upload deadlines on a real `omni serve`: a body that stalls gets a 408 in the service's error shape and frees its
connection (shutdown does not wait for it); a client that hangs up mid-upload is logged at info and counted as 499,
never as a 500 with a traceback."""
from __future__ import annotations

import json
import socket
import time

import pytest

from tests.integration.cli.test_serve_subprocess import BODY, Server


@pytest.fixture(scope="module")
def server(tiny_dir, tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("uploads"), "--model", str(tiny_dir), "--body-timeout-s", "1.5",
                 "--log-level", "info").wait_ready()
    yield srv
    srv.stop()


def partial_upload(port: int, announced: int, sent: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"X-Request-Id: stalled-1\r\nContent-Length: " + str(announced).encode() + b"\r\n\r\n" + sent)
    return sock


def read_response(sock: socket.socket) -> tuple[int, dict, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(rest) < int(headers.get("content-length", 0)):
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return int(lines[0].split()[1]), headers, rest


def test_a_stalled_body_gets_a_408_in_the_error_shape_and_the_connection_closes(server):
    sock = partial_upload(server.port, 500, b'{"s')
    started = time.monotonic()
    status, _headers, body = read_response(sock)
    waited = time.monotonic() - started
    assert status == 408 and 1.0 <= waited < 20
    payload = json.loads(body)
    assert payload["detail"]["error_type"] == "request_timeout" and payload["request_id"] == "stalled-1"
    assert "did not arrive within 1.5 s" in payload["detail"]["message"]
    sock.settimeout(10)
    assert sock.recv(1) == b""                     # the server closed the connection
    sock.close()
    assert server.client.post("/v1/systemone", json=BODY).status_code == 200


def test_a_client_that_hangs_up_mid_upload_is_a_499_at_info_never_a_500(server):
    sock = partial_upload(server.port, 5000, json.dumps(BODY).encode()[:100])
    time.sleep(0.2)
    sock.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        metrics = server.client.get("/metrics").text
        if 'status="499"' in metrics:
            break
        time.sleep(0.1)
    assert 'omni_requests_total{route="/v1/systemone",status="499"} 1.0' in metrics
    assert 'status="500"' not in metrics
    log = server.log()
    assert "disconnected before its body arrived" in log
    assert "Traceback" not in log and " ERROR " not in log


def test_shutdown_does_not_wait_for_a_stalled_upload_past_the_body_deadline(tiny_dir, tmp_path):
    import signal

    srv = Server(tmp_path, "--model", str(tiny_dir), "--body-timeout-s", "1", "--drain-timeout-s", "60").wait_ready()
    sock = partial_upload(srv.port, 500, b"{")
    time.sleep(0.2)
    srv.proc.send_signal(signal.SIGTERM)
    srv.proc.wait(30)                       # a hang guard: the drain period alone would be 60 s
    assert srv.proc.returncode == 0
    sock.settimeout(5)
    assert sock.recv(64).startswith(b"HTTP/1.1 408 ")   # the upload was cut at its deadline, answered, then the exit
    sock.close()
    srv.stop()
