"""Where a review queue's decided requests come from: a batch output (`BatchSource`: each answered line, its request
read from the batch's input file) or the decisions a server kept in its review directory (`KeptSource`: those a
policy sent to review, with their route, or the others). Each is a list of `Decided`.

Sources are named by the operator (flags), never by an HTTP caller. Knows nothing of HTTP, reviewers, filters, the
engine or the model.
"""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from omni.contract.answers import answer_confidence
from omni.contract.batch_file import read_batch_output
from omni.contract.json_values import JSONObject, JSONValue
from omni.review.directory import ReviewDir


@dataclass(frozen=True)
class Decided:
    """One decided request of a source: its key, request body, where its relative media paths start, answers."""

    key: str
    body: JSONObject
    root: Path
    answers: dict[str, JSONObject]
    route: JSONObject | None = None          # a policy's routing: queue, reasons, x_outcome
    outcome: str | None = None               # the policy's overall outcome (act, review, pass), when one decided
    model: str | None = None                 # the model that answered (the base's name or an adapter's)
    evidence: JSONObject | None = None       # x_evidence, when asked or computed for a decision routed to review

    @cached_property
    def confidence(self) -> float:
        return min((answer_confidence(a) for a in self.answers.values()), default=1.0)

    @property
    def questions(self) -> list[str]:
        return list(self.answers)


def _name(model: JSONValue) -> str | None:
    return model if isinstance(model, str) else None


def _overall(*outcomes: JSONValue) -> str | None:
    """The overall outcome of the first `x_outcome` given."""
    for outcome in outcomes:
        if isinstance(outcome, dict) and isinstance(outcome.get("overall"), str):
            return outcome["overall"]
    return None


class BatchSource:
    """The answered lines of a batch output; requests come from the batch's input file. Read again only when the
    output file changed."""

    kind = "batch"

    def __init__(self, out_path: str | Path) -> None:
        self.path = Path(out_path).resolve()
        self.id = "b-" + hashlib.sha1(str(self.path).encode()).hexdigest()[:10]
        self.name = self.path.name
        self._read: tuple[tuple[int, int, int], list[Decided]] | None = None

    def failures(self) -> list[JSONObject]:
        """The batch's lines that got an error record: line, status and what the error says (first issue)."""
        failed: list[JSONObject] = []
        for line, record in sorted(read_batch_output(self.path).items()):
            error = record.get("error")
            if "response" in record or not isinstance(error, dict):
                continue
            detail = error.get("body", {}).get("detail") if isinstance(error.get("body"), dict) else None
            if isinstance(detail, list) and detail and isinstance(detail[0], dict):
                message = str(detail[0].get("msg", ""))
            elif isinstance(detail, dict):
                message = str(detail.get("message", ""))
            else:
                message = ""
            failed.append({"line": line, "status": error.get("status"), "message": message[:300]})
        return failed

    def records(self) -> list[Decided]:
        try:
            stat = self.path.stat()
            version = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        except FileNotFoundError:
            version = (0, 0, 0)
        if self._read is not None and self._read[0] == version:
            return self._read[1]
        decided: list[Decided] = []
        inputs: dict[Path, list[str]] = {}
        for line, record in sorted(read_batch_output(self.path).items()):
            if "response" not in record:
                continue
            source = (self.path.parent / record["input"]).resolve()
            if source not in inputs:
                inputs[source] = source.read_text(encoding="utf-8").split("\n")   # numbered as `omni batch` does
            body = json.loads(inputs[source][line - 1])
            response = record["response"]
            decided.append(Decided(f"{self.id}-{line}", body, source.parent, response.get("answers", {}),
                                   outcome=_overall(response.get("x_outcome")), model=_name(response.get("model"))))
        self._read = (version, decided)
        return decided


class KeptSource:
    """The decisions a server kept in the review directory: those a policy sent to review (`routed`, kept with their
    route: queue, reasons, outcome), those its QA draw chose (`qa`: route queue "qa", the draw) or the others."""

    def __init__(self, review_dir: ReviewDir, routed: bool = False, qa: bool = False) -> None:
        self.review_dir, self.routed, self.qa = review_dir, routed or qa, qa
        self.kind = self.id = "qa" if qa else "policy" if routed else "kept"
        self.name = ("QA samples (automatic decisions)" if qa else "to review (policy)" if routed
                     else "kept decisions")
        self._decided: list[Decided] = []          # built from the kept decisions read so far
        self._last: JSONObject | None = None        # the last kept decision read (the file is appended to)
        self._count = 0
        self._lock = threading.Lock()

    def records(self) -> list[Decided]:
        """The kept decisions of this source; only those kept since the last call are read."""
        with self._lock:
            kept = self.review_dir.decisions()
            if len(kept) < self._count or self._count and kept[self._count - 1] is not self._last:
                self._decided, self._count = [], 0                       # another file: read it anew
            for r in kept[self._count:]:
                route = r.get("x_route")
                queue = route.get("queue") if isinstance(route, dict) else None
                if isinstance(route, dict) is self.routed and (not self.routed or self.qa == (queue == "qa")):
                    route = route if isinstance(route, dict) else None
                    self._decided.append(Decided(r["key"], r["request"], self.review_dir.root,
                                                 r["response"].get("answers", {}), route,
                                                 _overall(route.get("x_outcome") if route else None,
                                                          r["response"].get("x_outcome")),
                                                 _name(r["response"].get("model")),
                                                 _evidence(route, r["response"])))
            self._count, self._last = len(kept), kept[-1] if kept else None
            return list(self._decided)


ReviewSource = BatchSource | KeptSource


def _evidence(route: JSONObject | None, response: JSONObject) -> JSONObject | None:
    """A kept decision's evidence: computed for its review route, else the response's (when the caller asked)."""
    found = (route or {}).get("evidence") or response.get("x_evidence")
    return found if isinstance(found, dict) else None
