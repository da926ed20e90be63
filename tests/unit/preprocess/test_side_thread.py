"""SideThread: ordered jobs run on the helper in order; shared jobs are taken by the caller when more than `backlog`
wait and at `finish`; the first error reaches the caller and stops the jobs after it; `close` drops what waits and
never leaves its thread behind (issue 24)."""
from __future__ import annotations

import threading
import time

import pytest

from preprocess.side_thread import SideThread


def test_ordered_jobs_run_on_the_helper_in_the_order_given():
    side = SideThread()
    seen: list[tuple[int, str]] = []
    try:
        for index in range(50):
            side.submit(lambda index=index: seen.append((index, threading.current_thread().name)))
        side.finish()
    finally:
        side.close()
    assert [index for index, _ in seen] == list(range(50))
    assert {name for _, name in seen} == {"omni-video"}


def test_the_caller_takes_shared_jobs_when_the_helper_is_behind():
    side = SideThread(backlog=2)
    gate = threading.Event()
    ran_on: dict[int, str] = {}
    try:
        side.submit(gate.wait)                      # the helper is stuck on an ordered job
        for index in range(6):
            side.submit(lambda index=index: ran_on.__setitem__(index, threading.current_thread().name), shared=True)
        # more than 2 shared jobs may never wait: the caller ran the oldest ones itself, the newest 2 still wait
        assert sorted(ran_on) == [0, 1, 2, 3] and set(ran_on.values()) == {threading.current_thread().name}
        gate.set()
        side.finish()
    finally:
        side.close()
    assert sorted(ran_on) == list(range(6)) and side.ran_on_caller >= 4


def test_finish_has_the_caller_take_what_still_waits():
    side = SideThread(backlog=10)
    gate = threading.Event()
    names: list[str] = []
    try:
        side.submit(gate.wait)
        for _ in range(5):
            side.submit(lambda: names.append(threading.current_thread().name), shared=True)
        threading.Timer(0.2, gate.set).start()
        side.finish()                               # takes the 5 shared jobs while the helper waits at the gate
    finally:
        side.close()
    assert names == [threading.current_thread().name] * 5


def test_an_error_on_the_helper_reaches_the_caller_and_stops_the_jobs_after_it():
    side = SideThread()
    after: list[int] = []
    try:
        side.submit(lambda: (_ for _ in ()).throw(ValueError("bad packet")))
        side.submit(lambda: after.append(1))
        with pytest.raises(ValueError, match="bad packet"):
            side.finish()
        with pytest.raises(ValueError, match="bad packet"):
            side.submit(lambda: after.append(2), shared=True)
    finally:
        side.close()
    assert after == []


def test_an_error_in_a_shared_job_run_by_the_caller_is_raised_there():
    side = SideThread(backlog=0)
    gate = threading.Event()
    try:
        side.submit(gate.wait)

        def boom() -> None:
            raise RuntimeError("scaler failed")

        with pytest.raises(RuntimeError, match="scaler failed"):
            side.submit(boom, shared=True)          # backlog 0: the caller runs it at once
    finally:
        gate.set()
        side.close()


def test_close_drops_waiting_jobs_waits_for_the_running_one_and_ends_the_thread():
    side = SideThread()
    started, ran = threading.Event(), []

    def slow() -> None:
        started.set()
        time.sleep(0.1)
        ran.append("slow")

    side.submit(slow)
    for _ in range(3):
        side.submit(lambda: ran.append("dropped"))
    started.wait(5)
    side.close()
    assert ran == ["slow"] and not side._thread.is_alive()
