"""HeapTrimmer: hands memory freed after big work back to the operating system, so a process's resident memory
follows what it holds (the caches' contents, the model) rather than what it once held.

glibc keeps freed blocks inside its heaps. Once caches evict entries of varying sizes, those holes stay resident
(measured, benchmarks/cache.py: 1,000 requests with distinct photos left a server 26 MiB above its caches' 64 MiB
of budgets; trimming after evictions keeps it under them); so do the activations of a long prefill (a 64k-token
request left 167 MiB behind, benchmarks/abuse.py). `malloc_trim(0)` releases the free pages of every heap. It takes
milliseconds and the heaps' locks, so it runs on a thread of its own, woken after a batch in which the caches evicted
something or that prefilled at least `big_batch_tokens`; it trims `settle_s` later, once the request that woke it has
let go of its tensors (at most once per `min_interval_s`). The model thread never waits for it. Where the C library has no `malloc_trim` (macOS, musl) nothing runs. Knows nothing of the caches or
the model beyond those two numbers.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


class HeapTrimmer:
    def __init__(self, min_interval_s: float = 0.05, trim: Callable[[int], int] | None = None,
                 big_batch_tokens: int = 8192, settle_s: float = 0.25):
        self.min_interval_s = min_interval_s
        self.settle_s = settle_s
        self.big_batch_tokens = big_batch_tokens
        self._trim = trim or _malloc_trim()
        self._seen_evictions = 0
        self._wanted = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.trims = 0

    def after_batch(self, evictions: int, tokens: int = 0) -> bool:
        """Ask for a trim when the caches evicted since the last call or the batch was big (returns at once);
        whether one was asked."""
        big = tokens >= self.big_batch_tokens
        if self._trim is None or (evictions <= self._seen_evictions and not big):
            return False
        self._seen_evictions = max(evictions, self._seen_evictions)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="omni-heap-trim", daemon=True)
                self._thread.start()
        self._wanted.set()
        return True

    def _loop(self) -> None:
        trim = self._trim
        assert trim is not None                # the thread starts only when there is one
        while True:
            self._wanted.wait()
            time.sleep(self.settle_s)      # let the request that asked finish and drop what it held
            self._wanted.clear()
            trim(0)
            self.trims += 1
            time.sleep(self.min_interval_s)
