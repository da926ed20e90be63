"""`AttemptTransport` against a real HTTP/1.1 server on 127.0.0.1: connections are kept and reused as httpx's own
transport does, and the time limit is each request's (a pause longer than it between two requests on one
connection costs nothing); errors arrive as httpx's (a refused connection is httpx.ConnectError)."""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from api.http.webhook_transport import AttemptTransport


class Server:
    def __init__(self) -> None:
        self.connections = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"           # keep-alive

            def setup(self) -> None:
                super().setup()
                server.connections += 1

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/hook"
        threading.Thread(target=self.http.serve_forever, args=(0.01,), daemon=True).start()


@pytest.fixture
def server() -> Iterator[Server]:
    running = Server()
    yield running
    running.http.shutdown()
    running.http.server_close()


def test_a_kept_connection_is_reused_and_each_request_has_its_own_time(server):
    with httpx.Client(transport=AttemptTransport(0.5), timeout=0.5) as client:
        first = client.post(server.url, content=b"x" * 100_000)
        time.sleep(0.8)                             # longer than a request may take: the next one starts afresh
        second = client.post(server.url, content=b"second")
    assert first.status_code == 200
    assert first.content == b"x" * 100_000
    assert second.status_code == 200
    assert second.content == b"second"
    assert server.connections == 1


def test_a_refused_connection_is_httpx_connect_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]               # closed again: nothing listens there
    with httpx.Client(transport=AttemptTransport(0.5), timeout=0.5) as client, pytest.raises(httpx.ConnectError):
        client.post(f"http://127.0.0.1:{port}/hook", content=b"x")


def test_attempt_s_must_be_positive():
    with pytest.raises(ValueError, match="attempt_s must be above 0"):
        AttemptTransport(0)
