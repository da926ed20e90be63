"""Signed webhooks against a real receiver on 127.0.0.1 that fails, drops the connection, hangs and succeeds as
scripted per Idempotency-Key: delivered once per key after dedup, every signature verifies, retries counted, the
dead-letter file gets what could not be delivered (after max_tries or at shutdown), a full queue drops without
blocking, and the startup check names what is wrong with the URL."""
from __future__ import annotations

import hashlib
import hmac
import json
import math
import socket
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from api.http.webhooks import (
    WebhookConfig,
    WebhookError,
    WebhookSender,
    backoff_delay_s,
    check_reachable,
    retry_after_s,
    sign,
    verify,
)
from omni.contract.errors import OmniError

SECRET = "whsec-test-4f2a"


@dataclass
class Received:
    key: str
    action: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    """A webhook receiver: each request to a key runs the next step of `script[key]` (then `default`):
    ok (200), fail (500), busy (503, Retry-After: 0), close (drop the connection unanswered),
    hang (wait for `release`, then drop the connection)."""

    def __init__(self) -> None:
        self.script: dict[str, list[str]] = {}
        self.default = "ok"
        self.requests: list[Received] = []
        self.release = threading.Event()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                key = self.headers["Idempotency-Key"]
                with receiver.lock:
                    steps = receiver.script.get(key, [])
                    action = steps.pop(0) if steps else receiver.default
                    receiver.requests.append(Received(key, action, dict(self.headers), body))
                if action == "hang":
                    receiver.release.wait(60)
                if action in ("hang", "close"):
                    self.close_connection = True
                    return
                status = {"ok": 200, "fail": 500, "busy": 503}[action]
                self.send_response(status)
                if action == "busy":
                    self.send_header("Retry-After", "0")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)

    def accepted(self) -> Counter[str]:
        """How many times each key was answered 2xx: a receiver that deduplicates keeps one of each."""
        with self.lock:
            return Counter(r.key for r in self.requests if r.action == "ok")

    def tries(self) -> Counter[str]:
        with self.lock:
            return Counter(r.key for r in self.requests)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.thread.start()
    yield r
    r.release.set()
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture
def make_sender(tmp_path: Path) -> Iterator[Callable[..., WebhookSender]]:
    senders: list[WebhookSender] = []

    def make(url: str, **overrides: Any) -> WebhookSender:
        config = WebhookConfig(url=url, secret=SECRET, dead_letter_path=tmp_path / "dead.jsonl", backoff_base_s=0.01,
                               backoff_max_s=0.05, timeout_s=1.0, drain_timeout_s=5.0)
        sender = WebhookSender(replace(config, **overrides))
        sender.start()
        senders.append(sender)
        return sender

    yield make
    for sender in senders:
        sender.stop()


def wait_until(condition: Callable[[], bool], guard_s: float = 20.0) -> None:
    """Poll until `condition` holds; the guard only keeps a broken build from hanging the suite."""
    give_up = time.monotonic() + guard_s
    while not condition():
        assert time.monotonic() < give_up, "condition never held"
        time.sleep(0.005)


def dead_letters(sender: WebhookSender) -> list[dict[str, Any]]:
    return [json.loads(line) for line in sender.config.dead_letter_path.read_text().splitlines()]


def payload(i: int) -> dict[str, Any]:
    return {"request_id": f"req-{i}", "outcome": "act", "answers": {"q": {"answer": True, "p": 0.97}}, "ü": "ß"}


def test_signature_round_trip_and_what_fails_it():
    body, t = b'{"outcome":"act"}', 1_700_000_000
    header = sign(SECRET, body, t)
    assert header == f"t={t},v1=" + hmac.new(SECRET.encode(), b"1700000000." + body, hashlib.sha256).hexdigest()
    assert verify(SECRET, header, body, now=t + 10) and verify(SECRET.encode(), header, body, now=t - 10)
    assert not verify(SECRET, header, body + b" ", now=t)                        # tampered body
    assert not verify("whsec-other", header, body, now=t)                         # wrong secret
    assert not verify(SECRET, header, body, now=t + 301)                          # stale
    assert not verify(SECRET, header, body, now=t - 301)                          # from the future
    assert not verify(SECRET, header.replace(f"t={t}", f"t={t + 1}"), body, now=t)  # t is signed too
    for broken in ("", "garbage", f"t={t}", header.split(",")[1], f"t=soon,{header.split(',')[1]}", f"t={t},v1=é"):
        assert not verify(SECRET, broken, body, now=t), broken
    rotated = f"{sign('whsec-old', body, t)},{header.split(',')[1]}"                # any v1 may match (rotation)
    assert verify(SECRET, rotated, body, now=t)


def test_every_payload_is_delivered_once_per_key_and_every_signature_verifies(receiver, make_sender):
    ids = [f"req-{i}" for i in range(20)]
    first_steps = ([], ["fail"], ["close"], ["hang"], ["busy", "fail"])
    receiver.script = {rid: list(first_steps[i % 5]) for i, rid in enumerate(ids)}
    sender = make_sender(receiver.url, timeout_s=0.3)
    assert all(sender.offer(payload(i), rid) for i, rid in enumerate(ids))
    wait_until(lambda: sender.stats()["delivered"] == 20)
    sender.stop()

    assert receiver.accepted() == Counter(ids)                    # each key answered 2xx exactly once
    assert sum(receiver.tries().values()) == 40                   # 20 first tries + 20 scripted failures retried
    for r in receiver.requests:
        assert verify(SECRET, r.headers["X-Omni-Signature"], r.body)
        assert json.loads(r.body) == payload(ids.index(r.key))
        assert r.headers["Content-Type"] == "application/json"
        assert r.headers["User-Agent"].startswith("omni-decide/")
    stats = sender.stats()
    assert stats == {"delivered": 20, "retried": 20, "failed_attempts": 20, "dropped": 0, "dead_lettered": 0,
                     "dead_letter_errors": 0, "queue_depth": 0, "in_flight": 0}
    assert dead_letters(sender) == []


def test_a_receiver_that_always_fails_gets_max_tries_then_the_dead_letter_file_has_it(receiver, make_sender):
    receiver.default = "fail"
    sender = make_sender(receiver.url, max_tries=3)
    assert sender.offer(payload(0), "req-0") and sender.offer(payload(1), "req-1")
    wait_until(lambda: sender.stats()["dead_lettered"] == 2)
    sender.stop()

    assert receiver.tries() == {"req-0": 3, "req-1": 3}           # nothing after the last try
    letters = sorted(dead_letters(sender), key=lambda d: d["request_id"])
    assert [(d["request_id"], d["reason"], d["tries"], d["last_error"], d["payload"]) for d in letters] == \
        [("req-0", "max_tries", 3, "HTTP 500", payload(0)), ("req-1", "max_tries", 3, "HTTP 500", payload(1))]
    assert all(d["dead_lettered_at"].endswith("+00:00") for d in letters)
    stats = sender.stats()
    assert (stats["delivered"], stats["failed_attempts"], stats["retried"], stats["dead_lettered"]) == (0, 6, 4, 2)
    assert stat.S_IMODE(sender.config.dead_letter_path.stat().st_mode) == 0o600


def test_a_hanging_receiver_times_out_each_try_and_is_dead_lettered(receiver, make_sender):
    receiver.default = "hang"
    sender = make_sender(receiver.url, timeout_s=0.2, max_tries=2)
    sender.offer(payload(0), "req-0")
    wait_until(lambda: sender.stats()["dead_lettered"] == 1)
    (letter,) = dead_letters(sender)
    assert letter["tries"] == 2 and letter["last_error"] == "ReadTimeout: no answer within 0.2 s"
    assert receiver.tries() == {"req-0": 2} and sender.stats()["failed_attempts"] == 2


def test_a_hanging_receiver_holds_one_worker_not_the_queue(receiver, make_sender):
    receiver.script = {"slow": ["hang"]}
    sender = make_sender(receiver.url, timeout_s=30, workers=2)
    sender.offer(payload(0), "slow")
    wait_until(lambda: receiver.tries()["slow"] == 1)
    for i in range(1, 6):
        sender.offer(payload(i), f"req-{i}")
    wait_until(lambda: sender.stats()["delivered"] == 5)          # while "slow" still hangs
    assert sender.stats()["in_flight"] == 1 and not receiver.release.is_set()
    receiver.release.set()                                        # the hung try fails; its retry succeeds
    wait_until(lambda: sender.stats()["delivered"] == 6)
    assert receiver.accepted() == Counter(["slow", *(f"req-{i}" for i in range(1, 6))])


def test_a_full_queue_drops_and_counts_without_blocking_and_dead_letters_what_it_drops(receiver, make_sender):
    receiver.script = {"first": ["hang"]}
    sender = make_sender(receiver.url, timeout_s=30, workers=1, queue_size=2)
    assert sender.offer(payload(0), "first")
    wait_until(lambda: sender.stats()["in_flight"] == 1)          # the only worker is stuck on "first"
    assert sender.offer(payload(1), "a") and sender.offer(payload(2), "b")
    assert sender.offer(payload(3), "c") is False                 # returns at once although nothing moves
    assert (sender.stats()["dropped"], sender.stats()["queue_depth"]) == (1, 2)
    [letter] = dead_letters(sender)                                # not lost: in the dead-letter file at once
    assert (letter["request_id"], letter["reason"], letter["tries"]) == ("c", "queue_full", 0)
    receiver.release.set()
    wait_until(lambda: sender.stats()["delivered"] == 3)
    assert set(receiver.accepted()) == {"first", "a", "b"} and "c" not in receiver.tries()


def test_stop_drains_what_it_can_and_dead_letters_the_rest(receiver, make_sender):
    sender = make_sender(receiver.url)
    ids = [f"req-{i}" for i in range(30)]
    for i, rid in enumerate(ids):
        sender.offer(payload(i), rid)
    sender.stop()
    stats, letters = sender.stats(), dead_letters(sender)
    assert stats["delivered"] + stats["dead_lettered"] == 30 and len(letters) == stats["dead_lettered"]
    assert set(receiver.accepted()) | {d["request_id"] for d in letters} == set(ids)
    assert sender.offer(payload(99), "late") is False and sender.stats()["dropped"] == 1


def test_stop_writes_retries_still_waiting_to_the_dead_letter_file(receiver, make_sender):
    receiver.default = "fail"
    sender = make_sender(receiver.url, backoff_base_s=1000, backoff_max_s=1000, drain_timeout_s=0.2)
    for i in range(5):
        sender.offer(payload(i), f"req-{i}")
    wait_until(lambda: sender.stats()["failed_attempts"] >= 5)
    sender.stop()
    letters = dead_letters(sender)
    assert sorted(d["request_id"] for d in letters) == [f"req-{i}" for i in range(5)]
    assert {(d["reason"], d["last_error"]) for d in letters} == {("shutdown", "HTTP 500")}
    assert sender.stats()["dead_lettered"] == 5 and sender.stats()["queue_depth"] == 0


def test_stop_dead_letters_a_delivery_still_in_flight_and_never_twice(receiver, make_sender):
    receiver.default = "hang"
    sender = make_sender(receiver.url, timeout_s=30, drain_timeout_s=0.1)
    sender.offer(payload(0), "req-0")
    wait_until(lambda: sender.stats()["in_flight"] == 1)
    sender.stop()                                                 # returns while the receiver still hangs
    assert [(d["request_id"], d["reason"]) for d in dead_letters(sender)] == [("req-0", "in_flight_at_shutdown")]
    receiver.release.set()
    wait_until(lambda: sender.stats()["failed_attempts"] == 1)    # the hung try ends...
    assert len(dead_letters(sender)) == 1 and receiver.tries() == {"req-0": 1}   # ...and is not written again


def test_retry_after_is_honoured_within_the_cap(receiver, make_sender):
    receiver.script = {"req-0": ["busy"]}                         # 503 + Retry-After: 0
    sender = make_sender(receiver.url, backoff_base_s=1000, backoff_max_s=1000)   # jitter alone: up to 1000 s
    sender.offer(payload(0), "req-0")
    wait_until(lambda: sender.stats()["delivered"] == 1)
    assert sender.stats()["retried"] == 1

    def top(low: float, high: float) -> float:   # the largest jittered wait
        return high

    assert [backoff_delay_s(n, 0.5, 60, uniform=top) for n in (1, 2, 3, 8, 9, 10_000)] == [0.5, 1, 2, 60, 60, 60]
    assert backoff_delay_s(3, 0.5, 60, uniform=lambda low, high: low) == 0.0      # full jitter starts at 0
    assert (backoff_delay_s(1, 0.5, 60, asked_s=5), backoff_delay_s(1, 0.5, 60, asked_s=500)) == (5, 60)
    now = 1_700_000_000.0
    assert (retry_after_s("3"), retry_after_s("-1"), retry_after_s("soon"), retry_after_s(None)) == (3, 0, None, None)
    assert retry_after_s(formatdate(now + 30, usegmt=True), now=now) == 30


def test_check_reachable_names_the_flag_and_the_reason(receiver):
    check_reachable(receiver.url, timeout_s=2)                    # an open port passes
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    with pytest.raises(WebhookError, match=rf"--webhook .*cannot connect to 127\.0\.0\.1:{closed} \(Connection refused"):
        check_reachable(f"http://127.0.0.1:{closed}/hook", timeout_s=2)
    for url, reason in (("ftp://example.com/hook", "scheme must be http or https, not 'ftp'"),
                        ("example.com/hook", "scheme must be http or https, not 'none'"),
                        ("http:///hook", "names no host"), ("http://example.com:99999/", "is not a URL")):
        with pytest.raises(WebhookError, match=f"--webhook .*{reason}"):
            check_reachable(url)
    assert issubclass(WebhookError, OmniError)


def test_bad_settings_name_their_flag(tmp_path):
    config = WebhookConfig(url="https://hooks.example.com/omni", secret=SECRET, dead_letter_path=tmp_path / "d.jsonl")
    for change, flag in (({"max_tries": 0}, "--webhook-tries"), ({"secret": ""}, "--webhook-secret"),
                         ({"on": frozenset({"act", "maybe"})}, "--webhook-on"), ({"queue_size": 0}, "--webhook-queue"),
                         ({"timeout_s": 0}, "--webhook-timeout-s"), ({"timeout_s": math.nan}, "--webhook-timeout-s"),
                         ({"url": "mailto:a@b.c"}, "--webhook"), ({"backoff_base_s": 90}, "backoff_base_s")):
        with pytest.raises(WebhookError, match=flag):
            replace(config, **change)
    assert SECRET not in repr(config) and config.on == {"act", "review"} and config.max_tries >= 5
    sender = WebhookSender(config)
    assert sender.wants("act") and sender.wants("review") and not sender.wants("pass")
    missing = WebhookSender(replace(config, dead_letter_path=tmp_path / "no" / "dead.jsonl"))
    with pytest.raises(WebhookError, match="--webhook-dead-letter .*No such file or directory"):
        missing.start()


def test_a_payload_that_is_not_json_is_dropped_and_counted(receiver, make_sender):
    sender = make_sender(receiver.url)
    assert sender.offer({"when": object()}, "req-0") is False
    assert sender.offer({"p": math.nan}, "req-1") is False        # strict JSON receivers reject NaN
    assert sender.stats()["dropped"] == 2 and receiver.tries() == Counter()
