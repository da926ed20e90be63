"""MicroBatcher: a bounded queue in front of ONE worker thread that runs items in batches.

A batch is dispatched when it is full (records or token budget) or when its oldest item has waited `max_wait_ms`.
With `wait_only_while_expecting`, a partial batch waits only while items announced with `expect()` are still on
their way (being prepared upstream); with none announced it goes at once, so a lone request never pays the wait,
and under load batches still fill because items queue up while the worker runs the previous batch.
Items past their deadline, or whose future was cancelled, are dropped before compute. Every future ends: with a
result, the item's own exception, DeadlineExceeded, InferenceFailed (the whole batch raised) or NotReady (stopped).
Long work is shared fairly: `run_batch` may answer REQUEUE for an item that has more to do (the next chunk of a long
prefill). Such an item waits among the continuations, oldest first: whatever arrives during a turn goes before the
next turn (a small request waits about one turn), and several long items finish one after the other rather than all
slowing together. Under a steady stream of fresh work fresh batches and continuation turns alternate, so a long item
is never starved. It keeps its deadline, so one that expires is
dropped at its next turn instead of holding the worker.

Knows nothing of torch, HTTP or the model: `run_batch` and `cost_tokens` are the caller's functions. Its limits come
from an `EngineConfig`, which has already checked them.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from omni.contract.errors import DeadlineExceeded, InferenceFailed, NotReady, Overloaded

T = TypeVar("T")
R = TypeVar("R")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchReport:
    """What one dispatched batch looked like; passed to the `on_batch` hook after it ran."""

    size: int                              # records that reached run_batch
    tokens: int                            # their summed cost
    queue_wait_s: tuple[float, ...]        # per record: submit -> dispatch
    run_s: float                           # time spent in run_batch
    failed: bool                           # run_batch raised (every record got InferenceFailed)
    expired: int = 0                       # records dropped at dispatch (deadline passed or cancelled)
    requeued: int = 0                      # records put back for another turn (more work to do)


@dataclass
class BatcherStats:
    """Counters since start; read with `MicroBatcher.stats()` (a copy)."""

    submitted: int = 0
    rejected: int = 0                      # Overloaded at submit
    completed: int = 0                     # futures that got a result
    failed: int = 0                        # futures that got an exception (any kind)
    expired: int = 0                       # dropped before compute (deadline or cancelled)
    requeued: int = 0                      # turns that ended with more work to do (chunked prefills)
    batches: int = 0
    queue_depth: int = 0
    batch_sizes: dict[int, int] = field(default_factory=dict)  # size -> number of batches


class Requeue:
    """What `run_batch` answers for an item that has more work to do: run it again at its next turn."""

    def __repr__(self) -> str:
        return "REQUEUE"


REQUEUE = Requeue()


@dataclass
class _Pending(Generic[T]):
    item: T
    future: Future
    cost: int
    deadline: float | None
    submitted_at: float
    started: bool = False                  # its future is running: it was requeued after a first turn
    first_submitted_at: float = 0.0        # when it was submitted first (continuations run oldest first)

    def start(self) -> bool:
        """Mark the future running (once); False when its caller cancelled it before its first turn."""
        if self.started:
            return True
        self.started = self.future.set_running_or_notify_cancel()
        return self.started


class MicroBatcher(Generic[T, R]):
    """Groups submitted items into batches for `run_batch`, called from one worker thread only.

    `run_batch(items)` returns one entry per item, in order: a result, or an exception object that fails only that
    item. `cost_tokens(item)` is the item's share of `max_batch_tokens`; an item costing more than the budget runs
    alone. Batches keep submission order (no skipping ahead, so nothing starves).
    """

    def __init__(self, run_batch: Callable[[list[T]], list], cost_tokens: Callable[[T], int], *,
                 max_batch_records: int, max_batch_tokens: int, max_wait_ms: float, max_queue: int,
                 name: str = "model", on_batch: Callable[[BatchReport], None] | None = None,
                 wait_only_while_expecting: bool = False):
        self._run_batch = run_batch
        self._cost_tokens = cost_tokens
        self.max_batch_records = max_batch_records
        self.max_batch_tokens = max_batch_tokens
        self.max_wait_s = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.name = name
        self.on_batch = on_batch
        self.wait_only_while_expecting = wait_only_while_expecting
        self._expected = 0                # items announced by expect() and not yet submitted
        self._queue: deque[_Pending[T]] = deque()
        self._continuations: list[_Pending[T]] = []      # requeued items, oldest first submission first
        self._continuation_owed = False   # a fresh batch ran while continuations waited: they go next
        self._cond = threading.Condition()
        self._stats = BatcherStats()
        self._thread: threading.Thread | None = None
        self._accepting = False
        self._stopping = False
        self._drain = True
        self._recent_batch_s = 0.05      # moving average, only for the Retry-After hint

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        with self._cond:
            if self._thread is not None:
                raise RuntimeError(f"batcher {self.name!r} already started")
            self._accepting = True
            self._thread = threading.Thread(target=self._worker, name=f"{self.name}-batcher", daemon=True)
            self._thread.start()

    def stop(self, drain: bool = True, timeout_s: float | None = None) -> None:
        """Refuse new items; finish queued ones (drain) or fail them with NotReady. After `timeout_s`, whatever is
        still queued fails with NotReady (the batch in flight, if any, is left to finish)."""
        with self._cond:
            self._accepting = False
            self._stopping = True
            self._drain = drain
            if not drain:
                self._fail_queued_locked(lambda: NotReady(f"{self.name}: stopped"))
            self._cond.notify_all()
            thread = self._thread
        if thread is None:
            return
        thread.join(timeout_s)
        if thread.is_alive():
            with self._cond:
                self._drain = False
                self._fail_queued_locked(lambda: NotReady(f"{self.name}: stopped before this request ran"))
                self._cond.notify_all()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._accepting

    def stats(self) -> BatcherStats:
        with self._cond:
            s = BatcherStats(**{**self._stats.__dict__, "batch_sizes": dict(self._stats.batch_sizes)})
            s.queue_depth = len(self._queue) + len(self._continuations)
            return s

    # ---------------------------------------------------------------- submit
    def expect(self) -> None:
        """Announce an item that is still being prepared: a partial batch may wait (up to max_wait) for it.
        Each `expect()` is settled by one `submit(..., expected=True)` or one `unexpect()`."""
        with self._cond:
            self._expected += 1

    def unexpect(self) -> None:
        """An announced item will not come (its preparation failed or it was cancelled): stop waiting for it."""
        with self._cond:
            self._expected = max(0, self._expected - 1)
            self._cond.notify_all()

    def submit(self, item: T, deadline: float | None = None, expected: bool = False) -> Future:
        """Queue `item`; `deadline` is a `time.monotonic()` value; `expected` settles one `expect()` (even when the
        item is refused). Raises Overloaded when the queue is full and NotReady when the batcher is not running."""
        cost = max(0, int(self._cost_tokens(item)))
        future: Future = Future()
        with self._cond:
            if expected:
                self._expected = max(0, self._expected - 1)
                self._cond.notify_all()
            if not self._accepting:
                raise NotReady(f"{self.name}: not accepting requests")
            if len(self._queue) >= self.max_queue:
                self._stats.rejected += 1
                raise Overloaded(f"{self.name}: queue is full ({self.max_queue} waiting)",
                                 retry_after_s=self._retry_after_locked())
            now = time.monotonic()
            self._queue.append(_Pending(item, future, cost, deadline, now, first_submitted_at=now))
            self._stats.submitted += 1
            self._cond.notify_all()
        return future

    def _retry_after_locked(self) -> float:
        batches_ahead = -(-len(self._queue) // self.max_batch_records)
        return round(min(30.0, max(0.5, batches_ahead * self._recent_batch_s)), 1)

    # ---------------------------------------------------------------- worker
    def _worker(self) -> None:
        try:
            while True:
                batch, dropped = self._next_batch()
                if batch is None:
                    return
                self._finish_dropped(dropped)
                if batch:
                    self._execute(batch, dropped=len(dropped))
                # let go of the finished items now: the wait for the next batch can be long, and an item can hold a
                # whole request (a 40 MB state, a long prefix's keys/values)
                del batch, dropped
        except BaseException as exc:  # a bug here must not leave futures waiting forever
            log.exception("batcher %r worker died", self.name)
            cause = exc
            with self._cond:
                self._accepting = False
                self._fail_queued_locked(lambda: _chained(InferenceFailed(f"{self.name}: batcher worker died"), cause))
            raise

    def _next_batch(self) -> tuple[list[_Pending[T]] | None, list[_Pending[T]]]:
        """Wait for a dispatchable batch. Returns (None, []) when stopped and nothing is left to run."""
        with self._cond:
            while True:
                if not self._queue and not self._continuations:
                    if self._stopping:
                        return None, []
                    self._cond.wait()
                    continue
                if self._stopping and not self._drain:   # includes an item requeued by the turn that just ended
                    self._fail_queued_locked(lambda: NotReady(f"{self.name}: stopped"))
                    return None, []
                if self._continuations and (not self._queue or self._continuation_owed):
                    self._continuation_owed = False     # the oldest continuation's next turn
                    return self._take_continuation_locked()
                wait_s = self._queue[0].submitted_at + self.max_wait_s - time.monotonic()
                if wait_s > 0 and not self._stopping and not self._full_locked() and self._company_coming_locked():
                    self._cond.wait(wait_s)
                    continue
                self._continuation_owed = bool(self._continuations)
                return self._take_locked()

    def _company_coming_locked(self) -> bool:
        """Whether waiting could grow the batch: always in the plain mode, else only while items are announced."""
        return not self.wait_only_while_expecting or self._expected > 0

    def _full_locked(self) -> bool:
        """True when waiting longer cannot grow the next batch: records or tokens reached, or the next item
        would not fit the token budget."""
        if len(self._queue) >= self.max_batch_records:
            return True
        tokens = 0
        for n, p in enumerate(self._queue):
            if n and tokens + p.cost > self.max_batch_tokens:
                return True
            tokens += p.cost
        return tokens >= self.max_batch_tokens

    def _take_locked(self) -> tuple[list[_Pending[T]], list[_Pending[T]]]:
        now = time.monotonic()
        batch: list[_Pending[T]] = []
        dropped: list[_Pending[T]] = []
        tokens = 0
        while self._queue and len(batch) < self.max_batch_records:
            p = self._queue[0]
            if (p.deadline is not None and p.deadline <= now) or p.future.cancelled():
                dropped.append(self._queue.popleft())
                continue
            if batch and tokens + p.cost > self.max_batch_tokens:
                break
            batch.append(self._queue.popleft())
            tokens += p.cost
        return batch, dropped

    def _take_continuation_locked(self) -> tuple[list[_Pending[T]], list[_Pending[T]]]:
        p = self._continuations.pop(0)
        if (p.deadline is not None and p.deadline <= time.monotonic()) or p.future.cancelled():
            return [], [p]
        return [p], []

    def _finish_dropped(self, dropped: list[_Pending[T]]) -> None:
        for p in dropped:
            if p.start():  # False: its caller cancelled it already
                p.future.set_exception(DeadlineExceeded(f"deadline passed after {_waited_s(p):.3f} s in the queue"))
        with self._cond:
            self._stats.expired += len(dropped)
            self._stats.failed += sum(1 for p in dropped if not p.future.cancelled())

    def _execute(self, batch: list[_Pending[T]], dropped: int) -> None:
        dispatched_at = time.monotonic()
        live = [p for p in batch if p.start()]  # False = cancelled by its caller
        cancelled = len(batch) - len(live)
        if not live:
            with self._cond:
                self._stats.expired += cancelled
            return
        failed_batch = False
        try:
            results = self._run_batch([p.item for p in live])
            if len(results) != len(live):
                raise RuntimeError(f"run_batch returned {len(results)} results for {len(live)} items")
        except Exception as exc:
            failed_batch = True
            log.exception("batcher %r: batch of %d failed", self.name, len(live))
            results = [_chained(InferenceFailed(f"{self.name}: inference failed for this batch"), exc) for _ in live]
        except BaseException as exc:
            for p in live:
                p.future.set_exception(_chained(InferenceFailed(f"{self.name}: interrupted"), exc))
            raise
        run_s = time.monotonic() - dispatched_at
        ok, again = _settle(live, results)
        if again:
            self._requeue(again)
        report = BatchReport(size=len(live), tokens=sum(p.cost for p in live),
                             queue_wait_s=tuple(dispatched_at - p.submitted_at for p in live),
                             run_s=run_s, failed=failed_batch, expired=dropped + cancelled, requeued=len(again))
        self._record(report, ok, cancelled)

    def _requeue(self, again: list[_Pending[T]]) -> None:
        """Items with more to do go back to the continuations, oldest first, ahead of new work."""
        with self._cond:
            for p in again:
                p.submitted_at = time.monotonic()
                self._continuations.append(p)
            self._continuations.sort(key=lambda p: p.first_submitted_at)
            self._stats.requeued += len(again)
            self._cond.notify_all()

    def _record(self, report: BatchReport, ok: int, cancelled: int) -> None:
        with self._cond:
            s = self._stats
            s.batches += 1
            s.completed += ok
            s.failed += report.size - ok - report.requeued
            s.expired += cancelled
            s.batch_sizes[report.size] = s.batch_sizes.get(report.size, 0) + 1
            self._recent_batch_s = 0.8 * self._recent_batch_s + 0.2 * report.run_s
        if self.on_batch is not None:
            try:
                self.on_batch(report)
            except Exception:  # a metrics hook must never break the worker
                log.exception("batcher %r: on_batch hook failed", self.name)

    def _fail_queued_locked(self, make_exc: Callable[[], BaseException]) -> None:
        self._queue.extend(self._continuations)
        self._continuations.clear()
        while self._queue:
            p = self._queue.popleft()
            if p.start():
                p.future.set_exception(make_exc())
                self._stats.failed += 1


def _settle(live: list[_Pending[T]], results: list) -> tuple[int, list[_Pending[T]]]:
    """Each item's future gets its result or its exception; (how many succeeded, the items to run again)."""
    ok = 0
    again = []
    for p, result in zip(live, results, strict=True):
        if result is REQUEUE:
            again.append(p)
        elif isinstance(result, BaseException):
            p.future.set_exception(result)
        else:
            p.future.set_result(result)
            ok += 1
    return ok, again


def _chained(exc: BaseException, cause: BaseException) -> BaseException:
    exc.__cause__ = cause
    return exc


def _waited_s(p: _Pending) -> float:
    return time.monotonic() - p.submitted_at
