"""api.http.webhooks: signed, retried webhook deliveries of decisions, off the response path.

`WebhookSender.offer(payload, request_id)` serialises the payload once, puts it on a bounded queue and returns at once
(False, counted as dropped, when the sender stopped, or when the queue is full: then it goes straight to the
dead-letter file, reason `queue_full`, not fsynced on the caller's thread). Worker threads POST it with
`X-Omni-Signature: t=<unix s>,v1=<hex HMAC-SHA256 of "<t>." + body>` (signed afresh on every attempt) and
`Idempotency-Key: <request id>` (the same on every attempt). Non-2xx, a refused or dropped connection and a timeout
are retried with capped exponential backoff and full jitter (`Retry-After` on 429/503 honoured up to
`backoff_max_s`). Retries wait in a heap of due times, not in a worker, so a failing, hanging or trickling receiver
holds one worker for one attempt at most (`timeout_s` for the whole attempt: `api.http.webhook_transport`), never the
queue. After `max_tries`, and for whatever is still queued or in flight when `stop()`'s drain time runs out, one JSON
line goes to the dead-letter file (`api.http.dead_letters`: mode 0600, O_APPEND, fsynced); a line the file does not
take is logged whole, counted and kept in memory to be written when it can; meanwhile `dead_letter_problem()` says
why (for /ready).
Delivery is at least once: receivers deduplicate by `Idempotency-Key`. `check_reachable` is the startup check of the
URL; `sign` and `verify` are what a receiver does (docs/policies.md shows it).

Must not know: routes, the model, what the payload holds, settings or the environment (the caller builds the config
from flags; the default client ignores proxy variables: pass `client_factory` for a proxy or a private CA).
"""
from __future__ import annotations

import hashlib
import heapq
import hmac
import itertools
import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from api.http.dead_letters import DeadLetterFile
from api.http.webhook_transport import AttemptTransport
from omni.contract.errors import OmniError

log = logging.getLogger(__name__)
OUTCOMES = frozenset({"act", "review", "pass"})
SIGNATURE_HEADER = "X-Omni-Signature"
COUNTERS = ("delivered", "retried", "failed_attempts", "dropped", "dead_lettered", "dead_letter_errors")


class WebhookError(OmniError):
    """A webhook setting, the receiver at startup or the dead-letter file is unusable: names the flag and why."""


@dataclass(frozen=True, kw_only=True)
class WebhookConfig:
    url: str
    secret: bytes | str = field(repr=False)
    dead_letter_path: Path
    on: frozenset[str] = frozenset({"act", "review"})     # overall outcomes that are sent (see `wants`)
    max_tries: int = 6
    backoff_base_s: float = 0.5
    backoff_max_s: float = 60.0
    timeout_s: float = 10.0
    queue_size: int = 1000
    drain_timeout_s: float = 10.0
    workers: int = 4
    dead_letter_retry_s: float = 5.0        # how often lines the dead-letter file did not take are tried again

    def __post_init__(self) -> None:
        split_url(self.url)
        object.__setattr__(self, "on", frozenset(self.on))
        object.__setattr__(self, "dead_letter_path", Path(self.dead_letter_path))
        problems = [(not self.secret, "--webhook-secret", "must not be empty"),
                    (not self.on or not self.on <= OUTCOMES, "--webhook-on",
                     f"must name some of act, review, pass, not {','.join(sorted(self.on)) or 'nothing'}"),
                    (self.max_tries < 1, "--webhook-tries", f"must be at least 1, not {self.max_tries}"),
                    (not self.timeout_s > 0, "--webhook-timeout-s", f"must be above 0, not {self.timeout_s}"),
                    (self.queue_size < 1, "--webhook-queue", f"must be at least 1, not {self.queue_size}"),
                    (not 0 < self.backoff_base_s <= self.backoff_max_s, "backoff_base_s",
                     f"must be above 0 and at most backoff_max_s ({self.backoff_max_s}), not {self.backoff_base_s}"),
                    (not self.drain_timeout_s >= 0, "drain_timeout_s", f"must be 0 or more, not {self.drain_timeout_s}"),
                    (self.workers < 1, "workers", f"must be at least 1, not {self.workers}"),
                    (not self.dead_letter_retry_s > 0, "dead_letter_retry_s",
                     f"must be above 0, not {self.dead_letter_retry_s}")]
        for broken, name, why in problems:
            if broken:
                raise WebhookError(f"{name} {why}")

    @property
    def secret_bytes(self) -> bytes:
        return self.secret.encode() if isinstance(self.secret, str) else self.secret


def sign(secret: bytes | str, body: bytes, t: int) -> str:
    """The `X-Omni-Signature` value: `t=<t>,v1=<hex HMAC-SHA256 of b"<t>." + body>`."""
    key = secret.encode() if isinstance(secret, str) else secret
    return f"t={t},v1={hmac.new(key, b'%d.' % t + body, hashlib.sha256).hexdigest()}"


def verify(secret: bytes | str, header: str, body: bytes, now: float | None = None, tolerance_s: float = 300) -> bool:
    """True when `header` signs exactly `body` with `secret` (any of its v1 values, compared in constant time) and
    its t is within `tolerance_s` of `now` (a replayed old delivery fails)."""
    parts = [tuple(p.strip() for p in part.split("=", 1)) for part in header.split(",") if "=" in part]
    try:
        t = int(next(value for key, value in parts if key == "t"))
    except (StopIteration, ValueError):
        return False
    if abs((time.time() if now is None else now) - t) > tolerance_s:
        return False
    expected = sign(secret, body, t).rsplit("v1=", 1)[1].encode()
    return any(key == "v1" and hmac.compare_digest(value.encode(), expected) for key, value in parts)


def split_url(url: str) -> tuple[str, int]:
    """(host, port) of an http(s) URL, else WebhookError naming `--webhook` and what is wrong."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise WebhookError(f"--webhook {url!r} is not a URL ({e})") from None
    if parts.scheme not in ("http", "https"):
        raise WebhookError(f"--webhook {url!r}: the scheme must be http or https, not {parts.scheme or 'none'!r}")
    if not parts.hostname:
        raise WebhookError(f"--webhook {url!r} names no host")
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def check_reachable(url: str, timeout_s: float = 5.0) -> None:
    """Startup check: the URL is http(s) with a host, and a TCP connection to host:port opens within `timeout_s`."""
    host, port = split_url(url)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise WebhookError(f"--webhook {url!r}: cannot connect to {host}:{port} ({reason})") from None


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds a `Retry-After` header asks for (delta seconds or an HTTP date), None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - (time.time() if now is None else now))
    except (TypeError, ValueError, IndexError):
        return None


def backoff_delay_s(tries: int, base_s: float, max_s: float, asked_s: float | None = None,
                    uniform: Callable[[float, float], float] = random.uniform) -> float:
    """Wait before the next attempt after `tries` attempts: what the receiver asked for (`Retry-After`), capped at
    `max_s`, else full jitter: uniform in [0, min(max_s, base_s * 2^(tries-1))]."""
    if asked_s is not None:
        return min(asked_s, max_s)
    return uniform(0.0, min(max_s, base_s * 2.0 ** min(tries - 1, 60)))


@dataclass(eq=False)
class _Letter:
    request_id: str
    body: bytes
    tries: int = 0
    last_error: str = ""
    done: bool = False          # delivered or dead-lettered: nobody touches it again


class WebhookSender:
    """Bounded queue + worker threads + retry heap + dead-letter file. `offer` never blocks; `stop` drains.
    `client_factory` builds one httpx.Client per worker (its timeouts, proxy and CA are then the caller's)."""

    def __init__(self, config: WebhookConfig, client_factory: Callable[[], httpx.Client] | None = None):
        self.config = config
        self._client_factory = client_factory or (lambda: httpx.Client(   # timeout_s: each operation AND the attempt
            transport=AttemptTransport(config.timeout_s), timeout=config.timeout_s, follow_redirects=False,
            trust_env=False))
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Letter]] = []       # (due on the monotonic clock, sequence, letter)
        self._seq = itertools.count()
        self._in_flight: set[_Letter] = set()
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._accepting = True
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._dead = DeadLetterFile(config.dead_letter_path, retry_s=config.dead_letter_retry_s,
                                    max_waiting=config.queue_size)
        try:
            version = metadata.version("omni-decide")
        except metadata.PackageNotFoundError:
            version = "unknown"
        self._user_agent = f"omni-decide/{version}"

    def wants(self, outcome: str) -> bool:
        """Whether a decision with this overall outcome is sent (`--webhook-on`)."""
        return outcome in self.config.on

    def start(self) -> None:
        """Open the dead-letter file (WebhookError naming `--webhook-dead-letter` if it cannot be) and the workers."""
        try:
            self._dead.open()
        except OSError as e:
            raise WebhookError(f"--webhook-dead-letter {str(self._dead.path)!r} cannot be opened for appending "
                               f"({e.strerror or e})") from None
        clients = [self._client_factory() for _ in range(self.config.workers)]
        for i, client in enumerate(clients):
            thread = threading.Thread(target=self._work, args=(client,), name=f"omni-webhook-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def offer(self, payload: dict[str, Any], request_id: str) -> bool:
        """Queue one delivery; never blocks. False (and counted as dropped) when full, stopped or not JSON."""
        try:
            body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        except (TypeError, ValueError):
            log.exception("webhook payload of request %s is not JSON; dropped", request_id)
            body = b""
        with self._cond:
            full = bool(body) and self._accepting and len(self._heap) >= self.config.queue_size
            if not body or not self._accepting or full:
                self._counts["dropped"] += 1
            else:
                heapq.heappush(self._heap, (time.monotonic(), next(self._seq), _Letter(request_id, body)))
                self._cond.notify()
                return True
        if full:        # never lost: into the dead-letter file at once (one write; no fsync on the caller's thread)
            self._dead_letter(_Letter(request_id, body), "queue_full", sync=False)
        return False

    def stats(self) -> dict[str, int]:
        """Counters for /metrics: delivered, retried (attempts after the first), failed_attempts, dropped,
        dead_lettered, dead_letter_errors; and gauges queue_depth (waiting, retries included) and in_flight."""
        with self._cond:
            counts = {**self._counts, "queue_depth": len(self._heap), "in_flight": len(self._in_flight)}
        return {**counts, "dead_lettered": self._dead.written, "dead_letter_errors": self._dead.failed}

    def dead_letter_problem(self) -> str | None:
        """Why undeliverable decisions cannot be kept in the dead-letter file now (they wait in memory and are
        retried), or None: for /ready."""
        return self._dead.problem()

    def stop(self) -> None:
        """Take no more; deliver what is queued or in flight for up to `drain_timeout_s`; dead-letter the rest."""
        deadline = time.monotonic() + self.config.drain_timeout_s
        with self._cond:
            self._accepting = False
            while self._threads and (self._in_flight or (self._heap and self._heap[0][0] <= deadline)) \
                    and (left_s := deadline - time.monotonic()) > 0:
                self._cond.wait(left_s)
            self._closed = True
            left = [(letter, "shutdown") for _, _, letter in self._heap]
            left += [(letter, "in_flight_at_shutdown") for letter in self._in_flight]   # may arrive as well
            self._heap.clear()
            for letter, _ in left:
                letter.done = True
            self._cond.notify_all()
        for letter, reason in left:
            self._dead_letter(letter, reason)
        for thread in self._threads:        # idle workers leave at once; one mid-attempt is not waited for long
            thread.join(timeout=max(0.05, deadline - time.monotonic()))
        self._dead.close()

    def _work(self, client: httpx.Client) -> None:
        with client:
            while (letter := self._next()) is not None:
                try:
                    error, asked_s = self._attempt(client, letter)
                except Exception as e:      # a bug here must not kill the worker and strand the queue
                    log.exception("webhook delivery of request %s failed unexpectedly", letter.request_id)
                    error, asked_s = f"{type(e).__name__}: {e}", None
                self._settle(letter, error, asked_s)

    def _next(self) -> _Letter | None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                if self._heap and self._heap[0][0] <= now:
                    letter = heapq.heappop(self._heap)[2]
                    self._in_flight.add(letter)
                    if letter.tries:
                        self._counts["retried"] += 1
                    return letter
                self._cond.wait(self._heap[0][0] - now if self._heap else None)
            return None

    def _attempt(self, client: httpx.Client, letter: _Letter) -> tuple[str | None, float | None]:
        """One POST: (None, None) on 2xx, else (what went wrong, seconds the receiver asked to wait or None)."""
        letter.tries += 1
        headers = {SIGNATURE_HEADER: sign(self.config.secret_bytes, letter.body, int(time.time())),
                   "Idempotency-Key": letter.request_id, "Content-Type": "application/json",
                   "User-Agent": self._user_agent}
        try:
            with client.stream("POST", self.config.url, content=letter.body, headers=headers) as response:
                if 200 <= response.status_code < 300:   # the body is never read: a receiver cannot make us buffer it
                    return None, None
                asked_s = retry_after_s(response.headers.get("retry-after")) \
                    if response.status_code in (429, 503) else None
                return f"HTTP {response.status_code}", asked_s
        except httpx.TimeoutException as e:
            return f"{type(e).__name__}: no answer within {self.config.timeout_s:g} s", None
        except httpx.HTTPError as e:
            return f"{type(e).__name__}: {e}", None

    def _settle(self, letter: _Letter, error: str | None, asked_s: float | None) -> None:
        with self._cond:
            self._in_flight.discard(letter)
            self._cond.notify_all()
            self._counts["delivered" if error is None else "failed_attempts"] += 1
            if error is None or letter.done:    # delivered, or stop() already wrote it to the dead-letter file
                letter.done = True
                return
            letter.last_error = error
            if letter.tries < self.config.max_tries and not self._closed:
                delay_s = backoff_delay_s(letter.tries, self.config.backoff_base_s, self.config.backoff_max_s, asked_s)
                heapq.heappush(self._heap, (time.monotonic() + delay_s, next(self._seq), letter))
                return
            letter.done = True
        self._dead_letter(letter, "max_tries" if letter.tries >= self.config.max_tries else "shutdown")

    def _dead_letter(self, letter: _Letter, reason: str, sync: bool = True) -> None:
        """Append one line {request_id, reason, tries, last_error, dead_lettered_at, payload}, fsynced (`sync` False:
        not fsynced, for a caller that must not wait on the disk); one the file does not take waits in memory."""
        record = {"request_id": letter.request_id, "reason": reason, "tries": letter.tries,
                  "last_error": letter.last_error or None,
                  "dead_lettered_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                  "payload": json.loads(letter.body)}
        self._dead.append((json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode(), sync)
