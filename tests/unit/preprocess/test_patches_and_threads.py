"""PatchWriter writes the rows patchify_frames makes, one frame at a time (whatever its first guess of the length);
unpatchify inverts it; the reference's pre-scale size; ThreadBudget lends idle threads only, never below one."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from preprocess.patches import PatchLayout, PatchWriter, patchify_frames, unpatchify
from preprocess.resize import prescale_size
from preprocess.threads import ThreadBudget


@pytest.mark.parametrize(("frames", "expected_frames"), [(4, 4), (5, 2), (7, 40), (1, 1), (9, 3)])
def test_patch_writer_equals_patchify(frames, expected_frames):
    video = np.random.default_rng(frames).integers(0, 256, (frames, 64, 96, 3), dtype=np.uint8)
    writer = PatchWriter(64, 96, PatchLayout(), expected_frames)
    for frame in video:
        writer.append(frame)
    rows, grid = writer.finish()
    want_rows, want_grid = patchify_frames(video)
    assert grid == want_grid and np.array_equal(rows, want_rows)
    padded = np.concatenate([video, video[-1:]]) if frames % 2 else video
    assert np.array_equal(unpatchify(rows, grid), padded)


def test_patch_writer_refuses_sizes_off_the_grid():
    with pytest.raises(ValueError, match="multiple of"):
        PatchWriter(60, 96, PatchLayout())


def test_prescale_size_is_the_reference_rule():
    assert prescale_size(720, 1280, 262144) == (384, 682)
    assert prescale_size(1080, 1920, 262144) == (384, 682)
    assert prescale_size(256, 256, 262144) == (256, 256)       # small frames keep their size
    assert prescale_size(170, 301, 262144) == (170, 300)       # even sides, by Python round (half to even), as it


def test_thread_budget_lends_only_idle_threads():
    budget = ThreadBudget(2)
    budget.total = 2                       # as on a machine with at least 2 cores
    with budget.lend(4) as first:
        assert first == 2 and budget.busy == 2
        with budget.lend(3) as second:     # nothing idle: the caller's own thread still runs
            assert second == 1 and budget.busy == 3
    assert budget.busy == 0
    with budget.lend(1) as one:
        assert one == 1


def test_thread_budget_is_capped_at_the_cores(monkeypatch):
    monkeypatch.setattr("preprocess.threads.os.cpu_count", lambda: 2)
    assert ThreadBudget(64).total == 2 and ThreadBudget(0).total == 1


def test_thread_budget_gives_back_on_error_and_under_contention():
    budget = ThreadBudget(2)
    with pytest.raises(RuntimeError), budget.lend(2):
        raise RuntimeError("x")
    assert budget.busy == 0

    def borrow():
        for _ in range(200):
            with budget.lend(2) as n:
                assert n >= 1
    threads = [threading.Thread(target=borrow) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert budget.busy == 0
