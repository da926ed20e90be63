"""HeapTrimmer: asks for a trim only after new evictions, and trims on its own thread."""
from __future__ import annotations

import threading

from omni.serve.heap import HeapTrimmer


def test_trims_on_its_own_thread_after_new_evictions_only():
    done = threading.Event()
    calls = []
    trimmer = HeapTrimmer(min_interval_s=0, settle_s=0, trim=lambda pad: (calls.append(threading.current_thread().name),
                                                              done.set(), 1)[-1])
    assert not trimmer.after_batch(0)                 # nothing evicted
    assert trimmer.after_batch(5)
    assert done.wait(10) and calls == ["omni-heap-trim"]
    assert not trimmer.after_batch(5)                 # no eviction since the last call
    assert trimmer.after_batch(5, tokens=8192)        # but a big batch


def test_the_real_trim_is_found_where_the_c_library_has_it():
    trimmer = HeapTrimmer()
    assert trimmer.after_batch(1) == (trimmer._trim is not None)
