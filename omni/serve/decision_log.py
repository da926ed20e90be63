"""The decision log's writer: every served decision appended to JSONL segments, its media kept once by hash.

`DecisionLog(DIR).open()` creates the layout of `decision_log_files` (segments/, media/) and proves it writable
(write, fsync and remove a probe file) or raises `DecisionLogError` naming DIR and the cause. `append` only puts the
decision in a bounded queue (`queue_records` records, `queue_bytes` of media, the one being written included); one
writer thread renders the request (`render_request`, media as `media/<sha256>.<container>` or, `hash-only`, as
`{"sha256", "type", "bytes"}`), stores new media (temp file, fsync, rename) and appends the line. Every record is
either written or counted as dropped (queue full, write error, closed); a write error also marks the log unhealthy
until a write or a probe succeeds again. `stats()` and `healthy` are for /metrics and /ready.

Segments rotate before a line would take them past `segment_bytes`. Each DecisionLog writes segments of its own (a
random tag in the name, created exclusively), so processes sharing DIR never interleave lines; a line goes out in one
`write` (a reader sees it whole, a process crash keeps it) and a failed write is cut back off the segment. Segments
are fsynced when they close and within two `sync_interval_s` of a write, not per record: a per-record fsync would cap
the log at the disk's flush rate, and a power loss costs at most that long. With `retain_days`, retention runs
at open, after each rotation and every `prune_interval_s`, on the writer thread, by the injected `clock`.

Shadow scoring (`omni serve --shadow LIVE=CANDIDATE`): `append(..., shadow=BLOCK)` adds the candidate's result as a
top-level `"shadow"` key of the line, after `audit`; the line's `response` stays the live answer as sent. BLOCK is
`{"model": CANDIDATE, "adapter_sha256": str | null, "answers": {qid: System One answer, as in a response's
"answers"}, "probabilities": {qid: {option id: p}}, "x_outcome": the candidate's outcome as in a response's
"x_outcome", or null when no policy is in force}`. Shadow work that was dropped has no block (the server counts it).

Evidence (docs/evidence.md): `append(..., evidence=X_EVIDENCE)` (the decision's `x_evidence` object, whether its caller
asked for it or the server had it computed because the policy routed the decision to review) writes its summary
(`omni.contract.evidence_summary`: top spans, boxes, moments and windows, no maps), made on the writer thread, as a
top-level `"evidence"` key after `audit`; `top` is the request's ask's, or `LOGGED_ASK`'s when the caller did not ask.
The full maps are not kept: a logged `response` is the response as sent less its `x_evidence`.
Knows nothing of HTTP, argv, the environment, the engine or the model: it sees parsed requests, JSON and files.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typing_extensions import Self

from omni.contract.evidence_summary import LOGGED_ASK, evidence_summary
from omni.contract.json_values import JSONObject, JSONValue
from omni.contract.render import render_request
from omni.contract.types import DecisionRequest
from omni.serve.decision_log_files import (
    LOG_FORMAT,
    MEDIA_DIR,
    SECONDS_PER_DAY,
    SEGMENT_NAME,
    SEGMENTS_DIR,
    DecisionLogError,
    names,
    problem,
    prune,
    segment_name,
)
from preprocess.errors import MediaError
from preprocess.item import MediaItem
from preprocess.sniff import sniff

MEDIA_MODES = ("store", "hash-only")
PROBE_INTERVAL_S = 5.0          # how often an unhealthy, idle log tries a probe write to recover

Writer = Callable[[int, bytes], int]     # os.write's shape: (fd, data) -> bytes written


@dataclass(frozen=True)
class DecisionLogStats:
    """Counters since `open()`, for /metrics. appended = written + dropped + queue_depth."""

    appended: int
    written: int
    dropped: int                 # not written, whatever the cause: queue full, write error, closed (counted once)
    write_errors: int            # records lost to a failed write (also in `dropped`)
    queue_depth: int             # records waiting or being written
    bytes_written: int           # segment bytes
    media_bytes_written: int
    segments: int                # segments this log opened
    media_files: int             # media files this log stored (content that was not there yet)
    pruned_segments: int
    pruned_media: int
    healthy: bool
    last_error: str | None


@dataclass(frozen=True)
class _Pending:
    request: DecisionRequest
    response: JSONObject
    audit: JSONObject
    request_id: str | None
    decided_at: str
    media_bytes: int
    shadow: JSONObject | None = None
    evidence: JSONObject | None = None


_COUNTERS = ("appended", "written", "dropped", "write_errors", "bytes_written", "media_bytes_written", "segments",
             "media_files", "pruned_segments", "pruned_media")


class DecisionLog:
    """An append-only decision log in `directory`: `open()` (DecisionLogError if unusable), `append` from any
    thread, `close()` (drains). `media`: "store" or "hash-only"; `write` is the one function that writes bytes to
    a file (os.write; a test may cap it to stand in for a full disk)."""

    def __init__(self, directory: str | Path, *, media: str = "store", segment_bytes: int = 64 * 2**20,
                 retain_days: float | None = None, queue_records: int = 1024, queue_bytes: int = 256 * 2**20,
                 sync_interval_s: float = 1.0, prune_interval_s: float = 3600.0,
                 clock: Callable[[], float] = time.time, write: Writer = os.write) -> None:
        if media not in MEDIA_MODES:
            raise ValueError(f"media must be one of {', '.join(MEDIA_MODES)}, not {media!r}")
        if segment_bytes < 1 or queue_records < 1 or queue_bytes < 1 or (retain_days is not None and retain_days <= 0):
            raise ValueError("segment_bytes, queue_records, queue_bytes and retain_days must be positive")
        self.directory, self.media, self.segment_bytes = Path(directory), media, segment_bytes
        self.retain_days, self.queue_records, self.queue_bytes = retain_days, queue_records, queue_bytes
        self.sync_interval_s, self.prune_interval_s = sync_interval_s, prune_interval_s
        self._clock, self._write = clock, write
        self._tag = os.urandom(4).hex()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._counts = dict.fromkeys(_COUNTERS, 0)
        self._pending = self._pending_bytes = 0
        self._healthy = True
        self._last_error: str | None = None
        self._thread: threading.Thread | None = None
        self._closing = self._abandon = False
        # the writer thread's own state
        self._fd: int | None = None
        self._path: Path | None = None
        self._size = self._seq = 0
        self._dirty = self._new_entries = False
        self._synced_at = self._probed_at = time.monotonic()
        self._prune_at = 0.0

    # ------------------------------------------------------------------------------------------------ life cycle
    def open(self) -> Self:
        """Create the layout, prove it writable (write + fsync + remove a probe), prune, start the writer."""
        if self._thread is not None:
            raise RuntimeError("the decision log is already open")
        if self.directory.exists() and not self.directory.is_dir():
            raise DecisionLogError(self.directory, "cannot be created (a file of that name exists)")
        existed = self.directory.is_dir()
        for folder in (self.directory / SEGMENTS_DIR, self.directory / MEDIA_DIR):
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                words = problem(exc) if existed else f"cannot be created ({exc.strerror or exc})"
                raise DecisionLogError(self.directory, words) from exc
            failure = self._probe(folder)
            if failure:
                raise DecisionLogError(self.directory, failure)
        self._seq = max((int(m[2]) for m in map(SEGMENT_NAME.fullmatch, names(self.directory / SEGMENTS_DIR))
                         if m), default=0)
        if self.retain_days is not None:
            try:
                self._prune()
            except OSError as exc:
                raise DecisionLogError(self.directory, f"cannot prune old records ({problem(exc)})") from exc
        self._thread = threading.Thread(target=self._run, name="decision-log-writer", daemon=True)
        self._thread.start()
        return self

    def close(self, drain: bool = True, timeout_s: float = 30.0) -> DecisionLogStats:
        """Stop taking records; write what is queued (`drain`) or count it dropped; stop the writer. The stats:
        `queue_depth` > 0 means the writer did not finish within `timeout_s` (those records are still pending)."""
        with self._lock:
            thread, closing = self._thread, self._closing
            if thread is not None and not closing:
                self._closing, self._abandon = True, not drain
                self._queue.put(None)
        if thread is not None:
            thread.join(timeout_s)
        return self.stats()

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------------ callers
    def append(self, request: DecisionRequest, response: JSONObject, audit: JSONObject, *,
               request_id: str | None, decided_at: str, shadow: JSONObject | None = None,
               evidence: JSONObject | None = None) -> bool:
        """Queue one decision; True if queued, False if dropped (queue full or log closed), counted either way.
        `shadow`: a shadow candidate's result, written as the line's `"shadow"`; `evidence`: the decision's
        `x_evidence`, written as its summary, the line's `"evidence"` (see the module docstring).
        Never waits for I/O and never raises for a failing log. The dicts are serialized later, on the writer
        thread: do not change them afterwards."""
        media_bytes = sum(item.size_bytes for item in request.media)
        with self._lock:
            if self._thread is None:
                raise RuntimeError("append before open()")
            self._counts["appended"] += 1
            full = self._pending >= self.queue_records or \
                (self._pending > 0 and self._pending_bytes + media_bytes > self.queue_bytes)
            if self._closing or full:
                self._counts["dropped"] += 1
                return False
            self._pending += 1
            self._pending_bytes += media_bytes
            self._queue.put(_Pending(request, response, audit, request_id, decided_at, media_bytes, shadow, evidence))
            return True

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every queued record is written or counted dropped; False if `timeout_s` passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout_s)

    @property
    def healthy(self) -> bool:
        """Open, writer running, and the last write (or recovery probe) succeeded: for /ready."""
        with self._lock:
            running = self._thread is not None and self._thread.is_alive() and not self._closing
            return running and self._healthy

    def stats(self) -> DecisionLogStats:
        with self._lock:
            running = self._thread is not None and self._thread.is_alive() and not self._closing
            counts: dict[str, Any] = dict(self._counts)
            return DecisionLogStats(**counts, queue_depth=self._pending, healthy=running and self._healthy,
                                    last_error=self._last_error)

    # ------------------------------------------------------------------------------------------------ writer thread
    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=self.sync_interval_s)
            except queue.Empty:
                self._housekeep(idle=True)
                continue
            if item is None:
                break
            self._handle(item)
            self._housekeep(idle=False)
        try:
            self._close_segment()
        except OSError as exc:
            self._note_error(exc)

    def _handle(self, item: _Pending) -> None:
        line, error = b"", None
        if not self._abandon:
            try:
                line = self._render(item)
                self._write_line(line)
            except Exception as exc:  # noqa: BLE001  (the writer's top level: a failure is counted, never lost)
                error = exc
        with self._lock:
            self._pending -= 1
            self._pending_bytes -= item.media_bytes
            if self._abandon:
                self._counts["dropped"] += 1
            elif error is not None:
                self._counts["dropped"] += 1
                self._counts["write_errors"] += 1
            else:
                self._counts["written"] += 1
                self._counts["bytes_written"] += len(line)
                self._healthy = True
            self._idle.notify_all()
        if error is not None:
            self._note_error(error)

    def _render(self, item: _Pending) -> bytes:
        entries = [self._media_entry(media) for media in item.request.media]
        response = {key: value for key, value in item.response.items() if key != "x_evidence"}   # its summary instead
        record = {"format": LOG_FORMAT, "request_id": item.request_id, "decided_at": item.decided_at,
                  "request": render_request(item.request, entries), "response": response, "audit": item.audit}
        if item.evidence is not None:
            record["evidence"] = evidence_summary(item.evidence, (item.request.evidence or LOGGED_ASK).top)
        if item.shadow is not None:
            record["shadow"] = item.shadow
        return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")

    def _media_entry(self, item: MediaItem) -> JSONValue:
        digest = hashlib.sha256(item.data).hexdigest()
        try:
            container = sniff(item).container
        except MediaError:          # a decided request's media sniffed fine; keep odd bytes all the same
            container = "bin"
        if self.media == "hash-only":
            return {"sha256": digest, "type": container, "bytes": item.size_bytes}
        name = f"{MEDIA_DIR}/{digest}.{container}"
        try:
            os.utime(self.directory / name)     # kept already: touched, as retention spares recently named media
        except FileNotFoundError:
            self._store(self.directory / name, item.data)
        return name

    def _store(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(f".{path.name}.{self._tag}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                self._write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        self._new_entries = True
        with self._lock:
            self._counts["media_files"] += 1
            self._counts["media_bytes_written"] += len(data)

    def _write_line(self, line: bytes) -> None:
        if self._fd is not None and ((self._size > 0 and self._size + len(line) > self.segment_bytes)
                                     or os.fstat(self._fd).st_nlink == 0):   # full, or pruned by another process
            self._close_segment()
            self._prune_at = float("-inf")     # retention runs after this record (its errors are not the record's)
        if self._fd is None:
            self._open_segment()
        assert self._fd is not None
        try:
            self._write_all(self._fd, line)
        except OSError:
            try:        # cut a partial line off, so that the next record starts a line of its own
                os.ftruncate(self._fd, self._size)
            except OSError:
                self._close_segment(sync=False)     # cannot: leave the torn line last in its segment
            raise
        self._size += len(line)
        self._dirty = True

    def _write_all(self, fd: int, data: bytes) -> None:
        while data:
            written = self._write(fd, data)
            if written <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            data = data[written:]       # a copy only after a short write

    def _open_segment(self) -> None:
        while True:
            self._seq += 1
            path = self.directory / SEGMENTS_DIR / segment_name(self._clock(), self._seq, self._tag)
            try:
                self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:
                continue
        self._path, self._size, self._new_entries = path, 0, True
        with self._lock:
            self._counts["segments"] += 1

    def _close_segment(self, sync: bool = True) -> None:
        fd, path, size = self._fd, self._path, self._size
        if fd is None or path is None:
            return
        self._fd, self._path, self._size = None, None, 0
        try:
            if sync and self._dirty:
                os.fsync(fd)
                self._sync_folders()
        finally:
            os.close(fd)
            self._dirty = False
            if size == 0:
                path.unlink(missing_ok=True)

    def _sync_folders(self) -> None:
        if self._new_entries:
            for folder in (SEGMENTS_DIR, MEDIA_DIR):
                fd = os.open(self.directory / folder, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            self._new_entries = False

    def _housekeep(self, idle: bool) -> None:
        now = time.monotonic()
        try:
            if self._dirty and self._fd is not None and now - self._synced_at >= self.sync_interval_s:
                os.fsync(self._fd)
                self._sync_folders()
                self._dirty, self._synced_at = False, now
            if self.retain_days is not None and self._clock() >= self._prune_at:
                self._prune()
        except Exception as exc:  # noqa: BLE001  (the writer thread must live on: the error is kept, for /ready)
            self._note_error(exc)
        if idle and not self._healthy and now - self._probed_at >= PROBE_INTERVAL_S:
            self._probed_at = now
            failure = self._probe(self.directory / SEGMENTS_DIR)
            with self._lock:
                self._healthy = failure is None
                self._last_error = self._last_error if failure is None else f"{self.directory}: {failure}"

    def _probe(self, folder: Path) -> str | None:
        """Write, fsync and remove a small file in `folder`: what went wrong, in words, or None."""
        path = folder / f".probe-{self._tag}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                self._write_all(fd, b"omni decision log probe\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            path.unlink()
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
            return problem(exc)
        return None

    def _note_error(self, exc: BaseException) -> None:
        words = problem(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        with self._lock:
            self._healthy, self._last_error = False, f"{self.directory}: {words}"

    def _prune(self) -> None:
        assert self.retain_days is not None
        now_s = self._clock()
        self._prune_at = now_s + self.prune_interval_s
        pruned = prune(self.directory, now_s - self.retain_days * SECONDS_PER_DAY, self._path)
        with self._lock:
            self._counts["pruned_segments"] += pruned[0]
            self._counts["pruned_media"] += pruned[1]
