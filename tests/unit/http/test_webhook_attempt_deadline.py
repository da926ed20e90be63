"""`--webhook-timeout-s` bounds a whole attempt, not each read: a receiver on 127.0.0.1 that trickles its answer's
header one byte at a time (each byte well within the time-out) is cut off once the attempt's time is up, the attempt
counts as a time-out and the letter goes to the dead-letter file; it never holds a worker for as long as it likes."""
from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.http.webhooks import WebhookConfig, WebhookSender

SECRET = "whsec-test-4f2a"
HEAD = b"HTTP/1.1 200 OK\r\nX-Trickle: " + b"a" * 120 + b"\r\nContent-Length: 0\r\n\r\n"


class Trickler:
    """Answers every request with HEAD, one byte per `interval_s`; records how many bytes each connection took
    before the client hung up (all of HEAD: it waited for the whole answer)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.sent: list[int] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/hook"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(0.05)
        while not self.stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._trickle, args=(connection,), daemon=True).start()

    def _trickle(self, connection: socket.socket) -> None:
        with connection:
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = connection.recv(65536)
                if not chunk:
                    return
                request += chunk
            sent = 0
            try:
                for byte in HEAD:
                    if self.stop.is_set():
                        break
                    connection.sendall(bytes([byte]))
                    sent += 1
                    time.sleep(self.interval_s)
                connection.settimeout(30)
                connection.recv(1)          # until the client closes (or sends its next request)
            except OSError:                 # the client hung up mid-answer
                pass
            self.sent.append(sent)


@pytest.fixture
def trickler() -> Iterator[Trickler]:
    receiver = Trickler(interval_s=0.05)    # each byte within 0.05 s; the whole head takes about 7 s
    yield receiver
    receiver.stop.set()
    receiver.thread.join()
    receiver.listener.close()


def test_a_trickling_receiver_is_cut_off_when_the_attempt_is_up(trickler, tmp_path: Path):
    config = WebhookConfig(url=trickler.url, secret=SECRET, dead_letter_path=tmp_path / "dead.jsonl", max_tries=1,
                           timeout_s=0.5, drain_timeout_s=5.0)
    sender = WebhookSender(config)
    sender.start()
    try:
        assert sender.offer({"request_id": "req-0", "outcome": "act"}, "req-0")
        give_up = time.monotonic() + 60     # a guard against a hang, not a timing assertion
        while sender.stats()["delivered"] + sender.stats()["dead_lettered"] == 0:
            assert time.monotonic() < give_up, "the attempt never ended"
            time.sleep(0.01)
        stats = sender.stats()
    finally:
        sender.stop()
    assert stats["delivered"] == 0
    assert stats["dead_lettered"] == 1
    [letter] = [json.loads(line) for line in config.dead_letter_path.read_text().splitlines()]
    assert letter["last_error"] == "ReadTimeout: no answer within 0.5 s"
    give_up = time.monotonic() + 30
    while not trickler.sent:
        assert time.monotonic() < give_up, "the receiver never saw the client hang up"
        time.sleep(0.01)
    assert trickler.sent[0] < len(HEAD)     # cut off mid-header
