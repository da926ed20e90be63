"""Appeals: a caller contests a logged decision, a reviewer upholds or reverses it, and the record of both is kept.

`AppealBook(DIR)` keeps `DIR/appeals.jsonl`, one event per line, appended and fsynced before a route answers
(nothing an appeal touches is lost across a restart; a torn last line from a crash is skipped at start):

    {"event": "appealed", "request_id", "at", "by", "reason", "decision": {the logged decision: model, decided_at,
     answers, x_outcome, x_match, evidence (its kept summary, when the log kept one)}}
    {"event": "decided", "request_id", "at", "by", "result": "upheld" | "reversed", "note"}

A decision is appealed once; an appeal is decided once. Appealing a decision appealed already (pending or decided),
or deciding an appeal that is not there or decided already, is an `AppealConflict` / `AppealNotFound` saying which
and since when. State is read once at start and then kept in memory.
Knows nothing of HTTP, the decision log's files, the engine or webhooks: it is handed the logged decision.
"""
from __future__ import annotations

import datetime
import json
import threading
from dataclasses import dataclass
from pathlib import Path

from omni.contract.errors import OmniError
from omni.contract.json_values import JSONObject
from omni.review.history import append_lines, read_jsonl

APPEALS_FILE = "appeals.jsonl"
RESULTS = ("upheld", "reversed")
MAX_REASON_CHARS = 2000


class AppealNotFound(OmniError):
    """No such appeal (or no such logged decision to appeal)."""


class AppealLogDamaged(OmniError):
    """The appealed decision is not among the decision log's readable records, and some of its lines are damaged:
    it may be one of them (an operator's matter, not the caller's)."""


class AppealConflict(OmniError):
    """The decision was appealed already, or the appeal decided already."""


@dataclass
class Appeal:
    request_id: str
    reason: str
    appealed_by: str
    appealed_at: str
    decision: JSONObject
    result: str | None = None          # upheld | reversed; None: pending
    decided_by: str | None = None
    decided_at: str | None = None
    note: str | None = None

    @property
    def state(self) -> str:
        return self.result or "pending"

    def to_wire(self) -> JSONObject:
        return {"request_id": self.request_id, "state": self.state, "reason": self.reason,
                "appealed_by": self.appealed_by, "appealed_at": self.appealed_at, "decision": self.decision,
                "result": self.result, "decided_by": self.decided_by, "decided_at": self.decided_at,
                "note": self.note}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


class AppealBook:
    def __init__(self, directory: str | Path):
        self.path = Path(directory) / APPEALS_FILE
        self._lock = threading.Lock()
        self._appeals: dict[str, Appeal] = {}
        for event in read_jsonl(self.path, _event, "an appeal event"):   # a torn last line: never happened
            self._apply(event)

    def _apply(self, event: JSONObject) -> None:
        request_id = str(event["request_id"])
        if event["event"] == "appealed":
            decision = event.get("decision")
            self._appeals[request_id] = Appeal(request_id, str(event["reason"]), str(event["by"]), str(event["at"]),
                                               decision if isinstance(decision, dict) else {})
        elif event["event"] == "decided" and request_id in self._appeals:
            appeal = self._appeals[request_id]
            appeal.result, appeal.decided_by, appeal.decided_at = str(event["result"]), str(event["by"]), str(event["at"])
            appeal.note = event.get("note") if isinstance(event.get("note"), str) else None

    def _record(self, event: JSONObject) -> None:
        append_lines(self.path, [json.dumps(event, ensure_ascii=False)], sync=True)
        self._apply(event)

    def get(self, request_id: str) -> Appeal | None:
        with self._lock:
            return self._appeals.get(request_id)

    def all(self, state: str | None = None) -> list[Appeal]:
        """Appeals in the order they came in; `state` pending / upheld / reversed keeps those."""
        with self._lock:
            return [a for a in self._appeals.values() if state is None or a.state == state]

    def appeal(self, request_id: str, reason: str, by: str, decision: JSONObject) -> Appeal:
        with self._lock:
            known = self._appeals.get(request_id)
            if known is not None:
                raise AppealConflict(_conflict(known))
            self._record({"event": "appealed", "request_id": request_id, "at": now(), "by": by, "reason": reason,
                          "decision": decision})
            return self._appeals[request_id]

    def decide(self, request_id: str, result: str, by: str, note: str | None = None) -> Appeal:
        if result not in RESULTS:
            raise ValueError(f"result must be one of {', '.join(RESULTS)}, not {result!r}")
        with self._lock:
            appeal = self._appeals.get(request_id)
            if appeal is None:
                raise AppealNotFound(f"no appeal of the decision {request_id!r}")
            if appeal.result is not None:
                raise AppealConflict(_conflict(appeal))
            self._record({"event": "decided", "request_id": request_id, "at": now(), "by": by, "result": result,
                          **({"note": note} if note else {})})
            return appeal


def _conflict(appeal: Appeal) -> str:
    if appeal.result is None:
        return (f"the decision {appeal.request_id!r} was appealed already (by {appeal.appealed_by} at "
                f"{appeal.appealed_at}); its appeal is pending")
    return (f"the appeal of the decision {appeal.request_id!r} was decided already: {appeal.result} by "
            f"{appeal.decided_by} at {appeal.decided_at}")


def _event(value: object) -> JSONObject | None:
    """One line's JSON value as an event, or None: not an event this book wrote."""
    if not isinstance(value, dict) or value.get("event") not in ("appealed", "decided") or not all(
            key in value for key in ("request_id", "by", "at")):
        return None
    if value["event"] == "appealed" and "reason" not in value or value["event"] == "decided" and "result" not in value:
        return None
    return value
