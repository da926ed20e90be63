"""Review queues: decisions to look at again, most uncertain first, and the labels a reviewer gives them.

A queue is a source of decided requests: a batch output (`omni batch … --out OUT.jsonl`: each answered line, its
request read from the batch's input file), the decisions a server kept in its review directory, or (under a policy)
the decisions the policy sent to review, each with its reasons; a reviewer's labels there give the decision its final
outcome, recorded with the labels. Items are ordered
by uncertainty: the lowest confidence first (an item's confidence is its least confident question's top
probability), or nearest to an auto-decision threshold first. Labels go to the one review directory (`ReviewDir`),
keyed by the item, so they are found again after a restart, and an item already labelled can be shown as done.
Sources are named by the operator (flags), never by an HTTP caller: a queue id or item key that is not listed is
KeyError, and no path from a caller is ever opened.
Knows nothing of HTTP, the engine or the model.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from omni.contract.batch_file import read_batch_output
from omni.contract.config import EngineConfig
from omni.contract.json_values import JSONObject, JSONValue
from omni.contract.outcomes import final_outcome
from omni.contract.policy import Policy
from omni.contract.render import render_question
from omni.contract.types import DecisionRequest
from omni.learn.dataset import parse_request_line
from omni.learn.review import ReviewDir, answer_confidence, top_answer

BROWSER_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp", "gif": "image/gif",
                 "bmp": "image/bmp", "wav": "audio/wav", "mp3": "audio/mpeg", "flac": "audio/flac",
                 "ogg": "audio/ogg", "aac": "audio/aac", "m4a": "audio/mp4", "mp4": "video/mp4",
                 "mov": "video/quicktime", "webm": "video/webm", "matroska": "video/x-matroska"}
ORDERS = ("confidence", "threshold")
PREVIEW_CHARS = 160
MAX_FAILURES_SHOWN = 50           # a batch's failed lines listed with its queue (all are counted)


@dataclass(frozen=True)
class Decided:
    """One decided request of a source: its key, request body, where its relative media paths start, answers."""

    key: str
    body: JSONObject
    root: Path
    answers: dict[str, JSONObject]
    route: JSONObject | None = None          # a policy's routing: queue, reasons, x_outcome

    @property
    def confidence(self) -> float:
        return min((answer_confidence(a) for a in self.answers.values()), default=1.0)


class BatchSource:
    """The answered lines of a batch output; requests come from the batch's input file."""

    kind = "batch"

    def __init__(self, out_path: str | Path) -> None:
        self.path = Path(out_path).resolve()
        self.id = "b-" + hashlib.sha1(str(self.path).encode()).hexdigest()[:10]
        self.name = self.path.name

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
        decided: list[Decided] = []
        inputs: dict[Path, list[str]] = {}
        for line, record in sorted(read_batch_output(self.path).items()):
            if "response" not in record:
                continue
            source = (self.path.parent / record["input"]).resolve()
            if source not in inputs:
                inputs[source] = source.read_text(encoding="utf-8").split("\n")   # numbered as `omni batch` does
            body = json.loads(inputs[source][line - 1])
            decided.append(Decided(f"{self.id}-{line}", body, source.parent, record["response"].get("answers", {})))
        return decided


class KeptSource:
    """The decisions a server kept in the review directory: those a policy sent to review (`routed`, kept with their
    route: queue, reasons, outcome) or the others."""

    def __init__(self, review_dir: ReviewDir, routed: bool = False) -> None:
        self.review_dir, self.routed = review_dir, routed
        self.kind = self.id = "policy" if routed else "kept"
        self.name = "to review (policy)" if routed else "kept decisions"

    def records(self) -> list[Decided]:
        decided = []
        for r in self.review_dir.decisions():
            route = r.get("x_route")
            if isinstance(route, dict) is self.routed:
                decided.append(Decided(r["key"], r["request"], self.review_dir.root, r["response"].get("answers", {}),
                                       route if isinstance(route, dict) else None))
        return decided


ReviewSource = BatchSource | KeptSource


class ReviewQueues:
    """The queues a server offers and the review directory their labels go to."""

    def __init__(self, review_dir: ReviewDir, batch_outputs: Sequence[str | Path] = (),
                 config: EngineConfig | None = None, keep_decisions: bool = True,
                 policy: Callable[[], Policy | None] | None = None) -> None:
        """`policy` (the policy in force, read at each label) adds the queue of decisions it sent to review."""
        self.review_dir = review_dir
        self.config = config or EngineConfig()
        self.policy = policy
        sources: list[ReviewSource] = [BatchSource(p) for p in batch_outputs]
        if policy is not None:
            sources.append(KeptSource(review_dir, routed=True))
        if keep_decisions:
            sources.append(KeptSource(review_dir))
        self.sources = {s.id: s for s in sources}

    def queues(self) -> list[JSONObject]:
        """Each queue with its items and how many are reviewed: every question labelled (a partly labelled item is
        not); a batch's queue also says which of its lines failed (they have no item to review)."""
        reviewed = self.review_dir.reviewed()
        out: list[JSONObject] = []
        for source in self.sources.values():
            records = source.records()
            failures = source.failures() if isinstance(source, BatchSource) else []
            out.append({"id": source.id, "kind": source.kind, "name": source.name, "items": len(records),
                        "reviewed": sum(1 for r in records if reviewed.get(r.key, 0) >= len(r.answers)),
                        "failed": len(failures), "failures": failures[:MAX_FAILURES_SHOWN]})
        return out

    def items(self, queue_id: str, order: str = "confidence", threshold: float = 0.9) -> list[JSONObject]:
        """The queue's items, most uncertain first; each with how many of its questions are labelled."""
        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}")
        reviewed = self.review_dir.reviewed()
        records = self._source(queue_id).records()
        rank = (lambda r: r.confidence) if order == "confidence" else (lambda r: abs(r.confidence - threshold))
        return [{"key": r.key, "confidence": round(r.confidence, 6), "questions": len(r.answers),
                 "labelled": reviewed.get(r.key, 0), "preview": _preview(r.body.get("state"))}
                for r in sorted(records, key=rank)]

    def item(self, queue_id: str, key: str) -> JSONObject:
        """Everything the page shows of one item: state, questions, the model's answers, saved labels, media."""
        record, request = self._decided(queue_id, key)
        from preprocess.sniff import sniff

        questions = [{"id": q.id, "type": q.type, "instructions": q.instructions,
                      "options": [{"id": o.id, "description": o.description} for o in q.options],
                      "model": top_answer(record.answers.get(q.id, {})), "wire": render_question(q)}
                     for q in request.questions]
        media = [{"index": i, "slot": m.slot, "kind": m.kind, "type": BROWSER_TYPES.get(sniff(m).container)}
                 for i, m in enumerate(request.media)]
        return {"key": key, "state": request.state, "questions": questions, "answers": record.answers,
                "confidence": record.confidence, "labels": self.review_dir.labels(key), "media": media,
                **({"reasons": record.route.get("reasons", []), "x_outcome": record.route.get("x_outcome")}
                   if record.route is not None else {})}

    def media(self, queue_id: str, key: str, index: int) -> tuple[bytes, str]:
        """The bytes of an item's media item and the type a browser plays it as."""
        from preprocess.sniff import sniff

        _, request = self._decided(queue_id, key)
        if not 0 <= index < len(request.media):
            raise KeyError(f"item {key} has no media item {index}")
        item = request.media[index]
        return item.data, BROWSER_TYPES.get(sniff(item).container, "application/octet-stream")

    def label(self, queue_id: str, key: str, changes: dict[str, str | None]) -> dict[str, str]:
        """Save a reviewer's labels (None clears one); the item's labels after the change."""
        record, request = self._decided(queue_id, key)
        automatic = record.route.get("x_outcome") if record.route is not None else None
        policy = self.policy() if self.policy is not None else None
        finalize = None
        if isinstance(automatic, dict) and policy is not None:
            def finalize(labels: dict[str, bool | int | str]) -> JSONObject:
                return final_outcome(policy, automatic, labels)
        return self.review_dir.save_labels(key, self._source(queue_id).name, request, record.answers, changes,
                                           finalize)

    def _source(self, queue_id: str) -> ReviewSource:
        if queue_id not in self.sources:
            raise KeyError(f"no review queue {queue_id!r}")
        return self.sources[queue_id]

    def _decided(self, queue_id: str, key: str) -> tuple[Decided, DecisionRequest]:
        record = next((r for r in self._source(queue_id).records() if r.key == key), None)
        if record is None:
            raise KeyError(f"no item {key!r} in review queue {queue_id!r}")
        return record, parse_item(record.body, record.root, self.config)


def parse_item(body: JSONObject, root: Path, config: EngineConfig) -> DecisionRequest:
    """A kept or batch request body (media as data URLs or paths relative to `root`) -> the parsed request."""
    return parse_request_line(json.dumps(body), root, config)


def _preview(state: JSONValue) -> str:
    text = state if isinstance(state, str) else json.dumps(state, ensure_ascii=False)
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS - 1] + "…"
