"""LineRunner: each unit settles once (decided, timed out, refused, an error), the ledger before the sinks, the ack
after the ledger, late answers logged not published, a decided unit never decided again, failing sinks retried
without holding the others, and what the ledger holds unpublished sent again at start. A scripted decider stands
in for the model (the engine decider has its own test with the tiny checkpoint)."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from api.line.deciders import DecideFailed
from api.line.ledger import Ledger
from api.line.ports import LineError, Result, Trigger
from api.line.runner import LineRunner
from tests.threads import asyncio_run

ANSWER = {"answers": {"ok": {"answer": True, "confidence": 0.9}}, "x_outcome": {"overall": "pass"}}


class ScriptedDecider:
    name = "scripted"

    def __init__(self, delay_s: float = 0.0, fail: dict[str, DecideFailed] | None = None):
        self.delay_s, self.fail, self.calls = delay_s, fail or {}, []
        self.gate: asyncio.Event | None = None

    async def decide(self, trigger: Trigger, deadline_s: float) -> dict[str, Any]:
        self.calls.append((trigger.unit_id, deadline_s))
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(self.delay_s)
        if trigger.unit_id in self.fail:
            raise self.fail[trigger.unit_id]
        return ANSWER

    async def close(self) -> None:
        pass


class ListSource:
    def __init__(self, triggers: list[Trigger]):
        self.name, self.triggers = "list", triggers

    async def run(self, emit) -> None:
        for trigger in self.triggers:
            await emit(trigger)
        await asyncio.Event().wait()

    def stats(self) -> dict[str, float]:
        return {"connected": 1}


class ListSink:
    def __init__(self, name: str = "list", failures: int = 0, ledger: Ledger | None = None):
        self.name, self.failures, self.ledger = name, failures, ledger
        self.sent: list[Result] = []
        self.decided_before_send: list[bool] = []

    async def start(self) -> None:
        pass

    async def send(self, result: Result) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("sink down")
        if self.ledger is not None:
            self.decided_before_send.append(self.ledger.decided(result.unit_id) is not None
                                            or result.outcome == "overload")
        self.sent.append(result)

    async def close(self) -> None:
        pass

    def stats(self) -> dict[str, float]:
        return {"connected": 1}


def trigger(unit_id: str, acks: list[str] | None = None, problem: str | None = None) -> Trigger:
    async def ack() -> None:
        if acks is not None:
            acks.append(unit_id)
    return Trigger(unit_id=unit_id, source="list", ready_wall_s=time.time(), problem=problem, ack=ack)


def run_line(tmp_path: Path, triggers: list[Trigger], decider: Any, sinks: list[Any] | None = None,
             until: Any = None, deadline_ms: int = 2000, max_queued_units: int = 64, max_in_flight: int = 2,
             ledger: Ledger | None = None) -> LineRunner:
    ledger = ledger or Ledger(tmp_path / "ledger.jsonl")
    runner = LineRunner(line="l1", decider=decider, ledger=ledger, sources=[ListSource(triggers)],
                        sinks=sinks if sinks is not None else [ListSink(ledger=ledger)], deadline_ms=deadline_ms,
                        fallback="review", max_queued_units=max_queued_units, max_in_flight=max_in_flight)

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(runner.run(stop))
        ends = time.monotonic() + 20
        while not until(runner) and time.monotonic() < ends:
            await asyncio.sleep(0.01)
        stop.set()
        await task
    asyncio_run(main())
    return runner


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def sent(runner: LineRunner, i: int = 0) -> list[Result]:
    return runner.sinks[i].sent      # type: ignore[attr-defined]


def test_every_unit_is_decided_once_ledgered_before_the_sink_and_acked_after(tmp_path):
    acks: list[str] = []
    triggers = [trigger(f"u{i}", acks) for i in range(20)]
    runner = run_line(tmp_path, triggers, ScriptedDecider(), until=lambda r: len(sent(r)) == 20)
    assert sorted(r.unit_id for r in sent(runner)) == sorted(f"u{i}" for i in range(20))
    assert {r.outcome for r in sent(runner)} == {"pass"} and sent(runner)[0].answers == ANSWER["answers"]
    assert all(runner.sinks[0].decided_before_send)       # type: ignore[attr-defined]
    assert sorted(acks) == sorted(f"u{i}" for i in range(20))
    decided = [r for r in records(tmp_path / "ledger.jsonl") if r["kind"] == "decided"]
    assert sorted(r["unit_id"] for r in decided) == sorted(f"u{i}" for i in range(20))
    published = [r for r in records(tmp_path / "ledger.jsonl") if r["kind"] == "published"]
    assert len(published) == 20 and {r["sink"] for r in published} == {"list"}
    assert runner.stats.outcomes["pass"] == 20 and runner.stats.units_in["list"] == 20


def test_a_unit_past_its_deadline_publishes_the_fallback_and_its_late_answer_is_logged_not_published(tmp_path):
    decider = ScriptedDecider(delay_s=0.4)
    runner = run_line(tmp_path, [trigger("slow")], decider, deadline_ms=100,
                      until=lambda r: r.stats.late_answers == 1)
    [result] = sent(runner)
    assert result.outcome == "timeout" and result.published_outcome() == "review" and result.answers == {}
    kinds = [r["kind"] for r in records(tmp_path / "ledger.jsonl")]
    assert kinds.count("decided") == 1 and kinds.count("late") == 1
    late = next(r for r in records(tmp_path / "ledger.jsonl") if r["kind"] == "late")
    assert late["answers"] == ANSWER["answers"] and late["latency_ms"] >= 400
    assert 95 <= result.latency_ms < late["latency_ms"]      # published at the deadline, before the answer came
    assert runner.stats.deadline_misses == 1
    assert 0 < decider.calls[0][1] <= 0.1          # the decider is told what is left of the deadline


def test_a_unit_that_waits_past_its_deadline_in_the_queue_times_out_at_the_deadline(tmp_path):
    decider = ScriptedDecider(delay_s=0.3)
    runner = run_line(tmp_path, [trigger(f"q{i}") for i in range(4)], decider, deadline_ms=150, max_in_flight=1,
                      until=lambda r: len(sent(r)) == 4 and r.stats.late_answers >= 1)
    assert [r.outcome for r in sent(runner)] == ["timeout"] * 4
    late = next(r for r in records(tmp_path / "ledger.jsonl") if r["kind"] == "late")
    assert all(r.latency_ms < late["latency_ms"] for r in sent(runner))      # none waited for the model
    assert len(decider.calls) == 1                  # the three queued past their deadline were never asked


def test_a_source_faster_than_the_model_is_refused_visibly_as_overload(tmp_path):
    decider = ScriptedDecider()
    decider.gate = asyncio.Event()                  # holds the model: nothing finishes
    acks: list[str] = []
    runner = run_line(tmp_path, [trigger(f"o{i}", acks) for i in range(10)], decider, max_queued_units=3,
                      max_in_flight=1, deadline_ms=300, until=lambda r: len(sent(r)) == 10)
    outcomes = [r.outcome for r in sent(runner)]
    # one unit taken by the worker, three queued, six refused at once; the four held ones time out
    assert outcomes.count("overload") == 6 and outcomes.count("timeout") == 4
    assert runner.stats.outcomes["overload"] == 6
    refused = [r for r in records(tmp_path / "ledger.jsonl") if r["kind"] == "refused"]
    assert len(refused) == 6 and sorted(acks) == sorted(f"o{i}" for i in range(10))


def test_a_trigger_with_a_problem_and_a_failed_request_are_published_as_that_units_error(tmp_path):
    fail = {"bad": DecideFailed(415, {"detail": {"error_type": "unsupported_media", "message": "x.gif: no"}})}
    runner = run_line(tmp_path, [trigger("broken", problem="files[0]: ../x outside the root"), trigger("bad"),
                                 trigger("good")], ScriptedDecider(fail=fail), until=lambda r: len(sent(r)) == 3)
    by_id = {r.unit_id: r for r in sent(runner)}
    assert by_id["broken"].outcome == "error" and by_id["broken"].error["status"] == 422
    assert "outside the root" in by_id["broken"].error["detail"]["message"]
    assert by_id["bad"].outcome == "error" and by_id["bad"].error == {
        "status": 415, "detail": {"error_type": "unsupported_media", "message": "x.gif: no"}}
    assert by_id["good"].outcome == "pass"


def test_a_decided_unit_is_never_decided_again_and_a_trigger_in_flight_joins_the_first(tmp_path):
    acks: list[str] = []
    decider = ScriptedDecider(delay_s=0.1)
    runner = run_line(tmp_path, [trigger("a", acks), trigger("a", acks)], decider,
                      until=lambda r: len(sent(r)) == 1 and len(acks) == 2)
    assert len(decider.calls) == 1 and runner.stats.duplicate_triggers == 1
    ledger = Ledger(tmp_path / "ledger.jsonl")          # a restart: the same unit comes again
    decider2, acks2 = ScriptedDecider(), []
    runner2 = run_line(tmp_path, [trigger("a", acks2)], decider2, ledger=ledger, until=lambda r: acks2 == ["a"])
    assert decider2.calls == [] and sent(runner2) == []      # every sink has it: nothing to send again
    assert [r["kind"] for r in records(tmp_path / "ledger.jsonl")].count("decided") == 1


def test_what_a_sink_has_not_acknowledged_is_sent_again_after_a_restart(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl")
    down = ListSink("mqtt", failures=10**6)
    run_line(tmp_path, [trigger("x"), trigger("y")], ScriptedDecider(), sinks=[ListSink("file"), down],
             ledger=ledger, until=lambda r: len(sent(r)) == 2)
    ledger.close()
    ledger2 = Ledger(tmp_path / "ledger.jsonl")
    assert [r.unit_id for r, missing in ledger2.unpublished(["file", "mqtt"])] == ["x", "y"]
    runner = run_line(tmp_path, [], ScriptedDecider(), sinks=[ListSink("file"), ListSink("mqtt")], ledger=ledger2,
                      until=lambda r: len(sent(r, 1)) == 2)
    assert sent(runner, 0) == [] and sorted(r.unit_id for r in sent(runner, 1)) == ["x", "y"]
    assert ledger2.unpublished(["file", "mqtt"]) == []


def test_a_failing_sink_is_retried_and_does_not_hold_the_others(tmp_path):
    flaky, steady = ListSink("flaky", failures=3), ListSink("steady")
    runner = run_line(tmp_path, [trigger(f"s{i}") for i in range(5)], ScriptedDecider(), sinks=[flaky, steady],
                      until=lambda r: len(flaky.sent) == 5)
    assert len(steady.sent) == 5 and runner.stats.sink_failures["flaky"] == 3
    assert runner.stats.sink_sent["flaky"] == 5


def test_the_ledger_cuts_a_torn_last_line_and_keeps_every_decision(tmp_path):
    path = tmp_path / "ledger.jsonl"
    run_line(tmp_path, [trigger("t1"), trigger("t2")], ScriptedDecider(), until=lambda r: len(sent(r)) == 2)
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"kind":"decided","unit_id":"t3","res')      # killed mid-write
    ledger = Ledger(path)
    assert ledger.decided("t1") is not None and ledger.decided("t3") is None
    assert path.read_bytes() == whole
    assert ledger.record_decided(ledger.decided("t1")) is False       # decided once, never twice


def test_a_ledger_line_that_is_not_a_record_is_a_clear_error(tmp_path):
    path = tmp_path / "ledger.jsonl"
    path.write_text('{"kind":"decided"}\n')
    with pytest.raises(LineError, match="line 1 is not a ledger record") as caught:
        Ledger(path)
    assert str(path) in str(caught.value)


def test_a_result_every_sink_has_is_not_held_in_memory_and_a_new_sink_still_gets_it(tmp_path):
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path, sinks=["a", "b"])
    for unit_id in ("u1", "u2"):
        ledger.record_decided(Result(line="l", unit_id=unit_id, outcome="pass", answers={"q": {"answer": True}},
                                     x_outcome={"overall": "pass"}, latency_ms=1.0, decided_at="t", source="s"))
    ledger.record_published("u1", "a")
    assert ledger.results_held() == 2 and ledger.decided("u1") is not None
    ledger.record_published("u1", "b")                       # every sink has u1: only its id stays
    assert ledger.results_held() == 1 and ledger.decided("u1") is None and ledger.is_decided("u1")
    assert ledger.missing_sinks("u1", ["a", "b"]) == [] and [r.unit_id for r, _ in ledger.unpublished(["a", "b"])] \
        == ["u2"]
    ledger.close()
    again = Ledger(path, sinks=["a", "b"])                   # read back: the same, compacted as it reads
    assert again.results_held() == 1 and again.is_decided("u1") and again.decided_count() == 2
    again.close()
    wider = Ledger(path)                                     # a line with a new sink "c": u1 is sent to it again
    wider.keep_results_for(["a", "b", "c"])
    assert sorted((r.unit_id, missing) for r, missing in wider.unpublished(["a", "b", "c"])) == \
        [("u1", ["c"]), ("u2", ["a", "b", "c"])]
    wider.close()
