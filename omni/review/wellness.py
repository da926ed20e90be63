"""Reviewer wellness: which items' media are shielded (shown blurred, greyscale and muted until the reviewer reveals
each one), how many shielded media each reviewer revealed today, and a daily limit past which their further shielded
items go to others.

Shield rules (`omni serve --review-shield RULE`, repeatable; an item is shielded when any rule holds):

    all                  every item
    outcome=OUTCOME      items whose policy outcome is OUTCOME (act, review, pass)
    QUESTION=ANSWER      items whose model answer to QUESTION is ANSWER (a label id: true, false, an option, a level)
    QUEUE:RULE           the rule in that queue only (policy, qa, kept, a batch's queue id, disagreements)

Daily limits (`--review-daily-limit`, repeatable): `N` for everyone, `queue:QUEUE=N` in one queue, `reviewer:NAME=N`
for one reviewer (the reviewer's own first, then the queue's, then everyone's; 0 means none may be revealed).
Exposures are counted per reviewer and UTC day, once per medium, and appended to `REVIEW_DIR/exposure.jsonl` (read
back at start: a restart forgets nothing). A medium a reviewer revealed stays revealed to them. A reviewer at their
limit no longer sees shielded items they have not revealed in the queue's list (they stay for the others), and a
reveal past the limit is refused (`ExposureLimit`).
Knows nothing of HTTP, the model or the browser.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from omni.contract.errors import OmniError
from omni.review.history import append_lines

EXPOSURE_FILE = "exposure.jsonl"
OUTCOMES = ("act", "review", "pass")


class WellnessSettingError(ValueError):
    """A shield rule or a daily limit that cannot be read; the message names the entry."""


class ExposureLimit(OmniError):
    """The reviewer revealed as many shielded media today as their limit allows."""


@dataclass(frozen=True)
class ShieldRule:
    queue: str | None
    kind: str                  # all | outcome | answer
    question: str | None = None
    value: str | None = None

    def holds(self, queue_id: str, outcome: str | None, answers: dict[str, str | None]) -> bool:
        if self.queue is not None and self.queue != queue_id:
            return False
        if self.kind == "all":
            return True
        if self.kind == "outcome":
            return outcome == self.value
        return self.question is not None and answers.get(self.question) == self.value


def parse_shield(entry: str) -> ShieldRule:
    text = entry.strip()
    queue, sep, rule = text.partition(":")
    if not sep:
        queue, rule = "", text
    if rule == "all":
        return ShieldRule(queue or None, "all")
    name, eq, value = rule.partition("=")
    if not eq or not name.strip() or not value.strip():
        raise WellnessSettingError(f"review_shield {entry!r}: give all, outcome=OUTCOME or QUESTION=ANSWER, "
                                   f"optionally after QUEUE:")
    if name.strip() == "outcome":
        if value.strip() not in OUTCOMES:
            raise WellnessSettingError(f"review_shield {entry!r}: an outcome is one of {', '.join(OUTCOMES)}")
        return ShieldRule(queue or None, "outcome", value=value.strip())
    return ShieldRule(queue or None, "answer", name.strip(), value.strip())


@dataclass(frozen=True)
class Limits:
    everyone: int | None = None
    queues: tuple[tuple[str, int], ...] = ()
    reviewers: tuple[tuple[str, int], ...] = ()

    def for_(self, reviewer: str, queue_id: str) -> int | None:
        for name, n in self.reviewers:
            if name == reviewer:
                return n
        for name, n in self.queues:
            if name == queue_id:
                return n
        return self.everyone


def parse_limits(entries: Sequence[str]) -> Limits:
    everyone: int | None = None
    queues: list[tuple[str, int]] = []
    reviewers: list[tuple[str, int]] = []
    for entry in entries:
        text = entry.strip()
        scope, sep, rest = text.partition(":")
        if not sep:
            everyone = _count(text, entry)
            continue
        name, eq, n = rest.partition("=")
        if scope not in ("queue", "reviewer") or not eq or not name.strip():
            raise WellnessSettingError(f"review_daily_limit {entry!r}: give N, queue:QUEUE=N or reviewer:NAME=N")
        (queues if scope == "queue" else reviewers).append((name.strip(), _count(n, entry)))
    return Limits(everyone, tuple(queues), tuple(reviewers))


def _count(text: str, entry: str) -> int:
    if not text.strip().isdigit():
        raise WellnessSettingError(f"review_daily_limit {entry!r}: a limit is a whole number of media from 0")
    return int(text)


class Wellness:
    def __init__(self, shield: Sequence[str], limits: Sequence[str], root: str | Path,
                 clock: Callable[[], float] = time.time):
        self.rules = tuple(parse_shield(entry) for entry in shield)
        self.limits = parse_limits(limits)
        self.path = Path(root) / EXPOSURE_FILE
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: set[tuple[str, str, int]] = set()                 # (reviewer, key, index): revealed, ever
        self._today: dict[tuple[str, str], set[tuple[str, int]]] = {}   # (reviewer, day) -> media revealed that day
        if self.path.exists():
            for text in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    event = json.loads(text)
                    self._count(str(event["reviewer"]), str(event["day"]), str(event["key"]), int(event["index"]))
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    continue                                          # a torn last line: that reveal never happened

    def _count(self, reviewer: str, day: str, key: str, index: int) -> None:
        self._seen.add((reviewer, key, index))
        self._today.setdefault((reviewer, day), set()).add((key, index))

    def day(self) -> str:
        return datetime.fromtimestamp(self.clock(), timezone.utc).strftime("%Y-%m-%d")

    def shields(self, queue_id: str, outcome: str | None, answers: dict[str, str | None]) -> bool:
        return any(rule.holds(queue_id, outcome, answers) for rule in self.rules)

    def revealed(self, reviewer: str, key: str, index: int) -> bool:
        with self._lock:
            return (reviewer, key, index) in self._seen

    def exposure(self, reviewer: str, queue_id: str) -> dict[str, int | None]:
        with self._lock:
            today = len(self._today.get((reviewer, self.day()), ()))
        return {"today": today, "limit": self.limits.for_(reviewer, queue_id)}

    def at_limit(self, reviewer: str, queue_id: str) -> bool:
        exposure = self.exposure(reviewer, queue_id)
        return exposure["limit"] is not None and int(exposure["today"] or 0) >= exposure["limit"]

    def reveal(self, reviewer: str, queue_id: str, key: str, index: int) -> dict[str, int | None]:
        """Count one reveal (once per medium and reviewer); ExposureLimit past the reviewer's limit for today."""
        day = self.day()
        with self._lock:
            if (reviewer, key, index) not in self._seen:
                limit = self.limits.for_(reviewer, queue_id)
                today = len(self._today.get((reviewer, day), ()))
                if limit is not None and today >= limit:
                    raise ExposureLimit(f"{reviewer} revealed {today} shielded media today, the daily limit"
                                        f"{' in ' + queue_id if (queue_id, limit) in self.limits.queues else ''} "
                                        f"is {limit}: further shielded items go to others")
                append_lines(self.path, [json.dumps({"reviewer": reviewer, "day": day, "queue": queue_id, "key": key,
                                                     "index": index, "at": self.clock()})], sync=True)
                self._count(reviewer, day, key, index)
        return self.exposure(reviewer, queue_id)
