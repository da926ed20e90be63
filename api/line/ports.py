"""What flows through a line: a `Trigger` from a source, a `Result` to the sinks, and the two protocols.

A source turns something the line does (files in a folder, an MQTT message, an OPC UA node change) into `Trigger`s
and hands each to `emit`; it reconnects by itself (`Backoff`) and never stops the line for one bad trigger: a trigger
it cannot make whole carries a `problem` and is published as that unit's error. A sink is told each unit's `Result`
at least once (`send` raises on failure; the runner retries it with backoff and counts the failure), with the unit id
as the idempotency key. Every source and sink has a frozen config made by its `parse(reader, table, where)` and
built with `build(context)`.
Knows nothing of the model, the engine, HTTP, the ledger's format or any one transport.
"""
from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from omni.contract.errors import OmniError

UNIT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
# the line's own outcomes, beside a policy's act / review / pass
TIMEOUT, OVERLOAD, ERROR, DECIDED = "timeout", "overload", "error", "decided"


class LineError(OmniError):
    """A line's configuration or set-up is unusable: the message names the file, the line, the key and the fix."""


def unit_id_problem(unit_id: object) -> str | None:
    """Why `unit_id` cannot name a unit (None when it can): 1-128 of letters, digits and `._:@-`, not starting with
    a punctuation mark (it becomes a topic level, a ledger key and a file name)."""
    if not isinstance(unit_id, str):
        return f"a unit id must be a string, not {type(unit_id).__name__}"
    if not UNIT_ID.match(unit_id):
        return f"unit id {unit_id[:40]!r} must be 1-128 letters, digits or ._:@- (starting with a letter or digit)"
    return None


@dataclass(frozen=True, kw_only=True)
class Trigger:
    """One unit, ready to be decided. `files` are absolute paths already checked to lie under the line's root
    (`api.line.paths.unit_files`). `ready_wall_s` is when the unit became ready by the source's own clock where it
    has one (a file's mtime, a message's timestamp), else when the source saw it: `source lag` is measured from it.
    `ack` (MQTT's manual acknowledgement) is awaited once the unit's fate is in the ledger, so a message the line
    never recorded is delivered again after a crash."""

    unit_id: str
    files: tuple[Path, ...] = ()
    source: str
    ready_wall_s: float
    state: Any = None                        # a state the trigger carries (JSON), else the request template's
    problem: str | None = None               # why this trigger cannot be decided (published as its error)
    ack: Callable[[], Awaitable[None]] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, kw_only=True)
class Result:
    """What the sinks are told about one unit. `outcome`: the policy's overall outcome (act / review / pass), the
    line's `timeout` (with `fallback`: the outcome the line stands in for it) or `overload`, or `error` (the body
    says why: the System One error shape). `answers`: question id → the System One answer (`{"answer", "confidence",
    "probabilities"}`-style objects as the wire has them), empty for the line's own outcomes."""

    line: str
    unit_id: str
    outcome: str
    answers: dict[str, Any]
    x_outcome: dict[str, Any] | None
    latency_ms: float
    decided_at: str                          # ISO 8601 UTC
    source: str
    fallback: str | None = None
    error: dict[str, Any] | None = None      # {"status": 4xx/5xx, "detail": ...} for `error`

    def published_outcome(self) -> str:
        """The outcome a PLC acts on: the fallback for a timeout, else the outcome."""
        return self.fallback if self.outcome == TIMEOUT and self.fallback else self.outcome

    def payload(self) -> dict[str, Any]:
        """The JSON object every sink sends (the unit id is the idempotency key)."""
        body: dict[str, Any] = {"line": self.line, "unit_id": self.unit_id, "outcome": self.outcome,
                                "published_outcome": self.published_outcome(), "answers": self.answers,
                                "x_outcome": self.x_outcome, "latency_ms": round(self.latency_ms, 3),
                                "decided_at": self.decided_at, "source": self.source}
        if self.fallback:
            body["fallback"] = self.fallback
        if self.error:
            body["error"] = self.error
        return body


Emit = Callable[[Trigger], Awaitable[None]]


class Source(Protocol):
    name: str

    async def run(self, emit: Emit) -> None:
        """Hand every ready unit to `emit` until cancelled; reconnect (with `Backoff`) when the other side goes."""
        ...

    def stats(self) -> dict[str, float]:
        """Counters and gauges for /metrics and --status (e.g. connected 0/1, reconnects, triggers, bad_triggers)."""
        ...


class Sink(Protocol):
    name: str

    async def start(self) -> None:
        """Connect (or begin connecting: a sink that is down at start is retried like one that fails later)."""
        ...

    async def send(self, result: Result) -> None:
        """Deliver one result; return only once the other side has it (MQTT: the PUBACK), else raise."""
        ...

    async def close(self) -> None:
        ...

    def stats(self) -> dict[str, float]:
        ...


@dataclass
class Backoff:
    """Capped exponential backoff with full jitter: `await backoff.wait()` after a failure, `reset()` on success."""

    base_s: float = 0.2
    max_s: float = 10.0
    tries: int = 0

    def next_delay_s(self) -> float:
        delay = min(self.max_s, self.base_s * 2 ** min(self.tries, 30))
        self.tries += 1
        return random.uniform(delay / 2, delay)

    async def wait(self) -> None:
        await asyncio.sleep(self.next_delay_s())

    def reset(self) -> None:
        self.tries = 0
