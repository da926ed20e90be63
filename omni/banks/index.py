"""A bank indexed for lookup: PDQ (and vPDQ frame) hashes by Hamming distance, sha256 exactly.

PDQ lookups use faiss' multi-index hashing (`IndexBinaryMultiHash`): the 256 bits cut into 16 chunks of 16 bits,
each chunk a hash table; a query probes every bucket within `nflip` flipped bits of its own chunks. Two hashes at
distance d differ in some chunk by at most floor(d / 16) bits (the pigeonhole principle), so with
`nflip = threshold // 16` every entry within the threshold is found — exactly the brute-force answer (tested against
it), at about a millisecond for a million entries here instead of a scan of all of them.

    bank = Bank(read_bank("known.csv"), pdq_threshold=31)
    bank.match("pdq", "f8f8…")        # [Match(bank, version, entry, distance)], nearest first
    bank.match("sha256", "9f86…")

The default threshold, 31 of 256 bits, is the one PDQ's authors give for matching; `pdq_threshold` sets another
per bank (0..63).
Knows nothing of media, HTTP, the engine or what a match is used for.
"""
from __future__ import annotations

from dataclasses import dataclass

import faiss
import numpy as np

from omni.banks.entries import DEFAULT_PDQ_THRESHOLD, MAX_PDQ_THRESHOLD, BankEntry, BankError, BankFile

PDQ_BITS = 256
CHUNKS, CHUNK_BITS = 16, 16


@dataclass(frozen=True)
class Match:
    bank: str
    version: str
    entry: BankEntry
    distance: int          # Hamming bits (0 for sha256)


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
        self._indexes = {kind: PdqIndex([bytes.fromhex(e.hash) for e in entries], pdq_threshold)
                         for kind, entries in self._entries.items()}

    def __len__(self) -> int:
        return len(self.file.entries)

    @property
    def pdq_entries(self) -> int:
        return len(self._entries["pdq"])

    def match(self, hash_type: str, value: str | bytes) -> list[Match]:
        """Entries of `hash_type` matching `value` (hex or raw bytes), nearest first."""
        raw = bytes.fromhex(value) if isinstance(value, str) else value
        if len(raw) != PDQ_BITS // 8:
            raise ValueError(f"a {hash_type} hash is {PDQ_BITS // 8} bytes, not {len(raw)}")
        if hash_type == "sha256":
            entry = self._sha256.get(raw.hex())
            return [Match(self.name, self.version, entry, 0)] if entry else []
        if hash_type not in self._indexes:
            raise ValueError(f"unknown hash type {hash_type!r}")
        entries = self._entries[hash_type]
        return [Match(self.name, self.version, entries[position], distance)
                for position, distance in self._indexes[hash_type].within(raw, self.pdq_threshold)]
