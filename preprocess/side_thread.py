"""`SideThread`: one helper thread beside the caller's, with two kinds of jobs.

* ordered jobs (a video's soundtrack: a resampler keeps state) run on the helper only, in the order given, before
  any shared job waiting;
* shared jobs (scaling one kept frame into its own patch rows: independent of each other) run on the helper, or on
  the caller's thread when more than `backlog` of them wait: the caller then takes the oldest itself instead of
  waiting, and `finish` has the caller take what is left. So the two threads split the work by who is free: the
  helper never falls behind by more than `backlog` frames (which bounds the decoded frames held), and neither
  thread idles while the other works through a tail.

The first error stops the jobs after it (on the helper it is kept and raised on the caller's thread by `check`,
`submit` or `finish`; a shared job run by the caller raises there directly). `close` stops the thread for good:
waiting jobs are dropped, a running one is waited for (what the jobs read, a demuxer's frames, outlives them).

Knows nothing of what the jobs do; a shared job must be safe to run on either thread (a per-thread scaler, its own
output slot).
"""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable


class SideThread:
    """One helper thread: ordered jobs run there in order; shared jobs there or on the caller when it is behind."""

    def __init__(self, backlog: int = 3, name: str = "omni-video") -> None:
        self.backlog = max(0, backlog)
        self._ordered: deque[Callable[[], None]] = deque()     # the helper's alone, in submission order
        self._shared: deque[Callable[[], None]] = deque()      # either thread's, oldest first
        self._running = 0           # jobs running on the helper now
        self._cond = threading.Condition()
        self._closed = False
        self.error: BaseException | None = None
        self.ran_on_caller = 0      # shared jobs the caller ran itself (benchmarks, tests)
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None], shared: bool = False) -> None:
        """Queue `job`; a shared one may be run right here instead (the oldest waiting) when the helper is behind."""
        self.check()
        with self._cond:
            (self._shared if shared else self._ordered).append(job)
            self._cond.notify_all()
        while shared and len(self._shared) > self.backlog and self._run_one_shared():
            pass

    def _run_one_shared(self) -> bool:
        """Run the oldest waiting shared job on this (the caller's) thread; False when none waits."""
        self.check()
        with self._cond:
            if not self._shared:
                return False
            job = self._shared.popleft()
        job()
        self.ran_on_caller += 1
        return True

    def _work(self) -> None:
        while True:
            with self._cond:
                while not (self._ordered or self._shared) and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                job = (self._ordered or self._shared).popleft()     # the soundtrack first: only this thread has it
                self._running += 1
            try:
                if self.error is None:
                    job()
            except Exception as exc:  # noqa: BLE001  (handed to the caller's thread, which raises it)
                if self.error is None:
                    self.error = exc
            finally:
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()

    def check(self) -> None:
        """Raise the helper's first error, if any."""
        if self.error is not None:
            raise self.error

    def finish(self) -> None:
        """The caller takes the shared jobs still waiting, then waits for the rest; raises the first error."""
        while self._run_one_shared():
            pass
        with self._cond:
            while (self._ordered or self._shared or self._running) and self.error is None:
                self._cond.wait()
            while self._running:            # after an error: let the running job end (it may read the demuxer)
                self._cond.wait()
        self.check()

    def close(self) -> None:
        """Stop for good: waiting jobs are dropped, a running one is waited for."""
        with self._cond:
            self._closed = True
            self._ordered.clear()
            self._shared.clear()
            self._cond.notify_all()
        self._thread.join()
