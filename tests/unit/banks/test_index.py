"""A bank's lookups: PDQ within the threshold exactly as a brute-force scan finds them (the multi-index hashing
misses nothing at the edge, distance == threshold, and finds nothing past it), nearest first; sha256 exactly."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from omni.banks.entries import BankEntry, BankError, BankFile
from omni.banks.index import Bank


def bank_of(hashes: list[str], kind: str = "pdq", threshold: int = 31) -> Bank:
    entries = tuple(BankEntry(kind, h, f"label-{i}", "act", "test", "2026-12-04T00:00:00Z", i + 2)
                    for i, h in enumerate(hashes))
    return Bank(BankFile("known", None, "v1", entries), pdq_threshold=threshold)  # type: ignore[arg-type]


def flip(value: bytes, bits: np.ndarray) -> bytes:
    out = bytearray(value)
    for bit in bits:
        out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


@pytest.mark.parametrize("threshold", [31, 20, 0, 47])
def test_pdq_lookups_equal_a_brute_force_scan(threshold):
    rng = np.random.default_rng(threshold)
    stored = [rng.integers(0, 256, 32, dtype=np.uint8).tobytes() for _ in range(3000)]
    bank = bank_of([h.hex() for h in stored], threshold=threshold)
    matrix = np.unpackbits(np.frombuffer(b"".join(stored), dtype=np.uint8).reshape(-1, 32), axis=1)
    # queries at every distance around the threshold from a stored hash, and random ones
    queries = [flip(stored[i], rng.choice(256, d, replace=False))
               for i, d in enumerate([0, 1, threshold - 1, threshold, threshold + 1, threshold + 5] * 10) if d >= 0]
    queries += [rng.integers(0, 256, 32, dtype=np.uint8).tobytes() for _ in range(20)]
    near = 0
    for query in queries:
        distances = (np.unpackbits(np.frombuffer(query, dtype=np.uint8)) != matrix).sum(axis=1)
        expected = sorted((int(distances[i]), i) for i in np.flatnonzero(distances <= threshold))
        got = [(m.distance, m.entry.line - 2) for m in bank.match("pdq", query)]
        assert got == expected
        near += bool(expected)
    assert near >= 20                                  # the edge cases were really at the edge


def test_vpdq_videos_pdq_photos_and_sha256_are_looked_up_in_their_own_kind():
    pdq = "0f" * 32
    sha = hashlib.sha256(b"known bytes").hexdigest()
    entries = (BankEntry("vpdq", f"0,100,{pdq},0.000", "clip", "flag", "t", "2026-12-04T00:00:00Z", 2),
               BankEntry("sha256", sha, "file", "act", "t", "2026-12-04T00:00:00Z", 3))
    bank = Bank(BankFile("mixed", None, "v2", entries))  # type: ignore[arg-type]
    [video] = bank.match_video([(100, pdq)])
    assert (video.entry.label, video.distance, video.banked_percent, video.query_percent) == ("clip", 0, 100.0, 100.0)
    assert bank.match("pdq", pdq) == [] and bank.match_video([(40, pdq)]) == []      # a flat frame is not compared
    [match] = bank.match("sha256", sha)
    assert (match.bank, match.version, match.distance, match.entry.action) == ("mixed", "v2", 0, "act")
    assert bank.match("sha256", hashlib.sha256(b"other").hexdigest()) == [] and len(bank) == 2
    with pytest.raises(ValueError, match="32 bytes"):
        bank.match("pdq", "abcd")
    with pytest.raises(ValueError, match="match_video"):
        bank.match("vpdq", pdq)
    with pytest.raises(BankError, match="outside 0..63"):
        bank_of([], threshold=64)
