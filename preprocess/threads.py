"""`ThreadBudget`: how many threads may decode media at once, shared by every request of one model.

A request's own thread always counts as one; `lend(wanted)` adds as many idle threads as there are, up to `wanted`
in all, and takes them back when the block ends. So a lone video request gets FFmpeg frame threads (or a request's
photos decode side by side), while under load every request decodes on its own thread alone and the busy count
stays at most `total`, plus one for each request that arrives while every thread is lent (it still runs on its
own thread: nothing waits for a lent thread).

`total` comes from the engine's `decode_threads` (the pool that decodes requests), capped at the machine's cores:
on 2 cores no more than 2 threads decode, beside the model thread. Knows nothing of what the threads do.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ThreadBudget:
    """At most `total` (capped at the cores) threads decoding media at once, a caller's own thread included."""

    def __init__(self, total: int = 1) -> None:
        self.total = max(1, min(total, os.cpu_count() or 1))
        self._busy = 0
        self._lock = threading.Lock()

    @property
    def busy(self) -> int:
        """Threads lent right now (callers' own threads included)."""
        return self._busy

    @contextmanager
    def lend(self, wanted: int) -> Iterator[int]:
        """Between 1 (the caller's own thread) and `wanted` threads, as many as are idle, for the block."""
        with self._lock:
            granted = max(1, min(wanted, self.total - self._busy))
            self._busy += granted
        try:
            yield granted
        finally:
            with self._lock:
                self._busy -= granted
