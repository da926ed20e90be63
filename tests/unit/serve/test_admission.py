"""PrefillBacklog: long prefills are admitted while they can finish in time, refused (Overloaded) when not.

A fake clock replaces time.monotonic, so the rates are exact and nothing depends on this machine's speed.
"""
from __future__ import annotations

import pytest

from omni.contract.errors import Overloaded
from omni.serve import admission
from omni.serve.admission import PrefillBacklog

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(admission.time, "monotonic", c)
    return c


def run_chunks(backlog: PrefillBacklog, clock: Clock, key, tokens: int, chunk: int, s_per_token: float,
               total: int | None = None) -> None:
    """Run `tokens` of `key`'s prefix (of `total`, default all of it) in chunks of `chunk`, `s_per_token` each."""
    left = total if total is not None else tokens
    end = left - tokens
    while left > end:
        step = min(chunk, left - end)
        clock.now += step * s_per_token
        left -= step
        backlog.chunk_done(key, left, step)


def test_everything_is_admitted_before_anything_was_measured(clock):
    backlog = PrefillBacklog()
    for key in range(5):
        backlog.admit(key, 64_000, seconds_left=1.0)
    assert len(backlog) == 5 and backlog.seconds_per_token() is None


def test_the_rate_is_wall_time_between_chunks_per_token(clock):
    backlog = PrefillBacklog()
    backlog.admit("a", 4096, seconds_left=60)
    run_chunks(backlog, clock, "a", 4096, 1024, s_per_token=0.001)
    assert backlog.seconds_per_token() == pytest.approx(0.001)


def test_a_long_request_that_cannot_finish_behind_the_backlog_is_refused_with_a_retry_after(clock):
    backlog = PrefillBacklog()
    backlog.admit("a", 40_000, seconds_left=60)
    run_chunks(backlog, clock, "a", 10_000, 1000, s_per_token=0.0005, total=40_000)   # 30,000 tokens left: ~15 s ahead
    backlog.admit("b", 40_000, seconds_left=60)          # (30k + 40k) x 0.5 ms x 1.5 = 52.5 s <= 60 s: admitted
    with pytest.raises(Overloaded) as refused:            # (30k + 40k + 40k) x 0.5 ms x 1.5 = 82.5 s > 60 s
        backlog.admit("c", 40_000, seconds_left=60)
    assert refused.value.retry_after_s == pytest.approx(35.0)           # the 70k tokens ahead at 0.5 ms
    assert "would not finish within its 60 s deadline" in str(refused.value)
    assert len(backlog) == 2 and backlog.refused == 1
    backlog.admit("short-deadline-free", 40_000, seconds_left=120)       # with more time it fits


def test_finishing_frees_the_backlog_and_an_empty_backlog_admits_anything(clock):
    backlog = PrefillBacklog()
    backlog.admit("a", 40_000, seconds_left=60)
    run_chunks(backlog, clock, "a", 2000, 1000, s_per_token=0.01, total=40_000)     # slow: 380 s ahead
    with pytest.raises(Overloaded):
        backlog.admit("b", 1000, seconds_left=60)
    backlog.finish("a")                                   # expired, cancelled or answered
    backlog.admit("b", 40_000, seconds_left=1)           # nothing ahead: it runs now, whatever it costs
    assert len(backlog) == 1


def test_idle_time_between_long_requests_is_not_counted(clock):
    backlog = PrefillBacklog()
    backlog.admit("a", 2048, seconds_left=60)
    run_chunks(backlog, clock, "a", 2048, 1024, s_per_token=0.001)
    backlog.finish("a")
    clock.now += 3600                                     # an idle hour
    backlog.admit("b", 2048, seconds_left=60)
    run_chunks(backlog, clock, "b", 2048, 1024, s_per_token=0.001)
    assert backlog.seconds_per_token() == pytest.approx(0.001)


def test_chunks_of_requests_unknown_to_the_backlog_change_nothing(clock):
    backlog = PrefillBacklog()
    backlog.chunk_done("never-admitted", 0, 1024)
    backlog.finish("never-admitted")
    assert backlog.seconds_per_token() is None and len(backlog) == 0
