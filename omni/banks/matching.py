"""A request's media looked up in the banks in force: which entries match, and whether a match decides the request.

`BankSet(banks).consult(items, limits)` hashes every medium once (sha256 of its bytes; PDQ of a photo as the model
sees it, upright, when some bank holds PDQ hashes) and looks each hash up in every bank. A photo that cannot be decoded is no error here: it is
noted as a hash failure (the model's own decoding answers for it) and the sha256 lookups still run.

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

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from omni.banks.index import Bank, Match
from preprocess.errors import MediaError
from preprocess.hashes import pdq_of_image, sha256_of
from preprocess.item import MediaItem
from preprocess.media import MediaLimits

PRECEDENCE = {"act": 0, "review": 1, "pass": 2, "flag": 3}
DECIDING = ("act", "review")


@dataclass(frozen=True)
class MediumMatch:
    medium: str            # "images[0]": the request's slot and index
    hash_type: str         # pdq | sha256
    match: Match

    def to_wire(self) -> dict:
        """`x_match`: the bank (name, version), the entry's label, action, source and line, the distance in bits,
        the medium and the hash type it matched by."""
        entry = self.match.entry
        return {"bank": self.match.bank, "version": self.match.version, "label": entry.label,
                "distance": self.match.distance, "action": entry.action, "medium": self.medium,
                "hash_type": self.hash_type, "source": entry.source, "line": entry.line}


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
    """The banks in force, in the order given; immutable (a reload builds a new one)."""

    def __init__(self, banks: Sequence[Bank]):
        self.banks = tuple(banks)
        self.has_pdq = any(bank.pdq_entries for bank in self.banks)   # else photos are not decoded to be hashed

    def __len__(self) -> int:
        return len(self.banks)

    def named(self) -> tuple[dict, ...]:
        """The banks as an audit record names them: name and version."""
        return tuple({"name": bank.name, "version": bank.version} for bank in self.banks)

    def consult(self, items: Sequence[MediaItem], limits: MediaLimits = MediaLimits()) -> Verdict:
        if not self.banks or not items:
            return Verdict(media=len(items))
        started = time.perf_counter()
        found: list[tuple[tuple, MediumMatch]] = []
        failures: list[str] = []
        matched_by_medium: dict[str, set[str]] = {}
        for position, item in enumerate(items):
            medium = f"{item.slot}[{item.index}]"
            hashes = [("sha256", sha256_of(item.data))]
            if item.slot == "images" and self.has_pdq:
                try:
                    hashes.append(("pdq", pdq_of_image(item, limits).hex))
                except (MediaError, ValueError, RuntimeError, MemoryError):   # the model's decoding answers for it
                    failures.append(medium)
            for order, bank in enumerate(self.banks):
                for hash_type, value in hashes:
                    for match in bank.match(hash_type, value):
                        action = match.entry.action
                        matched_by_medium.setdefault(medium, set()).add(action)
                        key = (PRECEDENCE[action], match.distance, order, position)
                        found.append((key, MediumMatch(medium, hash_type, match)))
        found.sort(key=lambda pair: pair[0])
        matches = tuple(m for _, m in found)
        shown = matches[0] if matches else None
        return Verdict(matches, tuple(failures), len(items), (time.perf_counter() - started) * 1e3, shown,
                       shown is not None and _decides(shown, matched_by_medium, len(items)))


def _decides(shown: MediumMatch, actions_by_medium: dict[str, set[str]], media: int) -> bool:
    action = shown.match.entry.action
    if action in DECIDING:
        return True
    if action == "pass":
        return len(actions_by_medium) == media and all("pass" in a for a in actions_by_medium.values())
    return False
