"""ByteLRU: bounded in bytes, least recently used out first, counters, too-large values refused, thread-safe."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from omni.model.cache import ByteLRU


def test_evicts_the_least_recently_used_until_the_new_value_fits():
    cache = ByteLRU(100)
    assert cache.put("a", "A", 40) and cache.put("b", "B", 40)
    assert cache.get("a") == "A"                     # a is now the most recent
    assert cache.put("c", "C", 40)                   # b goes
    assert cache.get("b") is None and cache.get("a") == "A" and cache.get("c") == "C"
    s = cache.stats()
    assert (s.hits, s.misses, s.evictions, s.entries, s.bytes) == (3, 1, 1, 2, 80)


def test_a_value_larger_than_the_budget_is_refused_and_a_zero_budget_keeps_nothing():
    cache = ByteLRU(10)
    assert not cache.put("big", 1, 11) and "big" not in cache and cache.stats().refused == 1
    off = ByteLRU(0)
    assert not off.enabled and not off.put("x", 1, 1) and off.get("x") is None
    with pytest.raises(ValueError, match="budget_bytes must be >= 0, got -1"):
        ByteLRU(-1)


def test_replacing_a_key_counts_its_bytes_once_and_clear_empties():
    cache = ByteLRU(100)
    cache.put("a", 1, 60)
    cache.put("a", 2, 30)
    assert cache.stats().bytes == 30 and cache.get("a") == 2
    cache.clear()
    assert cache.stats().bytes == 0 and cache.get("a") is None


def test_concurrent_use_keeps_the_budget():
    cache = ByteLRU(1000)

    def work(i: int) -> None:
        for j in range(200):
            cache.put((i, j), j, 7)
            cache.get((i, j - 3))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    s = cache.stats()
    assert s.bytes == 7 * s.entries <= 1000 and s.entries == 1000 // 7
    assert s.evictions == 8 * 200 - s.entries
