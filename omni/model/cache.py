"""ByteLRU: a thread-safe least-recently-used map bounded in bytes, with the counters a metrics page shows.

Used for the media cache (per-item encodings, CPU) and the prefix cache (keys/values and memory rows, on the model's
device). Every operation holds the lock only for dictionary work (no I/O, no tensor math), so admission and eviction
never wait on anything but other dictionary updates. A value larger than the whole budget is not kept; a budget of
0 keeps nothing. Knows nothing of what it stores: callers give each value's size in bytes.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

V = TypeVar("V")


@dataclass(frozen=True)
class CacheStats:
    """Counters since start (hits, misses, evictions, values refused as too large) and the current contents."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    refused: int = 0
    entries: int = 0
    bytes: int = 0
    budget_bytes: int = 0


PAGE_BYTES = 4096


class Allocated(Protocol):
    """A tensor or a numpy array: anything that says how many bytes its elements take."""

    @property
    def nbytes(self) -> int: ...


def resident_bytes(*arrays: Allocated | None) -> int:
    """What tensors / numpy arrays occupy once allocated: each rounded up to whole 4 KiB pages (None counts 0).
    Charging caches this, not the bare element bytes, keeps a process's resident memory near their budgets."""
    return sum(-(-a.nbytes // PAGE_BYTES) * PAGE_BYTES for a in arrays if a is not None)


class ByteLRU(Generic[V]):
    def __init__(self, budget_bytes: int):
        if budget_bytes < 0:
            raise ValueError(f"budget_bytes must be >= 0, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._bytes = 0
        self._hits = self._misses = self._evictions = self._refused = 0

    @property
    def enabled(self) -> bool:
        return self.budget_bytes > 0

    def get(self, key: Hashable) -> V | None:
        """The value (now the most recently used) or None; counts a hit or a miss."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return found[0]

    def __contains__(self, key: Hashable) -> bool:
        """Whether `key` is held now (counts nothing, changes no order)."""
        with self._lock:
            return key in self._entries

    def peek(self, key: Hashable) -> V | None:
        """The value if held now, counting nothing and changing no order (a hint: it may be gone a moment later)."""
        with self._lock:
            found = self._entries.get(key)
            return None if found is None else found[0]

    def put(self, key: Hashable, value: V, nbytes: int) -> bool:
        """Keep `value` (evicting the least recently used until it fits); False when it can never fit."""
        with self._lock:
            if nbytes > self.budget_bytes:
                self._refused += 1
                return False
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            while self._entries and self._bytes + nbytes > self.budget_bytes:
                _, (_, size) = self._entries.popitem(last=False)
                self._bytes -= size
                self._evictions += 1
            self._entries[key] = (value, nbytes)
            self._bytes += nbytes
            return True

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, self._evictions, self._refused, len(self._entries),
                              self._bytes, self.budget_bytes)
