"""vPDQ hashes of a server's request videos, computed in worker processes: a video that crashes or hangs FFmpeg (a
hostile file) costs a worker and that one hash, never the server, and `vpdq` (which holds the GIL while it decodes)
never stalls the other requests' threads.

    hasher = VideoHasher(workers=1, timeout_s=20.0)
    hasher.features(item, limits)   # tuple[VpdqFeature, ...]; MediaError for a bad video; VideoHashFailed otherwise
    hasher.close()

Workers are spawned (a clean interpreter: no inherited threads or model), once, on the first video. A hash that does
not come back within `timeout_s` (or whose worker died) ends the whole pool, which is started again for the next
video; hashes in flight on it fail the same way (each one a counted miss: the model still answers).
Knows nothing of banks, HTTP, the engine or what a hash is used for.
"""
from __future__ import annotations

import multiprocessing
import threading
from multiprocessing.pool import Pool

from preprocess.errors import MediaError
from preprocess.hashes import VpdqFeature, vpdq_of_video
from preprocess.item import MediaItem
from preprocess.media import MediaLimits


class VideoHashFailed(RuntimeError):
    """The worker did not answer in time or died: the video is not hashed (a counted miss)."""


def _hash(item: MediaItem, limits: MediaLimits) -> tuple[VpdqFeature, ...] | MediaError:
    """In a worker: the features, or the typed media error (returned: it pickles as a value, not a traceback)."""
    try:
        return vpdq_of_video(item, limits)
    except MediaError as exc:
        return exc


class VideoHasher:
    def __init__(self, workers: int = 1, timeout_s: float = 20.0):
        if workers < 1 or timeout_s <= 0:
            raise ValueError(f"workers >= 1 and timeout_s > 0, not {workers} and {timeout_s}")
        self.workers, self.timeout_s = workers, timeout_s
        self._lock = threading.Lock()
        self._pool: Pool | None = None
        self.restarts = 0

    def _current(self) -> Pool:
        with self._lock:
            if self._pool is None:
                self._pool = multiprocessing.get_context("spawn").Pool(self.workers)
            return self._pool

    def features(self, item: MediaItem, limits: MediaLimits = MediaLimits()) -> tuple[VpdqFeature, ...]:
        pool = self._current()
        pending = pool.apply_async(_hash, (item, limits))
        try:
            result = pending.get(self.timeout_s)
        except multiprocessing.TimeoutError:
            self._end(pool)
            raise VideoHashFailed(f"no vPDQ hash within {self.timeout_s:g} s (the worker was stopped)") from None
        if isinstance(result, MediaError):
            raise result
        return result

    def _end(self, pool: Pool) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
                self.restarts += 1
        pool.terminate()

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.terminate()
            pool.join()
