"""The review history: every action reviewers take on an item, appended to `history.jsonl`, and the state it adds up to.

One event per line: `{"id": "e-<16 hex>", "at": ISO UTC, "reviewer", "queue", "key", "action", ...}`. A `label`
event carries `question`, `old` and `new` (label ids such as "true", "ship", "2", or null for none); a `comment` its
`text`; a `flag` or `skip` its `reason`; a `revert` the event it `reverts` (and, when that was a label, `question`,
`old`, `new` as the revert changed them). The file is only ever appended to (the file is the truth; nothing is
rewritten), and the state of every item is rebuilt from it at start: an unreadable line, such as a torn last write,
is skipped, and the next append starts on a line of its own.

Labels live in chains. A chain is the list of label events in force for one (scope, question), oldest first, and its
value is the newest one's `new`. The scope is
- the item itself with one reviewer per item (k=1): the last label anyone gave is the item's label;
- each reviewer's own labels with k>=2 (blind): the item's label is their consensus, set once k reviewers labelled a
  question and all agree, or by
- the adjudication: labels given in the disagreements queue, which are final.
Undo pops the newest event of its chain, so it reverts only what nobody changed since; a flag or a skip stays in force
until it is undone. The scope is worked out when the history is read, so the same file reads right under another k.
Not thread-safe on its own: its owner (`omni.review.directory.ReviewDir`) holds one lock around every call.
Knows nothing of HTTP, queues, requests, media or the model: it sees item keys, question ids and label ids.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from omni.contract.errors import quoted
from omni.contract.json_values import JSONObject

log = logging.getLogger(__name__)
T = TypeVar("T")

HISTORY_FILE = "history.jsonl"
ACTIONS = ("label", "comment", "flag", "skip", "revert")
UNDOABLE = ("label", "flag", "skip")
ADJUDICATION_QUEUE = "disagreements"     # the queue whose labels are adjudications
MAX_REASON_CHARS = 500                   # a flag's or a skip's reason
ITEM_SCOPE, ADJUDICATION_SCOPE, REVIEWER_SCOPE = "item", "adjudication", "reviewer:"
STATES = ("unlabelled", "partly", "done")


class UndoRefused(Exception):
    """An undo that would revert something else than what its reviewer did last: someone else's event, one already
    undone, one that cannot be undone (a comment, a revert), or a label changed since. The message says which."""


def now_iso() -> str:
    """The time now, ISO 8601 UTC with milliseconds ("2025-01-31T09:15:02.113Z")."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_event_id() -> str:
    return f"e-{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class Event:
    """One line of the history."""

    id: str
    at: str
    reviewer: str
    queue: str
    key: str
    action: str
    question: str | None = None      # label, and a revert of a label
    old: str | None = None
    new: str | None = None
    text: str | None = None          # comment
    reason: str | None = None        # flag, skip
    reverts: str | None = None       # revert: the id of the event it reverts

    def to_json(self) -> JSONObject:
        record: JSONObject = {"id": self.id, "at": self.at, "reviewer": self.reviewer, "queue": self.queue,
                              "key": self.key, "action": self.action}
        if self.question is not None:
            record.update(question=self.question, old=self.old, new=self.new)
        if self.action == "comment":
            record["text"] = self.text
        if self.action in ("flag", "skip"):
            record["reason"] = self.reason
        if self.reverts is not None:
            record["reverts"] = self.reverts
        return record

    @classmethod
    def from_json(cls, record: object) -> Event | None:
        """The event a history line holds; None for a line that is not one (wrong shape or types)."""
        if not isinstance(record, dict):
            return None
        strings = ("id", "at", "reviewer", "queue", "key", "action")
        optional = ("question", "old", "new", "text", "reason", "reverts")
        if not all(isinstance(record.get(name), str) for name in strings) or record["action"] not in ACTIONS:
            return None
        if not all(record.get(name) is None or isinstance(record.get(name), str) for name in optional):
            return None
        event = cls(record["id"], record["at"], record["reviewer"], record["queue"], record["key"], record["action"],
                    **{name: record.get(name) for name in optional})
        if event.action == "label" and event.question is None or event.action == "revert" and event.reverts is None:
            return None
        return event

    def change(self) -> JSONObject:
        """A label change as the item's `history` lists it."""
        return {"id": self.id, "question": self.question, "old": self.old, "new": self.new,
                "reviewer": self.reviewer, "at": self.at, "action": self.action, "queue": self.queue}

    def note(self) -> JSONObject:
        """A comment, flag or skip as the item lists it."""
        said = {"text": self.text} if self.action == "comment" else {"reason": self.reason}
        return {"id": self.id, **said, "reviewer": self.reviewer, "at": self.at}


@dataclass
class ItemState:
    """What the history says of one item under k reviewers per item."""

    k: int = 1
    events: list[Event] = field(default_factory=list)             # every event of the item, in file order
    chains: dict[tuple[str, str], list[Event]] = field(default_factory=dict)   # (scope, question) -> in force
    flags: dict[str, Event] = field(default_factory=dict)          # flags in force, by event id
    skips: dict[str, Event] = field(default_factory=dict)
    reverted: dict[str, Event] = field(default_factory=dict)       # event id -> the revert that undid it
    by_id: dict[str, Event] = field(default_factory=dict)
    order: dict[str, int] = field(default_factory=dict)            # event id -> its place in the history

    # ---------------------------------------------------------------- building
    def scope(self, reviewer: str, queue: str) -> str:
        """The chain a label by `reviewer` in `queue` goes to."""
        if queue == ADJUDICATION_QUEUE:
            return ADJUDICATION_SCOPE
        return ITEM_SCOPE if self.k == 1 else REVIEWER_SCOPE + reviewer

    def apply(self, event: Event, place: int) -> None:
        """Add one event (read from the file or just appended) to the state."""
        self.events.append(event)
        self.by_id[event.id] = event
        self.order[event.id] = place
        if event.action == "label":
            assert event.question is not None
            self.chains.setdefault((self.scope(event.reviewer, event.queue), event.question), []).append(event)
        elif event.action == "flag":
            self.flags[event.id] = event
        elif event.action == "skip":
            self.skips[event.id] = event
        elif event.action == "revert":
            target = self.by_id.get(event.reverts or "")
            if target is None or target.id in self.reverted:
                return                               # a revert of nothing (a damaged file): read, but changes nothing
            self.reverted[target.id] = event
            self.flags.pop(target.id, None)
            self.skips.pop(target.id, None)
            if target.action == "label" and target.question is not None:
                chain = self.chains.get((self.scope(target.reviewer, target.queue), target.question), [])
                if target in chain:
                    chain.remove(target)

    # ---------------------------------------------------------------- labels
    def value(self, scope: str, question: str) -> str | None:
        chain = self.chains.get((scope, question))
        return chain[-1].new if chain else None

    def own(self, reviewer: str) -> dict[str, str]:
        """The labels a reviewer sees as theirs: the item's (k=1) or their own (k>=2)."""
        scope = ITEM_SCOPE if self.k == 1 else REVIEWER_SCOPE + reviewer
        return self._values(scope)

    def adjudicated(self) -> dict[str, str]:
        return self._values(ADJUDICATION_SCOPE)

    def adjudicated_by(self) -> dict[str, str]:
        return {q: chain[-1].reviewer for (scope, q), chain in self.chains.items()
                if scope == ADJUDICATION_SCOPE and chain and chain[-1].new is not None}

    def reviewer_labels(self, question: str) -> list[tuple[str, str]]:
        """(reviewer, label) of every reviewer whose label for `question` stands, first labelled first.
        k=1: each reviewer's newest label in the item's chain (the item's label is only the newest of them)."""
        return [(reviewer, label) for reviewer, label, _ in self._standing(question)]

    def _standing(self, question: str) -> list[tuple[str, str, int]]:
        """(reviewer, label, since: the place of the first label of their unbroken run), first labelled first."""
        if self.k == 1:
            own: dict[str, list[Event]] = {}
            for event in self.chains.get((ITEM_SCOPE, question), []):
                own.setdefault(event.reviewer, []).append(event)
        else:
            own = {scope[len(REVIEWER_SCOPE):]: chain for (scope, q), chain in self.chains.items()
                   if q == question and scope.startswith(REVIEWER_SCOPE)}
        standing: dict[str, tuple[int, str]] = {}          # reviewer -> (since, label)
        for reviewer, chain in own.items():
            if not chain or chain[-1].new is None:
                continue
            first = len(chain) - 1                          # the oldest event of the unbroken run of labels
            while first > 0 and chain[first - 1].new is not None:
                first -= 1
            standing[reviewer] = (self.order[chain[first].id], chain[-1].new)
        return sorted(((r, label, since) for r, (since, label) in standing.items()), key=lambda t: t[2])

    def questions(self) -> list[str]:
        """Every question some label event names, in the order first labelled."""
        return list(dict.fromkeys(q for (_, q) in self.chains))

    def by_reviewer(self) -> dict[str, dict[str, str]]:
        """Reviewer -> {question: their standing label}."""
        out: dict[str, dict[str, str]] = {}
        for question in self.questions():
            for reviewer, label in self.reviewer_labels(question):
                out.setdefault(reviewer, {})[question] = label
        return out

    def consensus(self) -> dict[str, str]:
        """The item's labels: k=1 the last label given; k>=2 the adjudication, else the label all of at least k
        reviewers gave."""
        if self.k == 1:
            return self._values(ITEM_SCOPE)
        out = {}
        for question in self.questions():
            given = self.reviewer_labels(question)
            if len(given) >= self.k and len({label for _, label in given}) == 1:
                out[question] = given[0][1]
        return {**out, **self.adjudicated()}

    def labelled_by(self) -> dict[str, list[str]]:
        """Question -> who labelled it: k=1 the reviewer whose label is the item's; k>=2 every reviewer whose label
        stands (first first)."""
        if self.k == 1:
            return {q: [chain[-1].reviewer] for (scope, q), chain in self.chains.items()
                    if scope == ITEM_SCOPE and chain and chain[-1].new is not None}
        return {q: [r for r, _ in labels] for q in self.questions() if (labels := self.reviewer_labels(q))}

    def disagreements(self) -> list[str]:
        """Questions (k>=2) where two reviewers' standing labels differ and no adjudication was given yet."""
        if self.k == 1:
            return []
        adjudicated = self.adjudicated()
        return [q for q in self.questions()
                if q not in adjudicated and len({label for _, label in self.reviewer_labels(q)}) > 1]

    def state(self, questions: Sequence[str]) -> str:
        """unlabelled, partly or done: done once every question has a label from k reviewers (k=1: a label),
        or an adjudication."""
        if self.k == 1:
            labels = self.consensus()
            count = sum(1 for q in questions if q in labels)
            complete = count == len(questions)
        else:
            adjudicated = self.adjudicated()
            counts = {q: len(self.reviewer_labels(q)) for q in questions}
            count = sum(counts.values()) + len(adjudicated)
            complete = all(counts[q] >= self.k or q in adjudicated for q in questions)
        return "done" if complete and questions else "partly" if count else "unlabelled"

    # ---------------------------------------------------------------- what else happened
    def changes(self, reviewer: str | None = None) -> list[JSONObject]:
        """Label changes, oldest first (labels and the reverts of labels); only `reviewer`'s own when given (blind)."""
        return [e.change() for e in self.events if e.question is not None
                and (reviewer is None or e.reviewer == reviewer and e.queue != ADJUDICATION_QUEUE)]

    def comments(self) -> list[JSONObject]:
        return [e.note() for e in self.events if e.action == "comment"]

    def flagged(self) -> bool:
        return bool(self.flags)

    def skipped_by(self, reviewer: str) -> bool:
        return any(e.reviewer == reviewer for e in self.skips.values())

    def reviewers(self) -> list[str]:
        """Everyone with a standing label on the item, first labelled first."""
        since: dict[str, int] = {}
        for question in self.questions():
            for reviewer, _, place in self._standing(question):
                since[reviewer] = min(place, since.get(reviewer, place))
        return sorted(since, key=since.__getitem__)

    def touched_by(self, reviewer: str) -> bool:
        """Whether `reviewer` labelled, commented or flagged the item (events not undone)."""
        return any(e.reviewer == reviewer and e.action in ("label", "comment", "flag") and e.id not in self.reverted
                   for e in self.events)

    def _values(self, scope: str) -> dict[str, str]:
        return {q: chain[-1].new for (s, q), chain in self.chains.items()
                if s == scope and chain and chain[-1].new is not None}


class ReviewHistory:
    """`history.jsonl` and the state of every item it names, kept in memory and appended to (never re-read)."""

    def __init__(self, path: str | Path, k: int = 1) -> None:
        self.path = Path(path)
        self.k = k
        self._items: dict[str, ItemState] = {}
        self._places = 0
        for event in read_events(self.path):
            self._apply(event)

    @property
    def exists(self) -> bool:
        return self.path.exists()

    def item_keys(self) -> list[str]:
        """Every item the history names."""
        return list(self._items)

    def item(self, key: str) -> ItemState:
        """The state of one item (empty when the history names it not)."""
        return self._items.get(key) or ItemState(self.k)

    def start(self, events: Sequence[Event]) -> None:
        """Write a new history of these events (labels read from a review directory made before the history
        existed), atomically; only where there is no history yet."""
        if self.path.exists():
            raise FileExistsError(f"{self.path} exists: a history is only appended to")
        atomic_write(self.path, "".join(json.dumps(e.to_json(), ensure_ascii=False) + "\n" for e in events).encode())
        for event in events:
            self._apply(event)

    def append(self, events: Sequence[Event]) -> None:
        """Append events (one write, flushed to disk) and add them to the state."""
        if not events:
            return
        append_lines(self.path, [json.dumps(e.to_json(), ensure_ascii=False) for e in events])
        for event in events:
            self._apply(event)

    # ---------------------------------------------------------------- actions
    def label(self, key: str, queue: str, reviewer: str, changes: dict[str, str | None]) -> list[Event]:
        """Label events for the questions whose value changes (setting the same value is no change); appended."""
        item = self.item(key)
        at = now_iso()
        events = []
        for question, new in changes.items():
            old = item.value(item.scope(reviewer, queue), question)
            if old != new:
                events.append(Event(new_event_id(), at, reviewer, queue, key, "label", question, old, new))
        self.append(events)
        return events

    def comment(self, key: str, queue: str, reviewer: str, text: str) -> Event:
        event = Event(new_event_id(), now_iso(), reviewer, queue, key, "comment", text=text)
        self.append([event])
        return event

    def mark(self, key: str, queue: str, reviewer: str, action: str, reason: str | None) -> Event:
        """A flag or a skip (with its reason)."""
        if action not in ("flag", "skip"):
            raise ValueError(f"mark is flag or skip, not {action!r}")
        event = Event(new_event_id(), now_iso(), reviewer, queue, key, action, reason=reason)
        self.append([event])
        return event

    def undo(self, key: str, queue: str, reviewer: str, event_id: str) -> Event:
        """Revert `reviewer`'s own label, flag or skip event on the item; the revert event (appended).
        KeyError: no such event on this item. UndoRefused: someone else's, already undone, not undoable, or (a label)
        changed since."""
        item = self.item(key)
        target = item.by_id.get(event_id)
        if target is None:
            raise KeyError(f"item {key} has no event {quoted(event_id)}")
        if target.action not in UNDOABLE:
            raise UndoRefused(f"event {event_id} is a {target.action}: only labels, flags and skips can be undone")
        if target.reviewer != reviewer:
            raise UndoRefused(f"event {event_id} is {target.reviewer}'s: only the reviewer who gave it can undo it "
                              f"(you are {reviewer})")
        if target.id in item.reverted:
            by = item.reverted[target.id]
            raise UndoRefused(f"event {event_id} was already undone (by {by.reviewer} at {by.at})")
        fields: dict[str, str | None] = {}
        if target.action == "label":
            assert target.question is not None
            chain = item.chains.get((item.scope(target.reviewer, target.queue), target.question), [])
            if target not in chain:
                raise UndoRefused(f"event {event_id} is no longer in force: label {target.question!r} again instead")
            if chain[-1] is not target:
                last = chain[-1]
                raise UndoRefused(f"the label of {target.question!r} was changed since by {last.reviewer} at {last.at} "
                                  f"({last.old} -> {last.new}): label it again instead of undoing")
            fields = {"question": target.question, "old": target.new, "new": chain[-2].new if len(chain) > 1 else None}
        event = Event(new_event_id(), now_iso(), reviewer, queue, key, "revert", reverts=target.id, **fields)
        self.append([event])
        return event

    def _apply(self, event: Event) -> None:
        item = self._items.setdefault(event.key, ItemState(self.k))
        if event.id in item.by_id:
            return                                 # a line written twice: counted once
        item.apply(event, self._places)
        self._places += 1


# ------------------------------------------------------------------------------------------------ files
def read_events(path: Path) -> list[Event]:
    """Every event of a history file, in order; lines that do not read as one are skipped (a torn last write)."""
    return read_jsonl(path, Event.from_json, "a history event")


def read_jsonl(path: Path, parse: Callable[[Any], T | None], what: str) -> list[T]:
    """What `parse` makes of each line's JSON value, in order, for an append-only JSONL file. A line that is not JSON
    (not UTF-8, cut inside a character, nested past any use) or that `parse` refuses (None or ValueError) is skipped:
    a whole one with a warning naming it `what`; the last piece, without its "\n", silently (a torn last write)."""
    if not path.exists():
        return []
    values = []
    lines = path.read_bytes().split(b"\n")
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            value = parse(json.loads(raw))
        except (ValueError, RecursionError):      # UnicodeDecodeError is a ValueError
            value = None
        if value is None:
            if number < len(lines):                 # a whole line; the last piece has no "\n": a torn last write
                log.warning("%s line %d is not %s: skipped", path, number, what)
            continue
        values.append(value)
    return values


def append_lines(path: Path, lines: Iterable[str], sync: bool = True) -> None:
    """Append lines to a JSONL file in one write (`sync`: flushed to disk before it returns). A torn last line (a
    crash mid-write) is ended first, so the new lines stay readable."""
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    with open(path, "ab+") as handle:
        end = handle.seek(0, os.SEEK_END)
        if end:
            handle.seek(end - 1)
            if handle.read(1) != b"\n":
                data = b"\n" + data
        handle.write(data)
        handle.flush()
        if sync:
            os.fsync(handle.fileno())


def atomic_write(path: Path, data: bytes) -> None:
    """Write a whole file under a temporary name beside it (fsynced, the old file's permissions), then rename it over
    the old one and fsync the folder: a crash or power cut leaves the old file or the new one, whole, and never a
    temporary one behind a failed write."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)                           # the rename itself survives a power cut
    finally:
        os.close(folder)
