"""Review queues: decisions to look at again, most uncertain first, and what reviewers do with them.

A queue is a source of decided requests (`review_sources`: a batch output, the decisions a server kept in its review
directory, or, under a policy, the decisions the policy sent to review, each with its reasons; a reviewer's labels
there give the decision its final outcome, recorded with the labels). Items are ordered by uncertainty: the lowest confidence first (an item's confidence is its least confident question's top
probability), or nearest to an auto-decision threshold first; the items a reviewer skipped go last in their list.
A list can be filtered (`review_filters`) by question, the model's answer, confidence, policy outcome,
reviewer and state.
Labels, comments, flags, skips and undos go to the one review directory (`ReviewDir`), keyed by the item, so they are
found again after a restart. With k reviewers per item (k>=2) each reviewer labels blind (sees their own labels and
their own history), an item is done once k reviewers labelled every question, and a queue "disagreements" lists the
items of every queue where reviewers' labels differ: a label given there is an adjudication, final.
Sources are named by the operator (flags), never by an HTTP caller: a queue id or item key that is not listed is
KeyError, and no path from a caller is ever opened. Who is asking (`Viewer`) is told by the caller of these methods.
Knows nothing of HTTP, roles, the engine or the model.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from omni.contract.answers import top_answer
from omni.contract.config import EngineConfig
from omni.contract.errors import quoted
from omni.contract.json_values import JSONObject, JSONValue
from omni.contract.outcomes import final_outcome
from omni.contract.policy import Policy
from omni.contract.render import render_question
from omni.contract.request_line import parse_request_line
from omni.contract.types import DecisionRequest
from omni.review.agreement import question_agreement
from omni.review.directory import ReviewDir
from omni.review.filters import ItemFilter, ReviewInputError
from omni.review.history import ADJUDICATION_QUEUE, MAX_REASON_CHARS, ItemState, ReviewHistory
from omni.review.sources import BatchSource, Decided, KeptSource, ReviewSource
from omni.review.wellness import Wellness

BROWSER_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp", "gif": "image/gif",
                 "bmp": "image/bmp", "wav": "audio/wav", "mp3": "audio/mpeg", "flac": "audio/flac",
                 "ogg": "audio/ogg", "aac": "audio/aac", "m4a": "audio/mp4", "mp4": "video/mp4",
                 "mov": "video/quicktime", "webm": "video/webm", "matroska": "video/x-matroska"}
ORDERS = ("confidence", "threshold")
DISAGREEMENTS = ADJUDICATION_QUEUE
PREVIEW_CHARS = 160
MAX_FAILURES_SHOWN = 50           # a batch's failed lines listed with its queue (all are counted)
DEFAULT_MAX_COMMENT_CHARS = 2000


@dataclass(frozen=True)
class Viewer:
    """Who asks: the name every action is recorded under, and whether they may see every reviewer's labels of an
    item (`by_reviewer`, whole histories) outside the disagreements queue."""

    name: str = "anonymous"
    sees_all: bool = False


class ReviewQueues:
    """The queues a server offers and the review directory their labels go to."""

    def __init__(self, review_dir: ReviewDir, batch_outputs: Sequence[str | Path] = (),
                 config: EngineConfig | None = None, keep_decisions: bool = True,
                 policy: Callable[[], Policy | None] | None = None,
                 max_comment_chars: int = DEFAULT_MAX_COMMENT_CHARS, wellness: Wellness | None = None) -> None:
        """`policy` (the policy in force, read at each label) adds the queue of decisions it sent to review. The
        number of reviewers per item is the review directory's (`review_dir.k`). `wellness`: which items' media are
        shielded until revealed, and the reviewers' daily limits (omni/review/wellness.py)."""
        self.review_dir = review_dir
        self.wellness = wellness
        self.config = config or EngineConfig()
        self.policy = policy
        self.max_comment_chars = max_comment_chars
        sources: list[ReviewSource] = [BatchSource(p) for p in batch_outputs]
        if policy is not None:
            sources.append(KeptSource(review_dir, routed=True))
            sources.append(KeptSource(review_dir, qa=True))     # automatic decisions drawn for QA ([qa], qa_sample)
        if keep_decisions:
            sources.append(KeptSource(review_dir))
        self.sources = {s.id: s for s in sources}

    @property
    def k(self) -> int:
        return self.review_dir.k

    def _qa_drawn(self) -> bool:
        """Whether the policy in force draws QA samples ([qa] or a question's qa_sample)."""
        policy = self.policy() if self.policy is not None else None
        return policy is not None and policy.qa is not None

    # ---------------------------------------------------------------- reading
    def queues(self) -> list[JSONObject]:
        """Each queue with its items, how many are done (every question labelled by k reviewers; a partly labelled
        item is not) and k; a batch's queue also says which of its lines failed (they have no item to review).
        With k>=2 the disagreements queue comes last."""
        listed = [(source, source.records(), source.failures() if isinstance(source, BatchSource) else [])
                  for source in self.sources.values()]
        out: list[JSONObject] = []
        with self.review_dir.history() as history:
            for source, records, failures in listed:
                if isinstance(source, KeptSource) and source.qa and not records and not self._qa_drawn():
                    continue                  # no [qa] in force and nothing drawn: no QA queue to show
                done = sum(1 for r in records if history.item(r.key).state(r.questions) == "done")
                out.append({"id": source.id, "kind": source.kind, "name": source.name, "items": len(records),
                            "reviewed": done, "failed": len(failures), "failures": failures[:MAX_FAILURES_SHOWN],
                            "k": self.k})
            if self.k >= 2:
                disagreeing = {r.key for _, records, _ in listed for r in records if history.item(r.key).disagreements()}
                out.append({"id": DISAGREEMENTS, "kind": DISAGREEMENTS, "name": DISAGREEMENTS,
                            "items": len(disagreeing), "reviewed": 0, "failed": 0, "failures": [], "k": self.k})
        return out

    def items(self, queue_id: str, order: str = "confidence", threshold: float = 0.9,
              where: ItemFilter | None = None, viewer: Viewer | None = None) -> list[JSONObject]:
        """The queue's items that `where` keeps, most uncertain first, the ones `viewer` skipped last; each with how
        many of its questions carry a label the viewer sees (k>=2: their own), its state and who labelled it."""
        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}")
        viewer = viewer or Viewer()
        where = where or ItemFilter()
        records = self._records(queue_id)
        rank = (lambda r: r.confidence) if order == "confidence" else (lambda r: abs(r.confidence - threshold))
        entries: list[tuple[bool, JSONObject]] = []
        with self.review_dir.history() as history:
            for r in sorted(records, key=rank):
                item = history.item(r.key)
                if queue_id == DISAGREEMENTS and not item.disagreements():
                    continue
                state = item.state(r.questions)
                if not where.keeps(r, item, state):
                    continue
                shielded = self._shielded(queue_id, r)
                if shielded and self._hidden_from(viewer, queue_id, r):
                    continue                       # past the viewer's daily limit: for the other reviewers
                seen = self._seen_labels(item, queue_id, viewer)
                skipped = item.skipped_by(viewer.name)
                entries.append((skipped, {
                    "key": r.key, "confidence": round(r.confidence, 6), "questions": len(r.answers),
                    "labelled": sum(1 for q in r.questions if q in seen), "preview": _preview(r.body.get("state")),
                    "state": state, "flagged": item.flagged(), "reviewers": item.reviewers(), "outcome": r.outcome,
                    "model": r.model,
                    "skipped": skipped, **({"shielded": True} if shielded else {})}))
        return [entry for skipped, entry in sorted(entries, key=lambda e: e[0])]      # stable: skipped ones last

    def item(self, queue_id: str, key: str, viewer: Viewer | None = None) -> JSONObject:
        """Everything the page shows of one item: state, questions, the model's answers, labels (k>=2 outside the
        disagreements queue: the viewer's own), who labelled, the consensus, label history, comments, flags, skips,
        media."""
        viewer = viewer or Viewer()
        record, request, _ = self._decided(queue_id, key)
        from preprocess.sniff import sniff

        questions = [{"id": q.id, "type": q.type, "instructions": q.instructions,
                      "options": [{"id": o.id, "description": o.description} for o in q.options],
                      "model": top_answer(record.answers.get(q.id, {})), "wire": render_question(q)}
                     for q in request.questions]
        media = [{"index": i, "slot": m.slot, "kind": m.kind, "type": BROWSER_TYPES.get(sniff(m).container)}
                 for i, m in enumerate(request.media)]
        with self.review_dir.history() as history:
            review = self._review_of(history.item(key), queue_id, viewer, [q.id for q in request.questions])
        return {"key": key, "state": request.state, "questions": questions, "answers": record.answers,
                "confidence": record.confidence, "media": media, **review,
                **({"reasons": record.route.get("reasons", []), "x_outcome": record.route.get("x_outcome")}
                   if record.route is not None else {}),
                **({"qa": record.route["qa"]} if record.route is not None and "qa" in record.route else {}),
                **({"evidence": record.evidence} if record.evidence is not None else {}),
                **self._shield_of(queue_id, record, len(media), viewer)}

    # ---------------------------------------------------------------- wellness
    def _shielded(self, queue_id: str, record: Decided) -> bool:
        if self.wellness is None or not self.wellness.rules or not _media_count(record.body):
            return False
        answers = {qid: top_answer(answer) for qid, answer in record.answers.items()}
        return self.wellness.shields(queue_id, record.outcome, answers)

    def _hidden_from(self, viewer: Viewer, queue_id: str, record: Decided) -> bool:
        """A shielded item the viewer has not revealed all of, while they are at their daily limit."""
        assert self.wellness is not None
        return self.wellness.at_limit(viewer.name, queue_id) and not all(
            self.wellness.revealed(viewer.name, record.key, i) for i in range(_media_count(record.body)))

    def _shield_of(self, queue_id: str, record: Decided, media: int, viewer: Viewer) -> JSONObject:
        """`shield`: the media shown shielded until revealed, those this viewer revealed, their exposure today."""
        if self.wellness is None or not self._shielded(queue_id, record):
            return {}
        return {"shield": {"media": list(range(media)),
                           "revealed": [i for i in range(media) if self.wellness.revealed(viewer.name, record.key, i)],
                           "exposure": self.wellness.exposure(viewer.name, queue_id)}}

    def reveal(self, queue_id: str, key: str, index: int, viewer: Viewer | None = None) -> JSONObject:
        """The viewer reveals a shielded medium: counted (ExposureLimit past their limit); their exposure today.
        A medium that is not shielded is shown as it is: nothing is counted."""
        viewer = viewer or Viewer()
        record, request, _ = self._decided(queue_id, key)
        if not 0 <= index < len(request.media):
            raise KeyError(f"item {key} has no media item {index}")
        if self.wellness is None or not self._shielded(queue_id, record):
            return {"exposure": self.wellness.exposure(viewer.name, queue_id) if self.wellness else None,
                    "shielded": False}
        return {"exposure": self.wellness.reveal(viewer.name, queue_id, key, index), "shielded": True}

    def media(self, queue_id: str, key: str, index: int) -> tuple[bytes, str]:
        """The bytes of an item's media item and the type a browser plays it as."""
        from preprocess.sniff import sniff

        _, request, _ = self._decided(queue_id, key)
        if not 0 <= index < len(request.media):
            raise KeyError(f"item {key} has no media item {index}")
        item = request.media[index]
        return item.data, BROWSER_TYPES.get(sniff(item).container, "application/octet-stream")

    def agreement(self) -> JSONObject:
        """How often reviewers agree, per question (Cohen's kappa for two reviewers, Fleiss' for more), and how often
        the model's answer is the reviewers' label; over every item of every queue that reviewers labelled."""
        models = {r.key: r.answers for source in self.sources.values() for r in source.records()}
        given: dict[str, list[tuple[list[tuple[str, str]], str | None]]] = {}
        with self.review_dir.history() as history:
            for key in history.item_keys():
                item = history.item(key)
                answers = models.get(key, {})
                for question in item.questions():
                    labels = item.reviewer_labels(question)
                    if labels:
                        model = top_answer(answers[question]) if question in answers else None
                        given.setdefault(question, []).append((labels, model))
        return {"k": self.k, "questions": {q: question_agreement([labels for labels, _ in items],
                                                                  [model for _, model in items], self.k)
                                           for q, items in sorted(given.items())}}

    # ---------------------------------------------------------------- acting
    def label(self, queue_id: str, key: str, changes: dict[str, str | None],
              viewer: Viewer | None = None) -> JSONObject:
        """Save a reviewer's labels (None clears one): {"labels": the item's labels as the viewer sees them after
        the change, "events": the ids of the history events, one per question whose value changed, "review_state":
        the item's state after it}. In the disagreements queue a label is an adjudication."""
        viewer = viewer or Viewer()
        record, request, source = self._decided(queue_id, key)
        events = self.review_dir.save_labels(key, source.name, request, record.answers, changes,
                                             self._finalize(record), reviewer=viewer.name, queue=queue_id)
        with self.review_dir.history() as history:
            item = history.item(key)
            return {"labels": self._seen_labels(item, queue_id, viewer), "events": [e.id for e in events],
                    "review_state": item.state(record.questions)}

    def comment(self, queue_id: str, key: str, text: object, viewer: Viewer | None = None) -> JSONObject:
        """Add a comment ({id, text, reviewer, at}). ReviewInputError: no text, or longer than max_comment_chars."""
        if not isinstance(text, str) or not text.strip():
            raise ReviewInputError("text", "a comment needs text: send {\"text\": \"…\"} with at least one character "
                                           "that is not a space")
        text = text.strip()
        if len(text) > self.max_comment_chars:
            raise ReviewInputError("text", f"a comment is at most {self.max_comment_chars} characters; this one has "
                                           f"{len(text)}")
        return self._note(queue_id, key, "comment", text, viewer)

    def flag(self, queue_id: str, key: str, reason: object, viewer: Viewer | None = None) -> JSONObject:
        """Flag the item for attention ({id, reason, reviewer, at}); the reason is required (1..500 characters)."""
        return self._note(queue_id, key, "flag", _reason(reason, required=True), viewer)

    def skip(self, queue_id: str, key: str, reason: object = None, viewer: Viewer | None = None) -> JSONObject:
        """Skip the item (it goes last in the viewer's list); the reason is optional (at most 500 characters)."""
        return self._note(queue_id, key, "skip", _reason(reason, required=False), viewer)

    def undo(self, queue_id: str, key: str, event_id: str, viewer: Viewer | None = None) -> JSONObject:
        """Revert the viewer's own label, flag or skip event: {"labels", "flags", "skips", "event": the revert's
        id, "review_state"}. KeyError: no such event on the item; UndoRefused: someone else's, already undone, not undoable, or a
        label changed since."""
        viewer = viewer or Viewer()
        record, request, source = self._decided(queue_id, key)
        event = self.review_dir.undo(key, source.name, request, record.answers, event_id, self._finalize(record),
                                     reviewer=viewer.name, queue=queue_id)
        with self.review_dir.history() as history:
            item = history.item(key)
            return {"labels": self._seen_labels(item, queue_id, viewer), "flags": [e.note() for e in item.flags.values()],
                    "skips": [e.note() for e in item.skips.values()], "event": event.id,
                    "review_state": item.state(record.questions)}

    # ---------------------------------------------------------------- inside
    def _note(self, queue_id: str, key: str, action: str, said: str | None, viewer: Viewer | None) -> JSONObject:
        self._decided(queue_id, key)                      # KeyError for an item not in the queue
        return self.review_dir.note(key, action, said, reviewer=(viewer or Viewer()).name, queue=queue_id).note()

    def _finalize(self, record: Decided) -> Callable[[dict[str, bool | int | str]], JSONObject] | None:
        automatic = record.route.get("x_outcome") if record.route is not None else None
        policy = self.policy() if self.policy is not None else None
        if not isinstance(automatic, dict) or policy is None:
            return None

        def finalize(labels: dict[str, bool | int | str]) -> JSONObject:
            return final_outcome(policy, automatic, labels)
        return finalize

    def _seen_labels(self, item: ItemState, queue_id: str, viewer: Viewer) -> dict[str, str]:
        """The labels the viewer is shown: the item's (k=1, or in the disagreements queue), else their own."""
        return item.consensus() if self.k == 1 or queue_id == DISAGREEMENTS else item.own(viewer.name)

    def _review_of(self, item: ItemState, queue_id: str, viewer: Viewer, questions: list[str]) -> JSONObject:
        """What the item's API answer says of its review, as the viewer may see it (lock held)."""
        open_view = self.k == 1 or queue_id == DISAGREEMENTS or viewer.sees_all
        review: JSONObject = {
            "labels": self._seen_labels(item, queue_id, viewer), "labelled_by": item.labelled_by(),
            "consensus": item.consensus(), "k": self.k, "review_state": item.state(questions),
            "flagged": item.flagged(),
            "history": item.changes(None if open_view else viewer.name), "comments": item.comments(),
            "flags": [e.note() for e in item.flags.values()], "skips": [e.note() for e in item.skips.values()]}
        if queue_id == DISAGREEMENTS or viewer.sees_all:
            review["by_reviewer"] = item.by_reviewer()
        if queue_id == DISAGREEMENTS:
            review["disagreements"] = item.disagreements()
        return review

    def _source(self, queue_id: str) -> ReviewSource:
        if queue_id not in self.sources:
            raise KeyError(f"no review queue {quoted(queue_id)}")
        return self.sources[queue_id]

    def _records(self, queue_id: str) -> list[Decided]:
        """The queue's items (the disagreements queue: every queue's, each key once; `items` keeps those that
        disagree)."""
        if queue_id == DISAGREEMENTS and self.k >= 2:
            seen: dict[str, Decided] = {}
            for source in self.sources.values():
                for record in source.records():
                    seen.setdefault(record.key, record)
            return list(seen.values())
        return self._source(queue_id).records()

    def _decided(self, queue_id: str, key: str) -> tuple[Decided, DecisionRequest, ReviewSource]:
        """An item of the queue, its parsed request and its source. In the disagreements queue: an item whose
        reviewers disagree, or that was adjudicated there (so an adjudication can be undone once the item left)."""
        if queue_id == DISAGREEMENTS and self.k >= 2:
            found = next(((r, s) for s in self.sources.values() for r in s.records() if r.key == key), None)
            if found is not None:
                with self.review_dir.history() as history:
                    if not _in_disagreements(history, key):
                        found = None
        else:
            found = next(((r, self._source(queue_id)) for r in self._source(queue_id).records() if r.key == key), None)
        if found is None:
            raise KeyError(f"no item {quoted(key)} in review queue {quoted(queue_id)}")
        record, source = found
        return record, parse_item(record.body, record.root, self.config), source


def _in_disagreements(history: ReviewHistory, key: str) -> bool:
    item = history.item(key)
    return bool(item.disagreements()) or any(e.queue == DISAGREEMENTS for e in item.events)


def _reason(reason: object, required: bool) -> str | None:
    """A flag's or skip's reason, checked: text of 1..500 characters (a skip may have none)."""
    if reason is None and not required:
        return None
    if not isinstance(reason, str) or not reason.strip():
        if required:
            raise ReviewInputError("reason", "a flag needs a reason: send {\"reason\": \"…\"} (1 to "
                                             f"{MAX_REASON_CHARS} characters)")
        if isinstance(reason, str):
            return None
        raise ReviewInputError("reason", f"a reason is text of at most {MAX_REASON_CHARS} characters")
    reason = reason.strip()
    if len(reason) > MAX_REASON_CHARS:
        raise ReviewInputError("reason", f"a reason is at most {MAX_REASON_CHARS} characters; this one has "
                                         f"{len(reason)}")
    return reason


def parse_item(body: JSONObject, root: Path, config: EngineConfig) -> DecisionRequest:
    """A kept or batch request body (media as data URLs or paths relative to `root`) -> the parsed request."""
    return parse_request_line(json.dumps(body), root, config)


def _preview(state: JSONValue) -> str:
    text = state if isinstance(state, str) else json.dumps(state, ensure_ascii=False)
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS - 1] + "…"


def _media_count(body: JSONObject) -> int:
    """How many media a request body names (images, audio, videos)."""
    return sum(len(v) for slot in ("images", "audio", "videos") if isinstance(v := body.get(slot), list))
