"""Shadow scoring off the live answer's path: head-only candidates' heads run on a thread of their own, after the
forwards that answered the live requests handed their answers back, several records at a time.

`ShadowScorer.submit(record)` queues one record whose shadow candidate is to be scored and returns a future of its
`ShadowScore` (None when it was not scored). The scorer's thread waits until `batch_records` records are queued or the
oldest has waited `gather_s`, then scores them together (`score(records)`: one head pass per candidate over all of
them), so the shadow work interrupts the model thread's CPU rarely and briefly instead of after every request. At
most `max_pending` records wait at once; one more is dropped at once (counted), so shadow work never piles up behind
the live traffic; a failing score resolves to None (counted as failed) and never reaches a live answer.
Knows nothing of HTTP, the model's internals or how a score is computed.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from omni.contract.types import ShadowScore

log = logging.getLogger(__name__)

Score = Callable[[Sequence[Any]], list[ShadowScore | None]]


class ShadowScorer:
    def __init__(self, score: Score, count: Callable[[str], None], *, batch_records: int = 8,
                 gather_s: float = 0.05, max_pending: int = 64):
        self.score = score
        self.count = count                      # the Selector's counters: same_forward, dropped, failed
        self.batch_records = max(1, batch_records)
        self.gather_s = gather_s
        self.max_pending = max(1, max_pending)
        self._queue: list[tuple[Any, Future[ShadowScore | None], float]] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def submit(self, record: Any) -> Future[ShadowScore | None]:
        scored: Future[ShadowScore | None] = Future()
        with self._wake:
            if self._stopping or len(self._queue) >= self.max_pending:
                dropped = True
            else:
                dropped = False
                self._queue.append((record, scored, time.monotonic()))
                self._start_locked()
                self._wake.notify()
        if dropped:
            self.count("dropped")
            scored.set_result(None)
        return scored

    def _start_locked(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="omni-shadow", daemon=True)
            self._thread.start()

    def _take(self) -> list[tuple[Any, Future[ShadowScore | None], float]] | None:
        """The next records to score (None: stopping and nothing left): a full batch, or whatever is queued once the
        oldest has waited `gather_s`."""
        with self._wake:
            while True:
                if self._queue and (len(self._queue) >= self.batch_records or self._stopping
                                    or time.monotonic() - self._queue[0][2] >= self.gather_s):
                    taken, self._queue = self._queue[:self.batch_records], self._queue[self.batch_records:]
                    return taken
                if self._stopping:
                    return None
                timeout = self.gather_s - (time.monotonic() - self._queue[0][2]) if self._queue else None
                self._wake.wait(timeout)

    def _loop(self) -> None:
        while (taken := self._take()) is not None:
            try:
                scores = self.score([record for record, _, _ in taken])
            except Exception:  # a candidate's fault must never reach a live answer: logged, counted
                log.exception("shadow scoring failed for %d records", len(taken))
                scores = [None] * len(taken)
            for (_, future, _), score in zip(taken, scores, strict=True):
                self.count("same_forward" if score is not None else "failed")
                future.set_result(score)

    def stop(self) -> None:
        """Score what is queued, then end the thread."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)
