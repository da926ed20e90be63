"""A request's media looked up in the banks in force: which entries match, and whether a match decides the request.

`BankSet(banks, video_features).consult(items, limits)` hashes every medium once and looks each hash up in every
bank: first every medium's sha256 (its bytes); then, unless an exact copy already matched an `act` entry (nothing
could outrank it: the request is acted on without decoding anything), each photo's PDQ as the model sees it
(upright), when some bank holds PDQ hashes, and each video's vPDQ (`video_features`, a worker process's), when some
bank holds vPDQ hashes. A medium that cannot be hashed is no error here: it is noted as a hash failure (the model's
own decoding answers for it) and its sha256 lookups still count.

Which match is shown and whether it decides without a forward pass (`Verdict`):
- `act` or `review`: one matching medium is enough — known-bad content is acted on, or sent to people, whatever the
  rest of the request holds;
- `pass`: only when *every* medium of the request matched a `pass` entry (nothing unknown is left for the model);
  a pass match beside an unmatched medium rides along, like a flag;
- `flag`: never decides: the model answers and the match rides alongside.
Between matches: act before review before pass before flag, then the nearest (fewest bits), then the bank given
first, then the earlier medium. The state text is not hashed: a bank speaks for media only (docs/banks.md).
Knows nothing of HTTP, the engine, the model, policies or how a verdict is shown.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from omni.banks.index import Bank, Match
from preprocess.errors import MediaError
from preprocess.hashes import VpdqFeature, pdq_of_image, sha256_of
from preprocess.item import MediaItem
from preprocess.media import MediaLimits


class VideoFeatures(Protocol):
    """A video's vPDQ features; `cancelled` set: the caller no longer wants them (a wait for a worker may end)."""

    def __call__(self, item: MediaItem, limits: MediaLimits, cancelled: threading.Event | None = None, /
                 ) -> tuple[VpdqFeature, ...]: ...


Perceptual = str | list[tuple[int, str]] | None     # a photo's PDQ hex, a video's vPDQ frames, or nothing to hash
HASH_FAILURES = (MediaError, ValueError, RuntimeError, MemoryError, OSError)   # the model's decoding answers for it

PRECEDENCE = {"act": 0, "review": 1, "pass": 2, "flag": 3}
DECIDING = ("act", "review")


@dataclass(frozen=True)
class MediumMatch:
    medium: str            # "images[0]": the request's slot and index
    hash_type: str         # pdq | vpdq | sha256
    match: Match

    def to_wire(self) -> dict:
        """`x_match`: the bank (name, version), the entry's label, action, source and line, the distance in bits,
        the medium and the hash type it matched by."""
        entry = self.match.entry
        wire = {"bank": self.match.bank, "version": self.match.version, "label": entry.label,
                "distance": self.match.distance, "action": entry.action, "medium": self.medium,
                "hash_type": self.hash_type, "source": entry.source, "line": entry.line}
        if self.match.banked_percent is not None:      # vpdq: how much of each video matched
            wire["banked_match_percent"] = self.match.banked_percent
            wire["query_match_percent"] = self.match.query_percent
        return wire


@dataclass(frozen=True)
class Verdict:
    matches: tuple[MediumMatch, ...] = ()     # every match, in precedence order
    hash_failures: tuple[str, ...] = ()       # media whose perceptual hash could not be computed ("images[1]")
    media: int = 0                            # media consulted
    lookup_ms: float = 0.0
    shown: MediumMatch | None = field(default=None)    # the match a response names (`x_match`), None: no match
    decides: bool = False                     # the shown match answers without a forward pass

    @property
    def action(self) -> str | None:
        return self.shown.match.entry.action if self.shown is not None else None


class BankSet:
    """The banks in force, in the order given; immutable (a reload builds a new one). `video_features` computes a
    video's vPDQ (required when a bank holds vpdq entries)."""

    def __init__(self, banks: Sequence[Bank], video_features: VideoFeatures | None = None):
        self.banks = tuple(banks)
        self.has_pdq = any(bank.pdq_entries for bank in self.banks)   # else photos are not decoded to be hashed
        self.has_vpdq = any(bank.vpdq_entries for bank in self.banks)  # else videos are not
        if self.has_vpdq and video_features is None:
            raise ValueError("a bank holds vpdq hashes: give video_features")
        self.video_features = video_features

    def __len__(self) -> int:
        return len(self.banks)

    def named(self) -> tuple[dict, ...]:
        """The banks as an audit record names them: name and version."""
        return tuple({"name": bank.name, "version": bank.version} for bank in self.banks)

    def consult(self, items: Sequence[MediaItem], limits: MediaLimits = MediaLimits(),
                waiting_for_videos: Callable[[], None] | None = None) -> Verdict:
        """`waiting_for_videos()`, when given, is called once (on this thread) when the photos are matched, no `act`
        match decided, and the videos' vPDQ hashes are still to come: the slow part, which a caller may overlap
        with decoding the request's media for the model. It must not raise."""
        if not self.banks or not items:
            return Verdict(media=len(items))
        started = time.perf_counter()
        found = _Found()
        failures: list[str] = []
        media = [(position, f"{item.slot}[{item.index}]", item) for position, item in enumerate(items)]
        for position, medium, item in media:
            digest = sha256_of(item.data)
            for order, bank in enumerate(self.banks):
                found.note(position, medium, "sha256", bank.match("sha256", digest), order)
        if not found.acted:
            self._match_perceptual(media, limits, found, failures, waiting_for_videos)
        matches = found.in_order()
        shown = matches[0] if matches else None
        return Verdict(matches, tuple(failures), len(items), (time.perf_counter() - started) * 1e3, shown,
                       shown is not None and _decides(shown, found.actions_by_medium, len(items)))

    def _match_perceptual(self, media: list[tuple[int, str, MediaItem]], limits: MediaLimits, found: _Found,
                          failures: list[str], waiting_for_videos: Callable[[], None] | None = None) -> None:
        """Each medium's perceptual hash matched in every bank, until an act match decides."""
        perceiving = self._perceive(media, limits)
        try:
            for position, medium, perceived in perceiving:
                if waiting_for_videos is not None and self.has_vpdq and medium.startswith("videos["):
                    waiting_for_videos()          # the photos are done: only the videos' hashes are left
                    waiting_for_videos = None
                try:
                    perceptual = perceived()
                except HASH_FAILURES:
                    failures.append(medium)
                    continue
                for order, bank in enumerate(self.banks):
                    if isinstance(perceptual, str):
                        found.note(position, medium, "pdq", bank.match("pdq", perceptual), order)
                    elif perceptual is not None:
                        found.note(position, medium, "vpdq", bank.match_video(perceptual), order)
                if found.acted:     # an act match decides alone: the media after it are not waited for
                    break
        finally:     # a video still hashing is let go
            perceiving.close()

    def _perceive(self, media: list[tuple[int, str, MediaItem]], limits: MediaLimits
                  ) -> Generator[tuple[int, str, Callable[[], Perceptual]], None, None]:
        """Each medium with a way to get its perceptual hash: the videos' go to their worker processes at once, each
        from a thread of its own, while this thread hashes the photos (a video's hash is mostly waiting); the photos
        come first, so an act match on one is answered without waiting for the videos."""
        videos = [item for _, _, item in media if item.slot == "videos"] if self.has_vpdq else []
        pool = ThreadPoolExecutor(max_workers=len(videos), thread_name_prefix="vpdq-wait") if videos else None
        cancelled = threading.Event()
        try:
            pending = {id(item): pool.submit(self._perceptual, item, limits, cancelled) for item in videos} if pool else {}
            for position, medium, item in sorted(media, key=lambda entry: id(entry[2]) in pending):   # photos first
                future = pending.get(id(item))
                yield position, medium, future.result if future else partial(self._perceptual, item, limits)
        finally:    # a video not waited for: one still waiting for a worker leaves, one hashing ends within its timeout
            cancelled.set()
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    def _perceptual(self, item: MediaItem, limits: MediaLimits, cancelled: threading.Event | None = None
                    ) -> Perceptual:
        """A photo's PDQ hex, a video's vPDQ frames (quality, hex), or None (no bank holds that kind)."""
        if item.slot == "images" and self.has_pdq:
            return pdq_of_image(item, limits).hex
        if item.slot == "videos" and self.has_vpdq and self.video_features is not None:
            return [(feature.quality, feature.hex) for feature in self.video_features(item, limits, cancelled)]
        return None


class _Found:
    """The matches of one consultation, each keyed for the precedence order, and the actions matched per medium."""

    def __init__(self) -> None:
        self.keyed: list[tuple[tuple, MediumMatch]] = []
        self.actions_by_medium: dict[str, set[str]] = {}
        self.acted = False

    def note(self, position: int, medium: str, hash_type: str, matches: list[Match], order: int) -> None:
        for match in matches:
            action = match.entry.action
            self.actions_by_medium.setdefault(medium, set()).add(action)
            self.acted = self.acted or action == "act"
            self.keyed.append(((PRECEDENCE[action], match.distance, order, position),
                               MediumMatch(medium, hash_type, match)))

    def in_order(self) -> tuple[MediumMatch, ...]:
        return tuple(match for _, match in sorted(self.keyed, key=lambda pair: pair[0]))


def _decides(shown: MediumMatch, actions_by_medium: dict[str, set[str]], media: int) -> bool:
    action = shown.match.entry.action
    if action in DECIDING:
        return True
    if action == "pass":
        return len(actions_by_medium) == media and all("pass" in a for a in actions_by_medium.values())
    return False
