"""Shadow scoring off the live answer's path: head-only candidates' heads run on a thread of their own, after the
forward that answered the live request handed its answers back.

`ShadowScorer.submit(job)` queues one candidate score (a callable the engine builds around
`AdapterHost.score_shadow`) and returns a future of its `ShadowScore` (None when it was not scored). At most
`max_pending` scores wait at once; one more is dropped at once (counted), so shadow work can never pile up behind the
live traffic. A failing job resolves to None (counted as failed) and never reaches the live answer.
Knows nothing of HTTP, the model's internals or how a score is computed.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from omni.contract.types import ShadowScore

log = logging.getLogger(__name__)


class ShadowScorer:
    def __init__(self, max_pending: int, count: Callable[[str], None]):
        self.max_pending = max(1, max_pending)
        self.count = count                      # the Selector's counters: same_forward, dropped, failed
        self._pending = 0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="omni-shadow")

    def submit(self, job: Callable[[], ShadowScore | None]) -> Future[ShadowScore | None]:
        scored: Future[ShadowScore | None] = Future()
        with self._lock:
            room = self._pending < self.max_pending
            if room:
                self._pending += 1
        if not room:
            self.count("dropped")
            scored.set_result(None)
            return scored
        try:
            self._pool.submit(self._run, job, scored)
        except RuntimeError:                    # shut down: the engine is stopping
            self._done()
            self.count("dropped")
            scored.set_result(None)
        return scored

    def _run(self, job: Callable[[], ShadowScore | None], scored: Future[ShadowScore | None]) -> None:
        try:
            score = job()
        except Exception:  # a candidate's fault must never reach the live answer: logged, counted
            log.exception("shadow scoring failed")
            score = None
            self.count("failed")
        else:
            self.count("same_forward" if score is not None else "failed")
        finally:
            self._done()
        scored.set_result(score)

    def _done(self) -> None:
        with self._lock:
            self._pending -= 1

    def stop(self) -> None:
        self._pool.shutdown(wait=True)
