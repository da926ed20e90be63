"""MicroBatcher: grouping, max wait, token budget, deadline drop, failing-batch isolation, overload, stop/drain.

No torch, no timing assertions: a "gate" item holds the worker inside run_batch while the test queues items, so the
batches formed after the gate is released are deterministic.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError

import pytest

from omni.contract.errors import DeadlineExceeded, InferenceFailed, NotReady, Overloaded
from omni.serve.batcher import BatchReport, MicroBatcher

pytestmark = pytest.mark.unit
WAIT = 10.0  # generous upper bound for future.result(); never an assertion about speed


class Recorder:
    """run_batch that records batches, blocks on the item "gate", raises on "boom", fails "bad" alone."""

    def __init__(self):
        self.batches: list[list] = []
        self.threads: set[int] = set()
        self.gate_entered = threading.Event()
        self.gate_open = threading.Event()

    def __call__(self, items: list) -> list:
        self.threads.add(threading.get_ident())
        self.batches.append(list(items))
        if "gate" in items:
            self.gate_entered.set()
            assert self.gate_open.wait(WAIT)
        if "boom" in items:
            raise RuntimeError("device fault")
        return [ValueError(f"{i} is bad") if i == "bad" else f"done:{i}" for i in items]


def cost_of(item) -> int:
    return item if isinstance(item, int) else 1


def make(rec: Recorder, **kw) -> MicroBatcher:
    args = {"max_batch_records": 4, "max_batch_tokens": 1000, "max_wait_ms": 0, "max_queue": 64}
    args.update(kw)
    b = MicroBatcher(rec, cost_of, **args)
    b.start()
    return b


def hold_worker(b: MicroBatcher, rec: Recorder):
    gate = b.submit("gate")
    assert rec.gate_entered.wait(WAIT)
    return gate


def test_full_batch_dispatches_without_waiting_and_leftovers_wait_for_max_wait():
    rec = Recorder()
    b = make(rec, max_batch_records=3, max_wait_ms=60_000)
    futures = [b.submit(i) for i in ("a", "b", "c")]
    assert [f.result(WAIT) for f in futures] == ["done:a", "done:b", "done:c"]
    assert rec.batches == [["a", "b", "c"]]
    late = [b.submit(i) for i in ("d", "e")]
    assert not any(f.done() for f in late)  # not full, oldest has not waited 60 s: still queued
    b.stop(drain=True)                      # draining flushes the partial batch instead of waiting
    assert [f.result(WAIT) for f in late] == ["done:d", "done:e"]
    assert rec.batches[-1] == ["d", "e"]


def test_single_item_runs_after_max_wait_without_a_full_batch():
    rec = Recorder()
    b = make(rec, max_batch_records=100, max_wait_ms=20)
    assert b.submit("solo").result(WAIT) == "done:solo"
    assert rec.batches == [["solo"]]
    b.stop()


def test_queued_items_are_grouped_in_order_up_to_max_records():
    rec = Recorder()
    b = make(rec, max_batch_records=3)
    gate = hold_worker(b, rec)
    futures = [b.submit(f"r{i}") for i in range(7)]
    rec.gate_open.set()
    assert gate.result(WAIT) == "done:gate"
    assert [f.result(WAIT) for f in futures] == [f"done:r{i}" for i in range(7)]
    assert rec.batches[1:] == [["r0", "r1", "r2"], ["r3", "r4", "r5"], ["r6"]]
    assert len(rec.threads) == 1  # one worker thread owns the model
    b.stop()


def test_token_budget_is_never_exceeded_and_an_oversized_item_runs_alone():
    rec = Recorder()
    b = make(rec, max_batch_records=8, max_batch_tokens=10)
    gate = hold_worker(b, rec)
    futures = [b.submit(c) for c in (4, 4, 4, 25, 3, 3)]
    rec.gate_open.set()
    gate.result(WAIT)
    for f in futures:
        f.result(WAIT)
    assert rec.batches[1:] == [[4, 4], [4], [25], [3, 3]]
    for batch in rec.batches[1:]:
        assert len(batch) == 1 or sum(batch) <= 10
    b.stop()


def test_items_past_their_deadline_are_dropped_before_compute():
    rec = Recorder()
    b = make(rec)
    gate = hold_worker(b, rec)
    expired = b.submit("late", deadline=time.monotonic() - 1.0)
    fresh = b.submit("fresh", deadline=time.monotonic() + 3600)
    rec.gate_open.set()
    gate.result(WAIT)
    with pytest.raises(DeadlineExceeded):
        expired.result(WAIT)
    assert fresh.result(WAIT) == "done:fresh"
    assert all("late" not in batch for batch in rec.batches)
    assert b.stats().expired == 1
    b.stop()


def test_a_cancelled_future_is_never_computed():
    rec = Recorder()
    b = make(rec)
    gate = hold_worker(b, rec)
    gone = b.submit("gone")
    kept = b.submit("kept")
    assert gone.cancel()
    rec.gate_open.set()
    gate.result(WAIT)
    assert kept.result(WAIT) == "done:kept"
    with pytest.raises(CancelledError):
        gone.result(WAIT)
    assert all("gone" not in batch for batch in rec.batches)
    b.stop()


def test_a_failing_batch_fails_only_its_own_items():
    rec = Recorder()
    b = make(rec, max_batch_records=2)
    gate = hold_worker(b, rec)
    first = [b.submit("a"), b.submit("boom")]
    second = [b.submit("c"), b.submit("d")]
    rec.gate_open.set()
    gate.result(WAIT)
    for f in first:
        with pytest.raises(InferenceFailed) as info:
            f.result(WAIT)
        assert isinstance(info.value.__cause__, RuntimeError)  # chained, for the log
    assert [f.result(WAIT) for f in second] == ["done:c", "done:d"]
    assert b.submit("after").result(WAIT) == "done:after"  # the worker survived
    b.stop()


def test_an_exception_returned_for_one_item_fails_only_that_item():
    rec = Recorder()
    b = make(rec, max_batch_records=3)
    gate = hold_worker(b, rec)
    futures = [b.submit(i) for i in ("x", "bad", "y")]
    rec.gate_open.set()
    gate.result(WAIT)
    assert futures[0].result(WAIT) == "done:x"
    with pytest.raises(ValueError, match="bad is bad"):
        futures[1].result(WAIT)
    assert futures[2].result(WAIT) == "done:y"
    assert rec.batches[1] == ["x", "bad", "y"]
    b.stop()


def test_wrong_result_count_fails_the_batch_instead_of_hanging():
    b = MicroBatcher(lambda items: [], cost_of, max_batch_records=2, max_batch_tokens=10, max_wait_ms=0, max_queue=4)
    b.start()
    with pytest.raises(InferenceFailed):
        b.submit("x").result(WAIT)
    b.stop()


def test_a_full_queue_raises_overloaded_synchronously():
    rec = Recorder()
    b = make(rec, max_queue=2)
    gate = hold_worker(b, rec)  # running, so not counted in the queue
    queued = [b.submit("q1"), b.submit("q2")]
    with pytest.raises(Overloaded) as info:
        b.submit("q3")
    assert info.value.retry_after_s > 0
    assert b.stats().rejected == 1
    rec.gate_open.set()
    gate.result(WAIT)
    assert [f.result(WAIT) for f in queued] == ["done:q1", "done:q2"]
    b.stop()


def test_stop_with_drain_finishes_queued_work_then_refuses_new_items():
    rec = Recorder()
    b = make(rec, max_batch_records=2)
    gate = hold_worker(b, rec)
    queued = [b.submit(f"w{i}") for i in range(3)]
    stopper = threading.Thread(target=b.stop, kwargs={"drain": True})
    stopper.start()
    rec.gate_open.set()
    stopper.join(WAIT)
    assert not stopper.is_alive()
    assert gate.result(0) == "done:gate"
    assert [f.result(0) for f in queued] == ["done:w0", "done:w1", "done:w2"]
    with pytest.raises(NotReady):
        b.submit("too late")


def test_stop_without_drain_fails_queued_items_with_not_ready():
    rec = Recorder()
    b = make(rec)
    gate = hold_worker(b, rec)
    queued = [b.submit("u1"), b.submit("u2")]
    stopper = threading.Thread(target=b.stop, kwargs={"drain": False})
    stopper.start()
    for f in queued:
        with pytest.raises(NotReady):
            f.result(WAIT)
    rec.gate_open.set()
    stopper.join(WAIT)
    assert gate.result(WAIT) == "done:gate"  # the batch in flight still finishes
    assert all(b == ["gate"] for b in rec.batches)


def test_stop_timeout_fails_what_is_still_queued():
    rec = Recorder()
    b = make(rec)
    gate = hold_worker(b, rec)
    queued = b.submit("stuck")
    b.stop(drain=True, timeout_s=0.05)  # the gate never opens in time
    with pytest.raises(NotReady):
        queued.result(0)
    rec.gate_open.set()
    assert gate.result(WAIT) == "done:gate"


def test_submit_before_start_is_refused():
    b = MicroBatcher(Recorder(), cost_of, max_batch_records=2, max_batch_tokens=10, max_wait_ms=0, max_queue=4)
    with pytest.raises(NotReady):
        b.submit("x")


def test_on_batch_reports_sizes_and_waits_and_a_broken_hook_does_not_stop_the_worker():
    rec = Recorder()
    reports: list[BatchReport] = []

    def hook(report: BatchReport):
        reports.append(report)
        raise RuntimeError("metrics backend down")

    b = make(rec, max_batch_records=2, on_batch=hook)
    gate = hold_worker(b, rec)
    futures = [b.submit(3), b.submit(5), b.submit("z")]
    rec.gate_open.set()
    gate.result(WAIT)
    assert [f.result(WAIT) for f in futures] == ["done:3", "done:5", "done:z"]
    b.stop()
    assert [r.size for r in reports] == [1, 2, 1]
    assert reports[1].tokens == 8 and len(reports[1].queue_wait_s) == 2
    assert all(w >= 0 for r in reports for w in r.queue_wait_s)
    stats = b.stats()
    assert stats.batch_sizes == {1: 2, 2: 1} and stats.completed == 4 and stats.batches == 3


# ---------------------------------------------------------------- waiting only for announced items
HOUR_MS = 3_600_000   # a wait this long would show up as a timed-out result(), never as a slow pass


def test_expecting_mode_runs_a_lone_item_at_once_despite_a_long_max_wait():
    rec = Recorder()
    b = make(rec, max_batch_records=8, max_wait_ms=HOUR_MS, wait_only_while_expecting=True)
    assert b.submit("a").result(WAIT) == "done:a"
    plain = make(Recorder(), max_batch_records=8, max_wait_ms=HOUR_MS)
    waiting = plain.submit("a")
    with pytest.raises(TimeoutError):
        waiting.result(0.3)            # the plain mode does wait for company: the test above has teeth
    plain.stop(drain=False)
    b.stop()


def held_back_by_an_announcement():
    """A batcher in expecting mode with "a" queued while one more item is announced: "a" is held back."""
    rec = Recorder()
    b = make(rec, max_batch_records=8, max_wait_ms=HOUR_MS, wait_only_while_expecting=True)
    b.expect()
    first = b.submit("a")
    with pytest.raises(TimeoutError):
        first.result(0.3)              # held back: the announced item is still being prepared
    return rec, b, first


def test_expecting_mode_waits_for_an_announced_item_and_batches_it():
    rec, b, first = held_back_by_an_announcement()
    second = b.submit("b", expected=True)
    assert (first.result(WAIT), second.result(WAIT)) == ("done:a", "done:b")
    assert rec.batches == [["a", "b"]]
    b.stop()


def test_expecting_mode_stops_waiting_when_the_announced_item_will_not_come():
    _, b, first = held_back_by_an_announcement()
    b.unexpect()                       # its decoding failed
    assert first.result(WAIT) == "done:a"
    b.stop()


def test_an_expected_item_that_is_refused_still_settles_its_announcement():
    rec = Recorder()
    b = make(rec, max_batch_records=8, max_queue=1, max_wait_ms=HOUR_MS, wait_only_while_expecting=True)
    gate = hold_worker(b, rec)
    x = b.submit("x")                  # fills the queue
    b.expect()
    with pytest.raises(Overloaded):
        b.submit("y", expected=True)   # refused, but no longer announced
    rec.gate_open.set()
    assert gate.result(WAIT) == "done:gate"
    assert x.result(WAIT) == "done:x"  # "x" did not wait an hour for "y"
    b.stop()


class Turns(Recorder):
    """Like Recorder, but an item "long:N" needs N turns: it answers REQUEUE until its last turn. Its first turn
    waits for `first_turn_open`; every turn takes `turn_s` (sleeping, not computing)."""

    def __init__(self, turn_s: float = 0.0):
        super().__init__()
        self.left: dict[str, int] = {}
        self.first_turn = threading.Event()
        self.first_turn_open = threading.Event()
        self.turn_s = turn_s

    def __call__(self, items: list) -> list:
        from omni.serve.batcher import REQUEUE

        results = super().__call__(items)
        for i, item in enumerate(items):
            if isinstance(item, str) and item.startswith("long:"):
                if item not in self.left:
                    self.left[item] = int(item.split(":")[1])
                    self.first_turn.set()
                    assert self.first_turn_open.wait(WAIT)
                time.sleep(self.turn_s)
                self.left[item] -= 1
                if self.left[item] > 0:
                    results[i] = REQUEUE
        return results


def test_a_requeued_item_goes_behind_what_arrived_meanwhile_and_keeps_its_future():
    rec = Turns()
    b = make(rec, max_batch_records=1)
    long = b.submit("long:3")
    assert rec.first_turn.wait(WAIT)
    short = b.submit("short")                                  # arrives during long's first turn
    rec.first_turn_open.set()
    assert long.result(WAIT) == "done:long:3" and short.result(WAIT) == "done:short"
    assert [batch[0] for batch in rec.batches] == ["long:3", "short", "long:3", "long:3"]
    stats = b.stats()
    assert stats.requeued == 2 and stats.completed == 2 and stats.failed == 0
    b.stop()


def test_a_requeued_item_past_its_deadline_is_dropped_at_its_next_turn():
    rec = Turns(turn_s=0.005)
    rec.first_turn_open.set()
    b = make(rec, max_batch_records=1)
    long = b.submit("long:100000", deadline=time.monotonic() + 0.2)
    with pytest.raises(DeadlineExceeded):
        long.result(WAIT)
    assert b.stats().expired == 1 and b.stats().requeued >= 1
    assert b.submit("after").result(WAIT) == "done:after"     # the worker is free
    b.stop()


def test_long_items_finish_oldest_first_instead_of_slowing_together():
    rec = Turns()
    b = make(rec, max_batch_records=1)
    older = b.submit("long:3")
    assert rec.first_turn.wait(WAIT)
    newer = b.submit("long:2")                                  # a second long item arrives meanwhile
    rec.first_turn_open.set()
    assert older.result(WAIT) == "done:long:3" and newer.result(WAIT) == "done:long:2"
    assert [batch[0] for batch in rec.batches] == ["long:3", "long:2", "long:3", "long:3", "long:2"]
    b.stop()


def test_a_steady_stream_of_fresh_work_alternates_with_continuations_and_never_starves_them():
    rec = Turns()
    b = make(rec, max_batch_records=1)
    long = b.submit("long:3")
    assert rec.first_turn.wait(WAIT)
    shorts = [b.submit(f"s{i}") for i in range(4)]             # fresh work keeps queueing during the long turns
    assert b.stats().queue_depth == 4
    rec.first_turn_open.set()
    assert long.result(WAIT) == "done:long:3" and [s.result(WAIT) for s in shorts] == [f"done:s{i}" for i in range(4)]
    assert [batch[0] for batch in rec.batches] == ["long:3", "s0", "long:3", "s1", "long:3", "s2", "s3"]
    b.stop()


def test_stopping_without_drain_fails_waiting_continuations_too():
    rec = Turns()
    b = make(rec, max_batch_records=1)
    long = b.submit("long:5")
    assert rec.first_turn.wait(WAIT)
    gate_after = b.submit("s0")
    stopper = threading.Thread(target=b.stop, kwargs={"drain": False})
    stopper.start()
    rec.first_turn_open.set()
    stopper.join(WAIT)
    with pytest.raises(NotReady):
        long.result(WAIT)
    with pytest.raises(NotReady):
        gate_after.result(WAIT)
