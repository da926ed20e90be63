"""vPDQ hashes of a server's request videos, computed in worker processes: a video that crashes or hangs FFmpeg (a
hostile file) costs that worker and that one hash, never the server, and `vpdq` (which holds the GIL while it decodes)
never stalls the other requests' threads.

    hasher = VideoHasher(workers=1, timeout_s=20.0)
    hasher.features(item, limits)   # tuple[VpdqFeature, ...]; MediaError for a bad video; VideoHashFailed otherwise
    hasher.close()

Each worker is a plain child process (`python -m omni.banks.vpdq_worker`, jobs and answers over its pipes; not
`multiprocessing`, whose workers import the parent's `__main__` again), started by `warm()` or on first need and
kept for the next video; at most `workers` hash at once (more callers wait their turn). `timeout_s` bounds a
caller's whole wait, its turn included: a worker that does not answer within it, or dies, is killed and its job is a
`VideoHashFailed` (a counted miss: the model still answers) and a new worker is started at once for the next video
(its imports take about 0.2 s: the worker imports PyAV, `vpdq` and `pdqhash`, not torch). Hashes on the other
workers go on untouched. A caller that no longer wants its hash (its request was answered without it) sets its
`cancelled` event: if it is still waiting for a turn, it leaves at once; if its video is being hashed, the worker
is given `cancel_grace_s` more to finish (then it is kept) and is killed after that, so a long video nobody waits
for does not hold a worker and a core (the next video gets the replacement). The grace is about what a replacement
costs to start: a hash that ends sooner is cheaper to let finish, and waiting longer never costs more than twice
what the better choice would have. Each worker writes its temporary video files in a directory of its own, removed
when the worker ends (a killed worker cannot remove its own). After `close()` no worker starts again.
Knows nothing of banks, HTTP, the engine or what a hash is used for.
"""
from __future__ import annotations

import os
import pickle
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from omni.banks.vpdq_worker import HEADER, write_message
from preprocess.errors import MediaError
from preprocess.hashes import VpdqFeature
from preprocess.item import MediaItem
from preprocess.media import MediaLimits

ROOT = Path(__file__).resolve().parents[2]     # where `omni` imports from (the worker runs `-m` there)
CANCEL_GRACE_S = 0.2       # an unwanted hash still running after this is stopped (about a new worker's start-up)
STOP_REASONS = ("timeout", "died", "unwanted", "interrupted")   # why a worker was ended before close()
CANCEL_POLL_S = 0.02       # how often a caller with a `cancelled` event looks at it while its video is hashed


class VideoHashFailed(RuntimeError):
    """The worker did not answer in time or died: the video is not hashed (a counted miss)."""


class VideoHasher:
    def __init__(self, workers: int = 1, timeout_s: float = 20.0, cancel_grace_s: float = CANCEL_GRACE_S):
        if workers < 1 or timeout_s <= 0 or cancel_grace_s < 0:
            raise ValueError(f"workers >= 1, timeout_s > 0 and cancel_grace_s >= 0, not {workers}, {timeout_s} and "
                             f"{cancel_grace_s}")
        self.workers, self.timeout_s, self.cancel_grace_s = workers, timeout_s, cancel_grace_s
        self._turns = threading.BoundedSemaphore(workers)
        self._lock = threading.Lock()
        self._idle: list[subprocess.Popen] = []
        self._all: dict[subprocess.Popen, str] = {}     # every live worker -> its temporary directory
        self._closed = False
        self.stopped = dict.fromkeys(STOP_REASONS, 0)    # workers ended other than by close(), by why

    def features(self, item: MediaItem, limits: MediaLimits = MediaLimits(),
                 cancelled: threading.Event | None = None) -> tuple[VpdqFeature, ...]:
        deadline = time.monotonic() + self.timeout_s
        self._wait_turn(deadline, cancelled)
        try:
            worker = self._take()
            try:
                write_message(worker.stdin, (item, limits))      # type: ignore[arg-type]
                answer = pickle.loads(self._read(worker, deadline, cancelled))   # our own child's
            except (OSError, VideoHashFailed, EOFError, pickle.UnpicklingError) as exc:
                self._kill(worker, "unwanted" if isinstance(exc, _Abandoned)
                           else "timeout" if isinstance(exc, VideoHashFailed) else "died")
                if isinstance(exc, VideoHashFailed):
                    raise
                raise VideoHashFailed(f"the vPDQ worker died ({type(exc).__name__})") from None
            except BaseException:
                self._kill(worker, "interrupted")   # a worker is idle or ended, never lost
                raise
            self._give_back(worker)
        finally:
            self._turns.release()
        if isinstance(answer, MediaError):
            raise answer
        return answer

    @property
    def restarts(self) -> int:
        """Workers ended before close(), for any reason."""
        return sum(self.stopped.values())

    @property
    def abandoned(self) -> int:
        """Workers stopped because nobody wanted their hash any more."""
        return self.stopped["unwanted"]

    def stats(self) -> dict[str, int]:
        """For metrics: `workers` alive now, `stopped_<reason>` since start (timeout, died, unwanted,
        interrupted)."""
        with self._lock:
            return {"workers": len(self._all), **{f"stopped_{reason}": n for reason, n in self.stopped.items()}}

    def warm(self) -> None:
        """Starts a worker now (its imports take about 0.2 s) unless one is there, so the first video does not
        wait for it."""
        with self._lock:
            if not self._all and not self._closed:
                self._idle.append(self._start())

    def _wait_turn(self, deadline: float, cancelled: threading.Event | None) -> None:
        while not self._turns.acquire(timeout=0.05):        # returns at once when a turn is free
            if cancelled is not None and cancelled.is_set():
                raise VideoHashFailed("the hash is no longer wanted")
            if time.monotonic() >= deadline:
                raise VideoHashFailed(f"no vPDQ worker was free within {self.timeout_s:g} s")

    def _take(self) -> subprocess.Popen:
        with self._lock:
            if self._closed:
                raise VideoHashFailed("the video hasher is closed")
            while self._idle:
                worker = self._idle.pop()
                if worker.poll() is None:
                    return worker
                self._ended(worker)
                self.stopped["died"] += 1
            return self._start()

    def _give_back(self, worker: subprocess.Popen) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(worker)
                return
        self._kill(worker, None)                    # closed meanwhile: it would be nobody's

    def _start(self) -> subprocess.Popen:
        directory = tempfile.mkdtemp(prefix="omni-vpdq-worker-")
        worker = subprocess.Popen([sys.executable, "-m", "omni.banks.vpdq_worker", "--tmpdir", directory], cwd=ROOT,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self._all[worker] = directory
        return worker

    def _ended(self, worker: subprocess.Popen) -> None:
        """A worker that has exited: its pipes closed, its temporary directory removed (called under the lock)."""
        for stream in (worker.stdin, worker.stdout):
            if stream is not None:
                stream.close()
        directory = self._all.pop(worker, None)
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def _read(self, worker: subprocess.Popen, deadline: float, cancelled: threading.Event | None) -> bytes:
        fd = worker.stdout.fileno()                              # type: ignore[union-attr]
        wait = _Wait(deadline, self.timeout_s, self.cancel_grace_s, cancelled)
        header = self._read_exactly(fd, HEADER.size, wait)
        return self._read_exactly(fd, HEADER.unpack(header)[0], wait)

    def _read_exactly(self, fd: int, size: int, wait: _Wait) -> bytes:
        chunks, left = [], size
        while left:
            while not select.select([fd], [], [], wait.slice_s())[0]:
                pass                                             # wait.slice_s() raises when the wait is over
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                raise EOFError("the worker closed its output")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _kill(self, worker: subprocess.Popen, reason: str | None) -> None:
        """Ends a worker whose job failed (`reason`, counted; None: the hasher closed meanwhile) and starts its
        replacement now (it imports while nobody waits on it)."""
        worker.kill()
        worker.wait()
        with self._lock:
            self._ended(worker)
            if reason is not None:
                self.stopped[reason] += 1
            if not self._closed:
                self._idle.append(self._start())

    def close(self) -> None:
        """Ends every worker: idle ones by closing their input, any still busy by killing them; none starts again."""
        with self._lock:
            self._closed = True
            workers, self._idle = list(self._all), []
        for worker in workers:
            if worker.stdin is not None:
                worker.stdin.close()
            try:
                worker.wait(timeout=5)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            with self._lock:
                self._ended(worker)


class _Abandoned(VideoHashFailed):
    """The caller no longer wanted the hash and the worker did not finish within the grace."""


class _Wait:
    """How long a caller still waits for its worker's answer: until its deadline, or, once its `cancelled` event is
    set, `grace_s` after it noticed (whichever comes first)."""

    def __init__(self, deadline: float, timeout_s: float, grace_s: float, cancelled: threading.Event | None):
        self.deadline, self.timeout_s, self.grace_s, self.cancelled = deadline, timeout_s, grace_s, cancelled
        self.given_up_at: float | None = None

    def slice_s(self) -> float:
        """Seconds to wait for the next bytes (a short slice while a cancel could come); raises when no more."""
        now = time.monotonic()
        if self.cancelled is not None and self.given_up_at is None and self.cancelled.is_set():
            self.given_up_at = now + self.grace_s
        end = self.deadline if self.given_up_at is None else min(self.deadline, self.given_up_at)
        if now >= end:
            if self.given_up_at is not None and self.given_up_at <= self.deadline:
                raise _Abandoned("the hash is no longer wanted (the worker was stopped)")
            raise VideoHashFailed(f"no vPDQ hash within {self.timeout_s:g} s (the worker was stopped)")
        watching = self.cancelled is not None and self.given_up_at is None
        return min(end - now, CANCEL_POLL_S) if watching else end - now
