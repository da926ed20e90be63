"""vPDQ hashes of a server's request videos, computed in worker processes: a video that crashes or hangs FFmpeg (a
hostile file) costs that worker and that one hash, never the server, and `vpdq` (which holds the GIL while it decodes)
never stalls the other requests' threads.

    hasher = VideoHasher(workers=1, timeout_s=20.0)
    hasher.features(item, limits)   # tuple[VpdqFeature, ...]; MediaError for a bad video; VideoHashFailed otherwise
    hasher.close()

Each worker is a plain child process (`python -m omni.banks.vpdq_worker`, jobs and answers over its pipes; not
`multiprocessing`, whose workers import the parent's `__main__` again), started by `warm()` or on first need and
kept for the next video; at most `workers` hash at once (more callers wait their turn). A worker that
does not answer within `timeout_s`, or dies, is killed and its job is a `VideoHashFailed` (a counted miss: the model
still answers); the next video starts a new one. Hashes on the other workers go on untouched.
Knows nothing of banks, HTTP, the engine or what a hash is used for.
"""
from __future__ import annotations

import os
import pickle
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

from omni.banks.vpdq_worker import HEADER, write_message
from preprocess.errors import MediaError
from preprocess.hashes import VpdqFeature
from preprocess.item import MediaItem
from preprocess.media import MediaLimits

ROOT = Path(__file__).resolve().parents[2]     # where `omni` imports from (the worker runs `-m` there)


class VideoHashFailed(RuntimeError):
    """The worker did not answer in time or died: the video is not hashed (a counted miss)."""


class VideoHasher:
    def __init__(self, workers: int = 1, timeout_s: float = 20.0):
        if workers < 1 or timeout_s <= 0:
            raise ValueError(f"workers >= 1 and timeout_s > 0, not {workers} and {timeout_s}")
        self.workers, self.timeout_s = workers, timeout_s
        self._turns = threading.BoundedSemaphore(workers)
        self._lock = threading.Lock()
        self._idle: list[subprocess.Popen] = []
        self._all: set[subprocess.Popen] = set()
        self.restarts = 0          # workers killed (a timeout) or found dead

    def features(self, item: MediaItem, limits: MediaLimits = MediaLimits()) -> tuple[VpdqFeature, ...]:
        with self._turns:
            worker = self._take()
            try:
                write_message(worker.stdin, (item, limits))      # type: ignore[arg-type]
                answer = pickle.loads(self._read(worker, time.monotonic() + self.timeout_s))   # our own child's
            except (OSError, VideoHashFailed, EOFError, pickle.UnpicklingError) as exc:
                self._kill(worker)
                if isinstance(exc, VideoHashFailed):
                    raise
                raise VideoHashFailed(f"the vPDQ worker died ({type(exc).__name__})") from None
            with self._lock:
                self._idle.append(worker)
        if isinstance(answer, MediaError):
            raise answer
        return answer

    def warm(self) -> None:
        """Starts a worker now (its imports take about a second) unless one is there, so the first video does not
        wait for it."""
        with self._lock:
            if not self._all:
                self._idle.append(self._start())

    def _take(self) -> subprocess.Popen:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.poll() is None:
                    return worker
                self._all.discard(worker)
                self.restarts += 1
            return self._start()

    def _start(self) -> subprocess.Popen:
        worker = subprocess.Popen([sys.executable, "-m", "omni.banks.vpdq_worker"], cwd=ROOT,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self._all.add(worker)
        return worker

    def _read(self, worker: subprocess.Popen, deadline: float) -> bytes:
        fd = worker.stdout.fileno()                              # type: ignore[union-attr]
        header = self._read_exactly(fd, HEADER.size, deadline)
        return self._read_exactly(fd, HEADER.unpack(header)[0], deadline)

    def _read_exactly(self, fd: int, size: int, deadline: float) -> bytes:
        chunks, left = [], size
        while left:
            wait_s = deadline - time.monotonic()
            if wait_s <= 0 or not select.select([fd], [], [], wait_s)[0]:
                raise VideoHashFailed(f"no vPDQ hash within {self.timeout_s:g} s (the worker was stopped)")
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                raise EOFError("the worker closed its output")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _kill(self, worker: subprocess.Popen) -> None:
        with self._lock:
            self._all.discard(worker)
            self.restarts += 1
        worker.kill()
        worker.wait()
        for stream in (worker.stdin, worker.stdout):
            if stream is not None:
                stream.close()

    def close(self) -> None:
        """Ends every worker: idle ones by closing their input, any still busy by killing them."""
        with self._lock:
            workers, self._all, self._idle = list(self._all), set(), []
        for worker in workers:
            if worker.stdin is not None:
                worker.stdin.close()
            try:
                worker.wait(timeout=5)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            if worker.stdout is not None:
                worker.stdout.close()
