"""A bank indexed for lookup: PDQ hashes and vPDQ videos' frames by Hamming distance, sha256 exactly.

PDQ lookups use faiss' multi-index hashing (`IndexBinaryMultiHash`): the 256 bits cut into 16 chunks of 16 bits,
each chunk a hash table; a query probes every bucket within `nflip` flipped bits of its own chunks. Two hashes at
distance d differ in some chunk by at most floor(d / 16) bits (the pigeonhole principle), so with
`nflip = threshold // 16` every entry within the threshold is found — exactly the brute-force answer (tested against
it), at about a millisecond for a million entries here instead of a scan of all of them.

    bank = Bank(read_bank("known.csv"), pdq_threshold=31)
    bank.match("pdq", "f8f8…")        # [Match(bank, version, entry, distance)], nearest first
    bank.match("sha256", "9f86…")
    bank.match_video([(quality, "f8f8…"), ...])   # the vPDQ entries a video's frames match

A vPDQ match is vPDQ's own rule (its README's comparison algorithm): each side's frames deduplicated by hash and
those below quality 50 dropped; a banked video matches when at least 80 % of its frames are within the threshold of
some frame of the request's video (and at least 0 % the other way: extra content around a banked clip does not
hide it). Every frame of every vpdq entry is in one multi-index, so a video's frames are looked up, not scanned.

The default threshold, 31 of 256 bits, is the one PDQ's authors give for matching; `pdq_threshold` sets another
per bank (0..63).
Knows nothing of media, HTTP, the engine or what a match is used for.
"""
from __future__ import annotations

from dataclasses import dataclass

import faiss
import numpy as np

from omni.banks.entries import (
    DEFAULT_PDQ_THRESHOLD,
    MAX_PDQ_THRESHOLD,
    VPDQ_MIN_QUALITY,
    BankEntry,
    BankError,
    BankFile,
    vpdq_features,
)

PDQ_BITS = 256
CHUNKS, CHUNK_BITS = 16, 16
VPDQ_BANKED_PERCENT = 80.0     # vPDQ's comparison threshold: how much of the banked video must be matched
VPDQ_QUERY_PERCENT = 0.0       # and how much of the request's video (0: padding around a banked clip is no escape)


@dataclass(frozen=True)
class Match:
    bank: str
    version: str
    entry: BankEntry
    distance: int          # Hamming bits (0 for sha256; vpdq: the farthest of the matched frames' nearest)
    banked_percent: float | None = None    # vpdq: the share of the banked video's frames matched
    query_percent: float | None = None     # vpdq: the share of the request's video's frames matched


class PdqIndex:
    """256-bit hashes in a multi-index hash table; `within(hash, threshold)` -> [(position, distance)], nearest first."""

    def __init__(self, hashes: list[bytes], max_threshold: int):
        self.count = len(hashes)
        self.index = faiss.IndexBinaryMultiHash(PDQ_BITS, CHUNKS, CHUNK_BITS)
        self.index.nflip = max_threshold // CHUNK_BITS
        self.max_threshold = max_threshold
        if hashes:
            self.index.add(np.frombuffer(b"".join(hashes), dtype=np.uint8).reshape(-1, PDQ_BITS // 8))

    def within(self, value: bytes, threshold: int) -> list[tuple[int, int]]:
        if not 0 <= threshold <= self.max_threshold:
            raise ValueError(f"threshold {threshold} is outside 0..{self.max_threshold} for this index")
        if self.count == 0:
            return []
        query = np.frombuffer(value, dtype=np.uint8).reshape(1, PDQ_BITS // 8)
        limits, distances, labels = self.index.range_search(query, threshold + 1)   # faiss: distance < radius
        found = sorted(zip(distances[limits[0]:limits[1]].tolist(), labels[limits[0]:limits[1]].tolist(),
                           strict=True))
        return [(int(position), int(distance)) for distance, position in found]


class Bank:
    def __init__(self, file: BankFile, pdq_threshold: int = DEFAULT_PDQ_THRESHOLD):
        if not 0 <= pdq_threshold <= MAX_PDQ_THRESHOLD:
            raise BankError(f"{file.path}: pdq_threshold {pdq_threshold} is outside 0..{MAX_PDQ_THRESHOLD}")
        self.file, self.name, self.version = file, file.name, file.version
        self.pdq_threshold = pdq_threshold
        self._entries: dict[str, list[BankEntry]] = {kind: [] for kind in ("pdq", "vpdq")}
        self._sha256: dict[str, BankEntry] = {}
        for entry in file.entries:
            if entry.hash_type == "sha256":
                self._sha256[entry.hash] = entry
            else:
                self._entries[entry.hash_type].append(entry)
        self._pdq = PdqIndex([bytes.fromhex(e.hash) for e in self._entries["pdq"]], pdq_threshold)
        frames: list[bytes] = []
        self._frame_owner: list[tuple[int, int]] = []      # index position -> (vpdq entry, its frame)
        self._video_frames: list[int] = []                 # per vpdq entry: its frames compared
        for number, entry in enumerate(self._entries["vpdq"]):
            kept = compared_frames([(quality, digits) for _, quality, digits, _ in vpdq_features(entry.hash)])
            self._video_frames.append(len(kept))
            for position, digits in enumerate(kept):
                frames.append(bytes.fromhex(digits))
                self._frame_owner.append((number, position))
        self._vpdq = PdqIndex(frames, pdq_threshold)

    def __len__(self) -> int:
        return len(self.file.entries)

    @property
    def pdq_entries(self) -> int:
        return len(self._entries["pdq"])

    @property
    def vpdq_entries(self) -> int:
        return len(self._entries["vpdq"])

    def match(self, hash_type: str, value: str | bytes) -> list[Match]:
        """Entries of `hash_type` matching `value` (hex or raw bytes), nearest first."""
        raw = bytes.fromhex(value) if isinstance(value, str) else value
        if len(raw) != PDQ_BITS // 8:
            raise ValueError(f"a {hash_type} hash is {PDQ_BITS // 8} bytes, not {len(raw)}")
        if hash_type == "sha256":
            entry = self._sha256.get(raw.hex())
            return [Match(self.name, self.version, entry, 0)] if entry else []
        if hash_type != "pdq":
            raise ValueError(f"unknown hash type {hash_type!r} (a video's vpdq: match_video)")
        entries = self._entries["pdq"]
        return [Match(self.name, self.version, entries[position], distance)
                for position, distance in self._pdq.within(raw, self.pdq_threshold)]

    def match_video(self, frames: list[tuple[int, str]]) -> list[Match]:
        """The vpdq entries a video's frames, (quality, hex) each, match by vPDQ's rule; nearest first."""
        query = compared_frames(frames)
        if not query or not self._entries["vpdq"]:
            return []
        hit_frames: dict[int, set[int]] = {}          # entry -> its frames some query frame is near
        nearest: dict[int, dict[str, int]] = {}       # entry -> query frame -> its nearest distance
        for digits in query:
            for position, distance in self._vpdq.within(bytes.fromhex(digits), self.pdq_threshold):
                entry, frame = self._frame_owner[position]
                hit_frames.setdefault(entry, set()).add(frame)
                best = nearest.setdefault(entry, {})
                best[digits] = min(distance, best.get(digits, distance))
        found = []
        for entry, frames_hit in hit_frames.items():
            banked = 100.0 * len(frames_hit) / self._video_frames[entry]
            queried = 100.0 * len(nearest[entry]) / len(query)
            if banked >= VPDQ_BANKED_PERCENT and queried >= VPDQ_QUERY_PERCENT:
                found.append(Match(self.name, self.version, self._entries["vpdq"][entry], max(nearest[entry].values()),
                                   round(banked, 1), round(queried, 1)))
        return sorted(found, key=lambda match: (match.distance, -(match.banked_percent or 0.0), match.entry.line))


def compared_frames(frames: list[tuple[int, str]]) -> list[str]:
    """vPDQ's frames to compare: each hash once (its first frame's quality), those below quality 50 dropped."""
    seen: dict[str, int] = {}
    for quality, digits in frames:
        seen.setdefault(digits, quality)
    return [digits for digits, quality in seen.items() if quality >= VPDQ_MIN_QUALITY]
