"""The line's heart: every trigger becomes one settled unit — decided, timed out, refused or an error — once.

    source → emit(trigger) → [ledger: decided already? → send again where a sink lacks it]
                           → [a problem → `error`] → [queue full → `overload`] → queue (bounded)
    queue → one of `max_in_flight` workers → decider (engine or server) → settle
    deadline timer (from when the trigger arrived) → `timeout` (the fallback published) → settle
    settle: ledger (fsynced) → each sink's queue (retried with backoff until it acknowledges, then marked in the
            ledger) → the trigger's ack (MQTT's manual acknowledgement)

A unit settles once: whichever of its answer and its deadline comes first wins; an answer after the deadline is
logged in the ledger as `late` and counted, never published over the timeout. A trigger for a unit in flight joins
it (its ack waits for the first one's fate); one for a unit decided before (a restart, a redelivery) is not decided
again. At start the ledger's results that some sink has not acknowledged are sent again (at least once: the unit id
is the idempotency key). A sink that is down holds only its own queue; the others and the decisions go on.
Knows nothing of transports, the model or HTTP: sources, sinks and the decider come in through `ports` and
`deciders`.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from api.line.deciders import DecideFailed, Decider
from api.line.ledger import Ledger
from api.line.ports import DECIDED, ERROR, OVERLOAD, TIMEOUT, Backoff, Result, Sink, Source, Trigger
from api.line.stats import LineStats

log = logging.getLogger(__name__)
DRAIN_SINKS_S = 5.0


@dataclass
class _Unit:
    trigger: Trigger
    received_s: float                                   # monotonic: the deadline counts from here
    acks: list[Any] = field(default_factory=list)
    settled: bool = False
    timer: asyncio.TimerHandle | None = None


class LineRunner:
    def __init__(self, *, line: str, decider: Decider, ledger: Ledger, sources: Sequence[Source],
                 sinks: Sequence[Sink], deadline_ms: int, fallback: str, max_queued_units: int, max_in_flight: int,
                 stats: LineStats | None = None):
        self.line, self.decider, self.ledger = line, decider, ledger
        self.sources, self.sinks = list(sources), list(sinks)
        self.deadline_s, self.fallback = deadline_ms / 1000, fallback
        self.max_queued_units, self.max_in_flight = max_queued_units, max_in_flight
        self.stats = stats or LineStats(line)
        self._open: dict[str, _Unit] = {}
        self._queue: asyncio.Queue[_Unit] = asyncio.Queue()
        self._sink_queues: dict[str, asyncio.Queue[Result]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self.running = False

    # ---- life -----------------------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Run until `stop` is set; then stop taking triggers, let the units in flight settle (up to their deadlines)
        and give the sinks a few seconds to take what is theirs (the ledger keeps the rest for the next start)."""
        names = [sink.name for sink in self.sinks]
        if len(set(names)) != len(names):
            raise ValueError(f"two sinks share a name: {names}")
        for sink in self.sinks:
            self._sink_queues[sink.name] = asyncio.Queue()
            await sink.start()
        await asyncio.to_thread(self.ledger.keep_results_for, names)
        for result, missing in await asyncio.to_thread(self.ledger.unpublished, names):
            self._send(result, missing)
        workers = [asyncio.create_task(self._work(), name=f"line-worker-{i}") for i in range(self.max_in_flight)]
        sinks = [asyncio.create_task(self._deliver(sink), name=f"line-sink-{sink.name}") for sink in self.sinks]
        sources = [asyncio.create_task(self._source(source), name=f"line-source-{source.name}")
                   for source in self.sources]
        self.running = True
        try:
            await stop.wait()
        finally:
            self.running = False
            for task in sources:
                task.cancel()
            await asyncio.gather(*sources, return_exceptions=True)
            await self._settle_open(self.deadline_s + 1.0)
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            await self._drain_sinks(DRAIN_SINKS_S)
            for task in sinks:
                task.cancel()
            await asyncio.gather(*sinks, return_exceptions=True)
            for sink in self.sinks:
                await _quietly(sink.close(), f"closing sink {sink.name}")
            await _quietly(self.decider.close(), "closing the decider")

    async def _source(self, source: Source) -> None:
        backoff = Backoff(base_s=0.5, max_s=30.0)
        while True:
            try:
                await source.run(self.emit)
                return
            except asyncio.CancelledError:
                raise
            except Exception:       # a source's own bug must not stop the line: log it, start the source again
                log.exception("source %s failed; starting it again", source.name)
                await backoff.wait()

    async def _settle_open(self, within_s: float) -> None:
        ends = time.monotonic() + within_s
        while self._open and time.monotonic() < ends:
            await asyncio.sleep(0.02)

    async def _drain_sinks(self, within_s: float) -> None:
        ends = time.monotonic() + within_s
        while any(not queue.empty() for queue in self._sink_queues.values()) and time.monotonic() < ends:
            await asyncio.sleep(0.02)

    # ---- intake -------------------------------------------------------------------------------------------------
    async def emit(self, trigger: Trigger) -> None:
        """A source's hand-in. Returns at once: the unit is queued, joined, refused or settled as an error."""
        now = time.monotonic()
        self.stats.units_in[trigger.source] += 1
        self.stats.source_lag_s[trigger.source] = round(max(0.0, time.time() - trigger.ready_wall_s), 6)
        unit_id = trigger.unit_id
        if self.ledger.is_decided(unit_id):     # decided before (a restart, a redelivery): never again; resent if unacked
            self.stats.duplicate_triggers += 1
            missing = self.ledger.missing_sinks(unit_id, list(self._sink_queues))
            decided = self.ledger.decided(unit_id)
            if missing and decided is not None:
                self._send(decided, missing)
            await _ack(trigger)
            return
        if unit_id in self._open:
            self.stats.duplicate_triggers += 1
            self._open[unit_id].acks.append(trigger.ack)
            return
        unit = _Unit(trigger, now, [trigger.ack])
        if trigger.problem:
            log.warning("unit %s from %s: %s", unit_id, trigger.source, trigger.problem)
            await self._settle(unit, self._result(unit, ERROR, error={
                "status": 422, "detail": {"error_type": "invalid_unit", "message": trigger.problem}}))
            return
        if self._queue.qsize() >= self.max_queued_units:
            log.warning("unit %s refused: %d units already wait for the model (max_queued_units)",
                        unit_id, self._queue.qsize())
            await self._settle(unit, self._result(unit, OVERLOAD, error={
                "status": 429, "detail": {"error_type": "overloaded", "message":
                                          f"{self._queue.qsize()} units wait (max_queued_units "
                                          f"{self.max_queued_units}); the unit was refused"}}), final=False)
            return
        self._open[unit_id] = unit
        unit.timer = asyncio.get_running_loop().call_later(self.deadline_s, self._deadline, unit)
        self._queue.put_nowait(unit)
        self.stats.queue_depth = self._queue.qsize()

    def _deadline(self, unit: _Unit) -> None:
        if not unit.settled:
            self.stats.deadline_misses += 1
            log.warning("unit %s: no answer within its deadline (%g ms): %s published", unit.trigger.unit_id,
                        self.deadline_s * 1000, self.fallback)
            self._spawn(self._settle(unit, self._result(unit, TIMEOUT, fallback=self.fallback)))

    # ---- deciding -----------------------------------------------------------------------------------------------
    async def _work(self) -> None:
        while True:
            unit = await self._queue.get()
            self.stats.queue_depth = self._queue.qsize()
            if unit.settled:            # timed out while it waited
                continue
            remaining_s = unit.received_s + self.deadline_s - time.monotonic()
            self.stats.in_flight += 1
            try:
                body = await self.decider.decide(unit.trigger, max(remaining_s, 0.001))
                result = self._result(unit, _overall(body), body=body)
            except DecideFailed as exc:
                detail = exc.body.get("detail", exc.body) if isinstance(exc.body, dict) else exc.body
                body, result = None, self._result(unit, ERROR, error={"status": exc.status, "detail": detail})
            except asyncio.CancelledError:
                raise
            except Exception as exc:        # the decider's own bug: that unit's error, the line goes on
                log.exception("unit %s: the decider failed", unit.trigger.unit_id)
                body, result = None, self._result(unit, ERROR, error={"status": 500, "detail": {
                    "error_type": "internal_error", "message": f"{type(exc).__name__} (see the line's log)"}})
            finally:
                self.stats.in_flight -= 1
            if _settled(unit):              # the deadline won while it was decided: log the late answer, publish nothing over it
                latency_ms = (time.monotonic() - unit.received_s) * 1000
                log.info("unit %s: late answer after %.0f ms (%s) logged, not published", unit.trigger.unit_id,
                         latency_ms, result.outcome)
                await asyncio.to_thread(self.ledger.record_late, unit.trigger.unit_id,
                                        body or {"error": result.error}, latency_ms)
                self.stats.late_answers += 1        # counted once the ledger has it
                continue
            await self._settle(unit, result)

    def _result(self, unit: _Unit, outcome: str, body: dict[str, Any] | None = None, fallback: str | None = None,
                error: dict[str, Any] | None = None) -> Result:
        return Result(line=self.line, unit_id=unit.trigger.unit_id, outcome=outcome,
                      answers=dict((body or {}).get("answers") or {}), x_outcome=(body or {}).get("x_outcome"),
                      latency_ms=(time.monotonic() - unit.received_s) * 1000,
                      decided_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                      source=unit.trigger.source, fallback=fallback, error=error)

    async def _settle(self, unit: _Unit, result: Result, final: bool = True) -> None:
        if unit.settled:
            return
        unit.settled = True                 # before any await: the deadline and the answer cannot both win
        if unit.timer is not None:
            unit.timer.cancel()
        try:
            if final:
                await asyncio.to_thread(self.ledger.record_decided, result)
            else:
                await asyncio.to_thread(self.ledger.record_refused, result)
        except OSError:     # the ledger cannot take it: nothing is published or acknowledged (redone on restart)
            log.exception("unit %s: the ledger did not take its result; not published", result.unit_id)
            self._open.pop(result.unit_id, None)
            return
        self._open.pop(result.unit_id, None)
        self.stats.observe(result.payload())
        self._send(result, list(self._sink_queues))
        for ack in unit.acks:
            if ack is not None:
                await _quietly(ack(), f"acknowledging unit {result.unit_id}")

    # ---- delivering ---------------------------------------------------------------------------------------------
    def _send(self, result: Result, sinks: list[str]) -> None:
        for name in sinks:
            queue = self._sink_queues.get(name)
            if queue is not None:
                queue.put_nowait(result)
                self.stats.sink_backlog[name] = queue.qsize()

    async def _deliver(self, sink: Sink) -> None:
        queue = self._sink_queues[sink.name]
        backoff = Backoff(base_s=0.2, max_s=10.0)
        while True:
            result = await queue.get()
            while True:
                try:
                    await sink.send(result)
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 — whatever the transport raised, the unit is sent again
                    self.stats.sink_failures[sink.name] += 1
                    log.warning("sink %s: unit %s not delivered (%s: %s); trying again", sink.name, result.unit_id,
                                type(exc).__name__, exc)
                    await backoff.wait()
            backoff.reset()
            self.stats.sink_sent[sink.name] += 1
            self.stats.sink_backlog[sink.name] = queue.qsize()
            try:
                await asyncio.to_thread(self.ledger.record_published, result.unit_id, sink.name)
            except OSError:
                log.exception("sink %s: unit %s delivered, but the ledger did not take the mark (sent again on "
                              "the next start)", sink.name, result.unit_id)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _settled(unit: _Unit) -> bool:
    """Whether the unit settled (read after an await: the deadline may have won meanwhile)."""
    return unit.settled


def _overall(body: dict[str, Any]) -> str:
    outcome = body.get("x_outcome")
    overall = outcome.get("overall") if isinstance(outcome, dict) else None
    return overall if isinstance(overall, str) else DECIDED


async def _ack(trigger: Trigger) -> None:
    if trigger.ack is not None:
        await _quietly(trigger.ack(), f"acknowledging unit {trigger.unit_id}")


async def _quietly(awaitable: Any, what: str) -> None:
    try:
        await awaitable
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("%s failed", what)
