"""Admission of long prefills: refuse at once (429) a long request that cannot finish before its deadline.

Long prefixes run a chunk at a time and, in the batcher, one after the other (oldest first). A request arriving while
several are under way waits for all of them; without a check it would be queued, time out at its deadline with a 504
and have spent nothing but the caller's time. `PrefillBacklog` keeps the prefix tokens still to prefill for every
admitted long request and what a prefix token costs here, in wall seconds, measured on this machine as long requests
finish (first turn to last, so the other work interleaved between chunks is included). A new long request is
admitted only when the backlog ahead of it plus its own prefix, at that rate and with a safety margin, fits in what
is left of its deadline; otherwise it gets `Overloaded` with a Retry-After of about the backlog's time.

The rate is a token-weighted running average of the wall time between consecutive chunks while long requests are
under way: it includes the fresh batches interleaved between chunks and counts every second once, however
many long requests wait. Before the first chunk ran, everything is admitted.

Knows nothing of torch, HTTP or the model: callers pass opaque keys, token counts and seconds.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass, field

from omni.contract.errors import Overloaded

SAFETY_FACTOR = 1.5           # the estimate must fit the time left with this much to spare (load varies, and a
                              # prefix's late chunks cost more than its early ones: attention grows with position)
DECAY = 0.02                  # per chunk: older chunks count less (about the last 50, a whole 64k prefix, weigh most)


@dataclass
class _Long:
    tokens: int                          # the prefix tokens it had to prefill
    left: int                            # still to prefill


@dataclass
class PrefillBacklog:
    """Thread-safe. `admit` before queueing; `chunk_done` after every chunk; `finish` when the request ends (any way)."""

    safety_factor: float = SAFETY_FACTOR
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _longs: dict = field(default_factory=dict, repr=False)
    _wall_s: float = 0.0                        # decayed sums of wall seconds and tokens between chunks
    _wall_tokens: float = 0.0
    _last_at: float | None = None               # the last chunk's end (or the first admission) while busy
    refused: int = 0

    def seconds_per_token(self) -> float | None:
        """The wall seconds one prefix token of a long request costs now, or None before anything was measured."""
        with self._lock:
            return self._rate_locked()

    def admit(self, key: Hashable, tokens: int, seconds_left: float) -> None:
        """Take the long request `key` (`tokens` prefix tokens to prefill) or raise Overloaded when the backlog ahead
        and its own prefill would not finish within `seconds_left`."""
        with self._lock:
            rate = self._rate_locked()
            ahead = sum(long.left for long in self._longs.values())
            if rate is not None and ahead:
                needed_s = (ahead + tokens) * rate * self.safety_factor
                if needed_s > seconds_left:
                    self.refused += 1
                    wait_s = ahead * rate
                    raise Overloaded(
                        f"the model is busy with {len(self._longs)} long request(s) (about {wait_s:.0f} s of work "
                        f"ahead); this one needs about {tokens * rate:.0f} s more and would not finish within its "
                        f"{seconds_left:.0f} s deadline", retry_after_s=round(min(60.0, max(1.0, wait_s)), 1))
            if not self._longs:
                self._last_at = time.monotonic()
            self._longs[key] = _Long(tokens, tokens)

    def chunk_done(self, key: Hashable, tokens_left: int, chunk_tokens: int) -> None:
        """One chunk of `key` (`chunk_tokens` tokens) ran; `tokens_left` are still to prefill."""
        now = time.monotonic()
        with self._lock:
            long = self._longs.get(key)
            if long is None:
                return
            long.left = max(0, tokens_left)
            if self._last_at is not None and chunk_tokens > 0:
                self._wall_s = (1 - DECAY) * self._wall_s + (now - self._last_at)
                self._wall_tokens = (1 - DECAY) * self._wall_tokens + chunk_tokens
            self._last_at = now

    def finish(self, key: Hashable) -> None:
        """`key` ended (answered, failed, expired or cancelled): it no longer holds the model."""
        with self._lock:
            self._longs.pop(key, None)
            if not self._longs:
                self._last_at = None

    def __len__(self) -> int:
        with self._lock:
            return len(self._longs)

    def _rate_locked(self) -> float | None:
        return self._wall_s / self._wall_tokens if self._wall_tokens else None
