"""The webhook dead-letter file: one JSON line per decision that could not be delivered, appended whole.

`DeadLetterFile(path).open()` opens it for appending (mode 0600, O_APPEND; OSError when it cannot be), and
`append(line)` writes one line, fsynced, one writer at a time, so lines never interleave. A line the file does not
take (a full disk, an I/O error) is logged whole at CRITICAL, counted, and kept in memory: the lines kept are written,
in order and before any new one (a torn line's remainder first), by the next append or by a retry every `retry_s`.
While any wait, `problem()` says why, for /ready: an undeliverable decision that cannot be recorded is lost as surely
as one the decision log cannot keep. At most `max_waiting` lines wait; newer ones, already logged whole, are let go.

Must not know: HTTP, deliveries, what a line holds, settings or the environment.
"""
from __future__ import annotations

import collections
import logging
import os
import threading
from pathlib import Path

from omni.serve.decision_log_files import problem as os_problem

log = logging.getLogger(__name__)


class DeadLetterFile:
    def __init__(self, path: str | Path, retry_s: float = 5.0, max_waiting: int = 1000) -> None:
        self.path = Path(path)
        self.retry_s = retry_s
        self.max_waiting = max_waiting
        self._io = threading.Lock()             # one writer at a time: lines never interleave
        self._state = threading.Lock()          # what waits, the problem and the counts; never held over I/O
        self._fd: int | None = None
        self._waiting: collections.deque[bytes] = collections.deque()
        self._problem: str | None = None
        self._retry: threading.Timer | None = None
        self._closed = False
        self.written = 0                        # lines in the file
        self.failed = 0                         # lines the file did not take when first written

    def open(self) -> None:
        """Open the file for appending (created 0600); OSError when it cannot be."""
        with self._io:
            self._fd = self._open()

    def append(self, line: bytes, sync: bool = True) -> None:
        """Write `line` after the lines still waiting; fsynced unless `sync` is False (a caller that must not wait on
        the disk). Never raises: a line not taken is logged, counted and kept to be written later."""
        self._write(line, sync)

    def problem(self) -> str | None:
        """Why lines wait instead of being in the file, or None when the file takes every line."""
        with self._state:
            return self._problem

    def close(self) -> None:
        """Stop retrying, try once more to write what waits, close the file (a later append opens it for itself)."""
        with self._state:
            self._closed = True
            retry, self._retry = self._retry, None
        if retry is not None:
            retry.cancel()
        self._write(None, sync=True)
        with self._io:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _write(self, new: bytes | None, sync: bool) -> None:
        with self._io:
            with self._state:
                lines = [*self._waiting, *([new] if new is not None else [])]
                self._waiting.clear()
            if not lines:
                return
            written, left, error = self._write_lines(lines, sync)
            why, dropped = self._keep(written, left, error, new is not None)    # before the next writer looks
        if new is not None and left:
            log.critical("webhook dead letter NOT written yet (%s): kept in memory and retried every %g s; the letter "
                         "follows: %s", why, self.retry_s, new.decode(errors="replace").rstrip())
        elif error is not None:
            log.error("webhook dead-letter file: %s", why)
        if dropped:
            log.critical("webhook dead letters: %d waiting lines let go (more than %d wait; each was logged whole)",
                         dropped, self.max_waiting)

    def _write_lines(self, lines: list[bytes], sync: bool) -> tuple[int, list[bytes], OSError | None]:
        """(lines written whole, what was not written: a torn line's remainder first, the error). An fsync that fails
        leaves the lines in the file (rewriting them would repeat them): the error is reported, nothing is left."""
        done, current = 0, None
        try:
            fd = self._fd if self._fd is not None else self._open()
            try:
                for line in lines:
                    current = memoryview(line)
                    while current:
                        current = current[os.write(fd, current):]
                    done += 1
                if sync:
                    os.fsync(fd)
            finally:
                if fd != self._fd:
                    os.close(fd)
        except OSError as exc:
            if done == len(lines):
                return done, [], exc
            return done, ([bytes(current)] if current is not None else [lines[done]]) + lines[done + 1:], exc
        return done, [], None

    def _keep(self, written: int, left: list[bytes], error: OSError | None, new: bool) -> tuple[str | None, int]:
        """Count what was written, keep what was not (first in line) and arm the retry: (why, lines let go)."""
        why = f"{self.path} {os_problem(error)}" if error is not None else None
        with self._state:
            self.written += written
            self.failed += int(new and bool(left))        # the new line is the last: left whenever anything is
            self._waiting.extendleft(reversed(left))
            dropped = max(0, len(self._waiting) - self.max_waiting)
            for _ in range(dropped):
                self._waiting.pop()            # the newest: each was just logged whole
            self._problem = why if self._waiting else None
            if self._waiting and self._retry is None and not self._closed:
                self._retry = threading.Timer(self.retry_s, self._retry_waiting)
                self._retry.daemon = True
                self._retry.start()
        return why, dropped

    def _retry_waiting(self) -> None:
        with self._state:
            self._retry = None
        self._write(None, sync=True)
