"""Review directories: the labelled dataset a review produces, the media it names, and the decisions kept for review.

A review directory holds
- `labels.jsonl`: one System One request per line with the reviewer's `labels`, in exactly the dataset format
  `omni eval`, `omni calibrate` and `omni finetune` read (`omni.learn.dataset`), plus `x_review` (the item's key,
  where it came from, the model's answers, which labels correct them). It is rewritten whole (atomically) on every
  change, so a review in progress survives a crash or a restart;
- `media/`: the media those lines name, content-addressed (`<sha256>.<container>`), paths relative to the directory;
- `decisions.jsonl`: decisions a server keeps for review (`omni serve --review-dir`): the request in the same form,
  the System One response and the decision's audit record (`omni.contract.audit`), one per line, appended (the same
  request answered the same way is kept once); a
  decision a policy sent to review also carries `x_route` (its queue, the reasons: which question, its confidence
  and bar, and its `x_outcome`), and its labels line records the final outcome once a reviewer labels it.
Knows nothing of HTTP, the engine or the model: it sees parsed requests, response JSON and files.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from omni.contract.json_values import JSONObject, JSONValue
from omni.contract.render import render_request
from omni.contract.types import DecisionRequest, Question
from preprocess.item import MediaItem

REVIEW_DATASET_FILE = "labels.jsonl"
REVIEW_MEDIA_DIR = "media"
REVIEW_DECISIONS_FILE = "decisions.jsonl"


def dataset_path(path: str | Path) -> Path:
    """A dataset file as given, or the labelled dataset inside a review directory."""
    path = Path(path)
    return path / REVIEW_DATASET_FILE if path.is_dir() else path


# ------------------------------------------------------------------------------------------------ answers
def top_answer(answer: JSONObject) -> str | None:
    """The model's answer to one question as a label id (noul "true"/"false", choice id, score level "k")."""
    if answer.get("type") == "noul" and isinstance(answer.get("noul"), (int, float)):
        return "true" if answer["noul"] >= 0.5 else "false"
    probabilities = answer.get("probabilities")
    if isinstance(probabilities, dict) and probabilities:
        return max(probabilities, key=lambda option: probabilities[option])
    return None


def answer_confidence(answer: JSONObject) -> float:
    """The probability of the model's top answer to one question."""
    if answer.get("type") == "noul" and isinstance(answer.get("noul"), (int, float)):
        return max(answer["noul"], 1.0 - answer["noul"])
    probabilities = answer.get("probabilities")
    return max(probabilities.values()) if isinstance(probabilities, dict) and probabilities else 1.0


def label_value(question: Question, label: str) -> bool | int | str:
    """A label id as the dataset writes it: noul true/false, choice id, score level index."""
    if question.type == "noul":
        if label not in ("true", "false"):
            raise ValueError(f"{label!r} is not a noul answer (true or false)")
        return label == "true"
    ids = [o.id for o in question.options]
    if label not in ids:
        raise ValueError(f"{label!r} is not an answer of {question.id!r} ({', '.join(ids)})")
    return int(label) if question.type == "score" else label


def label_id(value: JSONValue) -> str:
    """A dataset label back to its id (true -> "true", 2 -> "2")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# ------------------------------------------------------------------------------------------------ the directory
class ReviewDir:
    """One review directory. Thread-safe; every write is atomic (a temporary file renamed over the old one)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / REVIEW_MEDIA_DIR).mkdir(exist_ok=True)
        self._lock = threading.Lock()
        self._lines = self._read_labels()          # item key -> dataset line
        self._kept: dict[str, str] | None = None   # digest of a kept decision's request and answers -> its key

    @property
    def labels_file(self) -> Path:
        return self.root / REVIEW_DATASET_FILE

    @property
    def decisions_file(self) -> Path:
        return self.root / REVIEW_DECISIONS_FILE

    def labels(self, key: str) -> dict[str, str]:
        """The saved labels of an item, as label ids."""
        with self._lock:
            line = self._lines.get(key)
            return {q: label_id(v) for q, v in line["labels"].items()} if line else {}

    def reviewed(self) -> dict[str, int]:
        """Item key -> how many of its questions carry a label."""
        with self._lock:
            return {key: len(line["labels"]) for key, line in self._lines.items()}

    def save_labels(self, key: str, source: str, request: DecisionRequest, answers: dict[str, JSONObject],
                    changes: dict[str, str | None],
                    finalize: Callable[[dict[str, bool | int | str]], JSONObject | None] | None = None,
                    ) -> dict[str, str]:
        """Set (label id) or clear (None) labels of the item `key`; the dataset line is rewritten at once.
        `finalize(labels)` gives the decision's final outcome under its policy, recorded with the labels
        (`x_review.final_outcome`). Returns the item's labels. ValueError for an unknown question or answer."""
        questions = {q.id: q for q in request.questions}
        values: dict[str, bool | int | str | None] = {}
        for qid, label in changes.items():
            if qid not in questions:
                raise ValueError(f"{qid!r} is not a question of this item ({', '.join(questions)})")
            values[qid] = None if label is None else label_value(questions[qid], label)
        entries = [self.store_media(item) for item in request.media]
        with self._lock:
            line = self._lines.get(key) or {**render_request(request, entries), "labels": {}}
            labels = {q: v for q, v in {**line["labels"], **values}.items() if v is not None}
            model = {qid: top_answer(a) for qid, a in answers.items() if qid in questions}
            line.update(labels=labels, x_review={
                "key": key, "source": source, "model": model, "reviewed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                          time.gmtime()),
                "corrected": sorted(q for q, v in labels.items() if label_id(v) != model.get(q)),
                **({"final_outcome": final} if finalize is not None and (final := finalize(labels)) else {})})
            if labels:
                self._lines[key] = line
            else:
                self._lines.pop(key, None)
            self._write_labels()
            return {q: label_id(v) for q, v in labels.items()}

    def store_media(self, item: MediaItem) -> str:
        """Write the item's bytes under media/ (once per content); its path relative to the directory."""
        from preprocess.sniff import sniff

        digest = hashlib.sha256(item.data).hexdigest()
        name = f"{REVIEW_MEDIA_DIR}/{digest}.{sniff(item).container}"
        path = self.root / name
        if not path.exists():
            _atomic_write(path, item.data)
        return name

    def keep_decision(self, request: DecisionRequest, response: JSONObject, audit: JSONObject | None = None,
                      route: JSONObject | None = None) -> str:
        """Append a served decision (its media stored under media/) with its audit record and, when a policy sent
        it to review, its route (`x_route`: queue, reasons); its key."""
        body = render_request(request, [self.store_media(item) for item in request.media])
        digest = kept_digest(body, response)
        with self._lock:
            if self._kept is None:                   # what is kept already, read once
                self._kept = {kept_digest(r["request"], r["response"]): str(r["key"]) for r in self.decisions()}
            if digest in self._kept:                 # the same request answered the same way: kept once
                return self._kept[digest]
            key = f"d-{uuid.uuid4().hex[:16]}"
            kept = {"key": key, "request": body, "response": response,
                    **({"audit": audit} if audit is not None else {}), **({"x_route": route} if route is not None else {})}
            with open(self.decisions_file, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(kept, ensure_ascii=False) + "\n")
            self._kept[digest] = key
            return key

    def labels_by_request_id(self) -> dict[str, JSONObject]:
        """The labels of decisions a server kept, keyed by the decisions' request ids (from their audit records):
        {request id: {question: label}}. Kept decisions without a request id, or not labelled, are left out."""
        out: dict[str, JSONObject] = {}
        for kept in self.decisions():
            audit = kept.get("audit")
            request_id = audit.get("request_id") if isinstance(audit, dict) else None
            with self._lock:
                line = self._lines.get(str(kept["key"]))
            if isinstance(request_id, str) and line is not None:
                out[request_id] = dict(line["labels"])
        return out

    def decisions(self) -> list[JSONObject]:
        """Every kept decision ({key, request, response}); a torn last line (a crash mid-write) is skipped."""
        if not self.decisions_file.exists():
            return []
        kept = []
        for text in self.decisions_file.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(text)
            except ValueError:
                continue
            if isinstance(record, dict) and {"key", "request", "response"} <= record.keys():
                kept.append(record)
        return kept

    def _read_labels(self) -> dict[str, JSONObject]:
        lines: dict[str, JSONObject] = {}
        if self.labels_file.exists():
            for text in self.labels_file.read_text(encoding="utf-8").splitlines():
                if text.strip():
                    line = json.loads(text)
                    key = (line.get("x_review") or {}).get("key") or f"line-{len(lines) + 1}"
                    lines[key] = line
        return lines

    def _write_labels(self) -> None:
        text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in self._lines.values())
        _atomic_write(self.labels_file, text.encode("utf-8"))


def kept_digest(request: JSONValue, response: JSONValue) -> str:
    """What makes two kept decisions the same: the request as kept (media by content) and the answers given."""
    answers = response.get("answers") if isinstance(response, dict) else None
    return hashlib.sha256(json.dumps([request, answers], sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)

