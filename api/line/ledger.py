"""The line's ledger: one JSONL file that says, through crashes, which units were decided and which sinks have them.

Records (one JSON object a line, appended with O_APPEND):
    {"kind": "decided", "unit_id", "result": Result.payload(), "t"}   the unit's fate: decided once, never again
    {"kind": "refused", "unit_id", "result", "t"}                      refused as `overload`: a later trigger may
                                                                       still decide it
    {"kind": "published", "unit_id", "sink", "t"}                      a sink acknowledged the unit's last result
    {"kind": "late", "unit_id", "answers", "x_outcome", "latency_ms", "t"}   an answer after its unit timed out:
                                                                       logged, never published over the timeout
`decided` and `refused` records are fsynced before `record_*` returns (so before any sink is told); `published` and
`late` records are flushed and fsynced in the same way (a lost `published` mark only means the unit is sent again,
which the sinks' idempotency key absorbs). Opening the file reads it back: a torn last line (a crash mid-write) is cut
off; `is_decided(unit_id)` and `unpublished(sinks)` say what a restart must skip and what it must send again.
Memory stays small on a line that runs for months: given the line's sinks (`Ledger(path, sinks)`, or
`keep_results_for(sinks)` later), a decided unit every sink has acknowledged keeps only its id, not its result.
Knows nothing of sources, transports, the model or the event loop (callers run it off the loop: it blocks on fsync).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from api.line.ports import LineError, Result

log = logging.getLogger(__name__)
KINDS = ("decided", "refused", "published", "late")


def result_of(payload: dict[str, Any]) -> Result:
    """A Result back from its payload (as the ledger keeps it)."""
    return Result(line=payload["line"], unit_id=payload["unit_id"], outcome=payload["outcome"],
                  answers=payload.get("answers") or {}, x_outcome=payload.get("x_outcome"),
                  latency_ms=float(payload.get("latency_ms", 0.0)), decided_at=payload.get("decided_at", ""),
                  source=payload.get("source", ""), fallback=payload.get("fallback"), error=payload.get("error"))


@dataclass
class _Entry:
    result: Result | None                           # None once every sink has it (the ledger file still does)
    final: bool                                     # decided (True) or refused (False)
    published: set[str] = field(default_factory=set)


class Ledger:
    def __init__(self, path: str | Path, sinks: list[str] | None = None):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._units: dict[str, _Entry] = {}
        self._sinks: frozenset[str] | None = frozenset(sinks) if sinks is not None else None
        self.counts = dict.fromkeys(KINDS, 0)       # records read back and written, by kind
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._read_back()
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        except OSError as exc:
            raise LineError(f"{self.path}: the ledger cannot be written ({exc.strerror})") from None

    # ---- reading back -------------------------------------------------------------------------------------------
    def _read_back(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise LineError(f"{self.path}: the ledger cannot be read ({exc.strerror})") from None
        end = data.rfind(b"\n") + 1
        if end < len(data):             # a crash mid-append: the torn line is no record
            log.warning("ledger %s: a torn last line (%d bytes) cut off", self.path, len(data) - end)
            with open(self.path, "r+b") as file:
                file.truncate(end)
                os.fsync(file.fileno())
        for number, line in enumerate(data[:end].splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                self._apply(record)
            except (ValueError, KeyError, TypeError) as exc:
                raise LineError(f"{self.path}: line {number} is not a ledger record ({exc}); "
                                "move the file aside to start a new ledger") from None

    def _apply(self, record: dict[str, Any]) -> None:
        kind, unit_id = record["kind"], record["unit_id"]
        if kind in ("decided", "refused"):
            entry = self._units.get(unit_id)
            if entry is None or not entry.final:    # a refusal never replaces a decision
                self._units[unit_id] = _Entry(result_of(record["result"]), kind == "decided")
        elif kind == "published":
            if unit_id in self._units:
                self._units[unit_id].published.add(record["sink"])
                self._forget_if_delivered(self._units[unit_id])
        elif kind != "late":
            raise KeyError(f"kind {kind!r}")
        self.counts[kind] += 1

    def keep_results_for(self, sinks: list[str]) -> None:
        """From now on a decided unit's result is kept in memory only while one of `sinks` lacks it."""
        with self._lock:
            self._sinks = frozenset(sinks)
            for entry in self._units.values():
                self._forget_if_delivered(entry)

    def _forget_if_delivered(self, entry: _Entry) -> None:
        if self._sinks is not None and entry.final and self._sinks <= entry.published:
            entry.result = None

    # ---- questions ----------------------------------------------------------------------------------------------
    def is_decided(self, unit_id: str) -> bool:
        """Whether the unit's fate is final (decided once: never again)."""
        with self._lock:
            entry = self._units.get(unit_id)
            return entry is not None and entry.final

    def decided(self, unit_id: str) -> Result | None:
        """The decided unit's result while a sink still lacks it; None when it is not decided or every sink has it."""
        with self._lock:
            entry = self._units.get(unit_id)
            return entry.result if entry is not None and entry.final else None

    def results_held(self) -> int:
        """Results kept in memory (decided units some sink lacks, and refusals)."""
        with self._lock:
            return sum(entry.result is not None for entry in self._units.values())

    def unpublished(self, sinks: list[str]) -> list[tuple[Result, list[str]]]:
        """Each unit whose last result some of `sinks` have not acknowledged, with those sinks."""
        with self._lock:
            return [(entry.result, missing) for entry in self._units.values() if entry.result is not None
                    and (missing := [sink for sink in sinks if sink not in entry.published])]

    def missing_sinks(self, unit_id: str, sinks: list[str]) -> list[str]:
        with self._lock:
            entry = self._units.get(unit_id)
            return [] if entry is None else [sink for sink in sinks if sink not in entry.published]

    def decided_count(self) -> int:
        with self._lock:
            return sum(entry.final for entry in self._units.values())

    # ---- writing ------------------------------------------------------------------------------------------------
    def record_decided(self, result: Result) -> bool:
        """Append the unit's fate (fsynced). False (nothing written) when it was decided already."""
        with self._lock:
            entry = self._units.get(result.unit_id)
            if entry is not None and entry.final:
                return False
            self._append({"kind": "decided", "unit_id": result.unit_id, "result": result.payload()})
            self._units[result.unit_id] = _Entry(result, True)
            return True

    def record_refused(self, result: Result) -> None:
        with self._lock:
            entry = self._units.get(result.unit_id)
            self._append({"kind": "refused", "unit_id": result.unit_id, "result": result.payload()})
            if entry is None or not entry.final:
                self._units[result.unit_id] = _Entry(result, False)

    def record_published(self, unit_id: str, sink: str) -> None:
        with self._lock:
            self._append({"kind": "published", "unit_id": unit_id, "sink": sink})
            if unit_id in self._units:
                self._units[unit_id].published.add(sink)
                self._forget_if_delivered(self._units[unit_id])

    def record_late(self, unit_id: str, body: dict[str, Any], latency_ms: float) -> None:
        with self._lock:
            self._append({"kind": "late", "unit_id": unit_id, "answers": body.get("answers"),
                          "x_outcome": body.get("x_outcome"), "latency_ms": round(latency_ms, 3)})

    def _append(self, record: dict[str, Any]) -> None:
        line = json.dumps({**record, "t": round(time.time(), 6)}, separators=(",", ":")).encode() + b"\n"
        size = os.fstat(self._fd).st_size
        try:
            written = os.write(self._fd, line)
            if written != len(line):
                raise OSError(f"short write to the ledger ({written} of {len(line)} bytes)")
        except OSError:
            os.ftruncate(self._fd, size)    # a full disk: never leave half a record for the next one to follow
            raise
        os.fsync(self._fd)
        self.counts[record["kind"]] += 1

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
