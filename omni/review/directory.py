"""Review directories: the labelled dataset a review produces, who gave each label, the media it names, and the
decisions kept for review.

A review directory holds
- `history.jsonl`: every reviewer action (label changes, comments, flags, skips, reverts), appended, never rewritten:
  the truth the rest is derived from (`omni.review.history`), read once at start and then kept in memory. A
  directory made before the history existed starts one from its labels (reviewer `x_review.reviewer`, else "unknown");
- `labels.jsonl`: one System One request per line with its `labels` (k=1: the last label given; k>=2 reviewers per
  item: their consensus or an adjudication), in exactly the dataset format `omni eval`, `omni calibrate` and
  `omni finetune` read (`omni.learn.dataset`), plus `x_review` (the item's key, where it came from, the model's
  answers, which labels correct them, `labelled_by` {question: [names]}, `by_reviewer` {name: {question: label}},
  `adjudicated` and `adjudicated_by` when any). Only items with a label have a line. It is rewritten whole
  (atomically) on every change and made to follow the history at start, so a review in progress survives a crash;
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
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from omni.contract.answers import label_id, top_answer
from omni.contract.errors import quoted
from omni.contract.json_values import JSONObject, JSONValue
from omni.contract.render import render_request
from omni.contract.types import DecisionRequest, Question
from omni.review.history import (
    HISTORY_FILE,
    Event,
    ReviewHistory,
    append_lines,
    atomic_write,
    new_event_id,
    now_iso,
)
from preprocess.item import MediaItem

REVIEW_DATASET_FILE = "labels.jsonl"
REVIEW_MEDIA_DIR = "media"
REVIEW_DECISIONS_FILE = "decisions.jsonl"
REVIEW_HISTORY_FILE = HISTORY_FILE


def dataset_path(path: str | Path) -> Path:
    """A dataset file as given, or the labelled dataset inside a review directory."""
    path = Path(path)
    return path / REVIEW_DATASET_FILE if path.is_dir() else path


# ------------------------------------------------------------------------------------------------ labels
def label_value(question: Question, label: str) -> bool | int | str:
    """A label id as the dataset writes it: noul true/false, choice id, score level index."""
    if question.type == "noul":
        if label not in ("true", "false"):
            raise ValueError(f"{quoted(label)} is not a noul answer (true or false)")
        return label == "true"
    ids = [o.id for o in question.options]
    if label not in ids:
        raise ValueError(f"{quoted(label)} is not an answer of {question.id!r} ({', '.join(ids)})")
    return int(label) if question.type == "score" else label


# ------------------------------------------------------------------------------------------------ the directory
class ReviewDir:
    """One review directory, under k reviewers per item (k>=2: the dataset holds their consensus). Thread-safe: one
    lock around the history, the labels and the kept decisions; every rewrite is atomic (a temporary file renamed
    over the old one), every history line appended and flushed to disk before the labels follow."""

    def __init__(self, root: str | Path, k: int = 1) -> None:
        if k < 1:
            raise ValueError(f"k (reviewers per item) must be >= 1, got {k}")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / REVIEW_MEDIA_DIR).mkdir(exist_ok=True)
        self.k = k
        self._lock = threading.Lock()
        self._lines = self._read_labels()          # item key -> dataset line
        self._history = ReviewHistory(self.root / REVIEW_HISTORY_FILE, k)
        if not self._history.exists and self._lines:       # made before the history: its labels are its start
            self._history.start(_imported(self._lines))
        self._kept: dict[str, str] | None = None   # digest of a kept decision's request and answers -> its key
        self._decisions: list[JSONObject] = []     # kept decisions read so far, and where the file was read to
        self._decisions_at: tuple[int, int] = (0, 0)       # (inode, offset)
        with self._lock:                           # the labels follow the history (a crash between the two writes)
            known = set(self._history.item_keys())          # lines the history knows nothing of are kept as they are
            changed = [self._derive(key) for key in list(self._lines) if key in known]    # each, not the first
            if any(changed):
                self._write_labels()

    @property
    def labels_file(self) -> Path:
        return self.root / REVIEW_DATASET_FILE

    @property
    def decisions_file(self) -> Path:
        return self.root / REVIEW_DECISIONS_FILE

    @property
    def history_file(self) -> Path:
        return self.root / REVIEW_HISTORY_FILE

    @contextmanager
    def history(self) -> Iterator[ReviewHistory]:
        """The history, read under the directory's lock (writers wait meanwhile: read what you need and leave)."""
        with self._lock:
            yield self._history

    def labels(self, key: str) -> dict[str, str]:
        """The item's labels as label ids (k=1: the last given; k>=2: the consensus)."""
        with self._lock:
            return self._history.item(key).consensus()

    def reviewed(self) -> dict[str, int]:
        """Item key -> how many of its questions carry a label (as `labels`)."""
        with self._lock:
            return {key: len(labels) for key in self._history.item_keys() if (labels := self._history.item(key).consensus())}

    def save_labels(self, key: str, source: str, request: DecisionRequest, answers: dict[str, JSONObject],
                    changes: dict[str, str | None],
                    finalize: Callable[[dict[str, bool | int | str]], JSONObject | None] | None = None, *,
                    reviewer: str = "anonymous", queue: str = "") -> list[Event]:
        """Set (label id) or clear (None) labels of the item `key` as `reviewer` in `queue`; one history event per
        question whose value changes (returned), then the dataset line is rewritten at once. `finalize(labels)` gives
        the decision's final outcome under its policy, recorded with the labels (`x_review.final_outcome`).
        ValueError for an unknown question or answer (nothing is saved then)."""
        questions = {q.id: q for q in request.questions}
        ids: dict[str, str | None] = {}
        for qid, label in changes.items():
            if qid not in questions:
                raise ValueError(f"{quoted(qid)} is not a question of this item ({', '.join(questions)})")
            ids[qid] = None if label is None else label_id(label_value(questions[qid], label))
        with self._lock:
            events = self._history.label(key, queue, reviewer, ids)
            if events:
                self._update_line(key, source, request, answers, finalize)
            return events

    def undo(self, key: str, source: str, request: DecisionRequest, answers: dict[str, JSONObject], event_id: str,
             finalize: Callable[[dict[str, bool | int | str]], JSONObject | None] | None = None, *,
             reviewer: str = "anonymous", queue: str = "") -> Event:
        """Revert `reviewer`'s own label, flag or skip event on the item (the dataset line follows); the revert
        event. KeyError: no such event on the item; UndoRefused (omni.review.history): not theirs, already
        undone, not undoable, or a label changed since (the message says by whom)."""
        with self._lock:
            event = self._history.undo(key, queue, reviewer, event_id)
            if event.question is not None:
                self._update_line(key, source, request, answers, finalize)
            return event

    def note(self, key: str, action: str, said: str | None, *, reviewer: str = "anonymous", queue: str = "") -> Event:
        """A comment (`said` its text), flag or skip (`said` its reason) on the item; its history event."""
        with self._lock:
            if action == "comment":
                assert said is not None
                return self._history.comment(key, queue, reviewer, said)
            return self._history.mark(key, queue, reviewer, action, said)

    def store_media(self, item: MediaItem) -> str:
        """Write the item's bytes under media/ (once per content); its path relative to the directory."""
        from preprocess.sniff import sniff

        digest = hashlib.sha256(item.data).hexdigest()
        name = f"{REVIEW_MEDIA_DIR}/{digest}.{sniff(item).container}"
        path = self.root / name
        if not path.exists():
            atomic_write(path, item.data)
        return name

    def keep_decision(self, request: DecisionRequest, response: JSONObject, audit: JSONObject | None = None,
                      route: JSONObject | None = None) -> str:
        """Append a served decision (its media stored under media/) with its audit record and, when a policy sent
        it to review, its route (`x_route`: queue, reasons); its key."""
        body = render_request(request, [self.store_media(item) for item in request.media])
        digest = kept_digest(body, response)
        with self._lock:
            if self._kept is None:                   # what is kept already, read once
                self._kept = {kept_digest(r["request"], r["response"]): str(r["key"]) for r in self._read_decisions()}
            if digest in self._kept:                 # the same request answered the same way: kept once
                return self._kept[digest]
            key = f"d-{uuid.uuid4().hex[:16]}"
            kept = {"key": key, "request": body, "response": response,
                    **({"audit": audit} if audit is not None else {}), **({"x_route": route} if route is not None else {})}
            append_lines(self.decisions_file, [json.dumps(kept, ensure_ascii=False)], sync=False)
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

    def kept_with_labels(self) -> list[tuple[JSONObject, dict[str, str]]]:
        """Every kept decision with its labels as label ids (k=1: the last given; k>=2: the consensus)."""
        return [(kept, self.labels(str(kept["key"]))) for kept in self.decisions()]

    def flagged_requests(self) -> list[tuple[str, JSONObject]]:
        """(item key, its request as the directory stores it: media paths relative to the root) of every item with a
        reviewer's flag in force whose request the directory holds (a labels line or a kept decision), history order."""
        decisions = {str(kept["key"]): kept["request"] for kept in self.decisions()}
        with self._lock:
            keys = [key for key in self._history.item_keys() if self._history.item(key).flagged()]
            found = [(key, self._lines[key] if key in self._lines else decisions.get(key)) for key in keys]
        return [(key, {k: v for k, v in body.items() if k not in ("labels", "x_review")})
                for key, body in found if isinstance(body, dict)]

    def decisions(self) -> list[JSONObject]:
        """Every kept decision ({key, request, response}); a torn last line (a crash mid-write) is skipped. The file
        is read once, then only what was appended since."""
        with self._lock:
            return list(self._read_decisions())

    def _read_decisions(self) -> list[JSONObject]:
        try:
            stat = self.decisions_file.stat()
        except FileNotFoundError:
            self._decisions, self._decisions_at = [], (0, 0)
            return self._decisions
        inode, offset = self._decisions_at
        if stat.st_ino != inode or stat.st_size < offset:          # another file, or a shorter one: read it anew
            self._decisions, offset = [], 0
        if stat.st_size > offset:
            with open(self.decisions_file, "rb") as handle:
                handle.seek(offset)
                data = handle.read(stat.st_size - offset)
            whole = data.rfind(b"\n") + 1                           # a torn last line waits (or stays skipped)
            for text in data[:whole].split(b"\n"):
                try:
                    record = json.loads(text)
                except ValueError:
                    continue
                if isinstance(record, dict) and {"key", "request", "response"} <= record.keys():
                    self._decisions.append(record)
            offset += whole
        self._decisions_at = (stat.st_ino, offset)
        return self._decisions

    def _update_line(self, key: str, source: str, request: DecisionRequest, answers: dict[str, JSONObject],
                     finalize: Callable[[dict[str, bool | int | str]], JSONObject | None] | None) -> None:
        """The item's dataset line after a change of its labels; the labels file rewritten (lock held)."""
        line = self._lines.get(key) or render_request(request, [self.store_media(item) for item in request.media])
        questions = {q.id for q in request.questions}
        line["x_review"] = {**(line.get("x_review") or {}), "key": key, "source": source,
                            "model": {qid: top_answer(a) for qid, a in answers.items() if qid in questions},
                            "reviewed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self._lines[key] = line
        self._derive(key, finalize)
        self._write_labels()

    def _derive(self, key: str,
                finalize: Callable[[dict[str, bool | int | str]], JSONObject | None] | None = None) -> bool:
        """Set the item's dataset line from its history: its labels and who gave them (`x_review.labelled_by`,
        `by_reviewer`, `adjudicated`); no label, no line. Whether the line changed (lock held)."""
        line = self._lines[key]
        item = self._history.item(key)
        kinds = {qid: q.get("type") for qid, q in (line.get("questions") or {}).items() if isinstance(q, dict)}

        def values(labels: dict[str, str]) -> dict[str, bool | int | str]:
            return {q: _dataset_value(kinds[q], label) for q, label in labels.items() if q in kinds}

        labels = values(item.consensus())
        if not labels:
            del self._lines[key]
            return True
        review = dict(line.get("x_review") or {})
        model = review.get("model") if isinstance(review.get("model"), dict) else {}
        assert isinstance(model, dict)
        review.update(corrected=sorted(q for q, v in labels.items() if label_id(v) != model.get(q)),
                      labelled_by={q: names for q, names in item.labelled_by().items() if q in labels},
                      by_reviewer={name: values(given) for name, given in item.by_reviewer().items()})
        for name in ("adjudicated", "adjudicated_by"):
            review.pop(name, None)
        if adjudicated := item.adjudicated():
            review.update(adjudicated=values(adjudicated), adjudicated_by=item.adjudicated_by())
        if finalize is not None:
            final = finalize(labels)
            review.pop("final_outcome", None)
            if final:
                review["final_outcome"] = final
        changed = labels != line.get("labels") or review != line.get("x_review")
        self._lines[key] = {**line, "labels": labels, "x_review": review}
        return changed

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
        atomic_write(self.labels_file, text.encode("utf-8"))


def _imported(lines: dict[str, JSONObject]) -> list[Event]:
    """The labels of a review directory made before the history existed, as the events that would have given them:
    by `x_review.reviewer` (else "unknown"), at `x_review.reviewed_at` (else now), in the queue "imported"."""
    events = []
    for key, line in lines.items():
        review = line.get("x_review") if isinstance(line.get("x_review"), dict) else {}
        assert isinstance(review, dict)
        reviewer = review.get("reviewer") if isinstance(review.get("reviewer"), str) else "unknown"
        at = review.get("reviewed_at") if isinstance(review.get("reviewed_at"), str) else now_iso()
        labels = line.get("labels") if isinstance(line.get("labels"), dict) else {}
        assert isinstance(labels, dict)
        for question, value in labels.items():
            events.append(Event(new_event_id(), str(at), str(reviewer), "imported", key, "label", question, None,
                                label_id(value)))
    return events


def _dataset_value(kind: JSONValue, label: str) -> bool | int | str:
    """A label id as the dataset writes it, by its question's type."""
    if kind == "noul":
        return label == "true"
    return int(label) if kind == "score" and label.lstrip("-").isdigit() else label


def kept_digest(request: JSONValue, response: JSONValue) -> str:
    """What makes two kept decisions the same: the request as kept (media by content) and the answers given."""
    answers = response.get("answers") if isinstance(response, dict) else None
    return hashlib.sha256(json.dumps([request, answers], sort_keys=True, ensure_ascii=False).encode()).hexdigest()
