"""The occlusion check's regions (omni/learn/occlusion_regions.py): the top region read from `x_evidence`, a random one
of the same size inside the medium, clear of the top one when it can be, the same for the same seed."""
from __future__ import annotations

import pytest

from omni.learn.occlusion_regions import Extent, Region, Target, evidence_targets, random_region, region_rng

QUESTION = {  # one question's entry of x_evidence.questions, as docs/evidence.md shows it
    "answer": "true",
    "state": {"chars": 40, "covered_chars": 30, "spans": [{"start": 10, "end": 17, "text": "scratch", "weight": 0.03},
                                                          {"start": 0, "end": 2, "text": "a ", "weight": 0.01}]},
    "images": [{"index": 0, "width": 256, "height": 192, "boxes": [
        {"x0": 32.0, "y0": 64.0, "x1": 64.0, "y1": 96.0, "weight": 0.01}]},
        {"index": 1, "width": 64, "height": 64, "boxes": []}],
    "audio": [{"index": 0, "seconds": 2.0, "windows": [{"start_s": 0.8, "end_s": 0.88, "weight": 0.004}]}],
    "videos": [{"index": 0, "seconds": 3.0, "moments": [{"start_s": 1.0, "end_s": 2.0, "weight": 0.02, "boxes": []}],
                "timeline": []}],
}


def test_the_top_region_of_each_medium_is_its_heaviest():
    found = list(evidence_targets(QUESTION))
    assert [(t.label, r) for t, r, _ in found] == [
        ("state", Region("span", 10, 17)),
        ("images[0]", Region("box", box=(32.0, 64.0, 64.0, 96.0))),      # images[1] has no box: not a target
        ("audio[0]", Region("window", 0.8, 0.88)),
        ("videos[0]", Region("window", 1.0, 2.0))]
    assert [extent for _, _, extent in found] == [Extent(length=30), Extent(width=256, height=192),
                                                  Extent(length=2.0), Extent(length=3.0)]


def test_a_question_without_evidence_has_no_target():
    assert list(evidence_targets({"answer": "x", "state": {"chars": 0, "covered_chars": 0, "spans": []}})) == []


def overlaps(a: Region, b: Region) -> bool:
    if a.box is not None and b.box is not None:
        ax0, ay0, ax1, ay1 = a.box
        bx0, by0, bx1, by1 = b.box
        return ax0 < bx1 and bx0 < ax1 and ay0 < by1 and by0 < ay1
    return a.start < b.end and b.start < a.end


@pytest.mark.parametrize("seed", range(20))
def test_a_random_box_has_the_same_size_inside_the_image_and_clear_of_the_top(seed):
    top = Region("box", box=(32.0, 64.0, 64.0, 96.0))
    box = random_region(top, Extent(width=256, height=192), region_rng(seed, 0)).box
    assert box is not None
    x0, y0, x1, y1 = box
    assert (x1 - x0, y1 - y0) == pytest.approx((32.0, 32.0))
    assert x0 >= 0
    assert x1 <= 256
    assert y0 >= 0
    assert y1 <= 192
    assert not overlaps(Region("box", box=box), top)


@pytest.mark.parametrize("seed", range(20))
def test_a_random_window_has_the_same_length_inside_the_clip_and_clear_of_the_top(seed):
    top = Region("window", 0.8, 0.88)
    window = random_region(top, Extent(length=2.0), region_rng(seed, 1))
    assert window.end - window.start == pytest.approx(0.08)
    assert window.start >= 0
    assert window.end <= 2.0 + 1e-9
    assert not overlaps(window, top)


@pytest.mark.parametrize("seed", range(20))
def test_a_random_span_is_whole_characters_inside_what_was_read(seed):
    top = Region("span", 10, 17)
    span = random_region(top, Extent(length=30), region_rng(seed, 2))
    assert span.start == int(span.start)
    assert span.end - span.start == 7
    assert span.start >= 0
    assert span.end <= 30
    assert not overlaps(span, top)


def test_the_only_clear_second_of_a_two_second_video_is_the_other_one():
    for seed in range(5):
        assert random_region(Region("window", 0.0, 1.0), Extent(length=2.0), region_rng(seed)) == \
            Region("window", 1.0, 2.0)


def test_a_region_that_fills_its_medium_can_only_overlap():
    span = random_region(Region("span", 0, 10), Extent(length=10), region_rng(0))
    assert (span.start, span.end) == (0, 10)
    box = random_region(Region("box", box=(0, 0, 8, 8)), Extent(width=8, height=8), region_rng(0)).box
    assert box == pytest.approx((0, 0, 8, 8))


def test_the_same_seed_gives_the_same_regions_and_another_seed_others():
    top, extent = Region("box", box=(32.0, 64.0, 64.0, 96.0)), Extent(width=256, height=192)
    draws = [random_region(top, extent, region_rng(7, 3, 1)) for _ in range(2)]
    assert draws[0] == draws[1]
    others = {random_region(top, extent, region_rng(seed, 3, 1)).box for seed in range(8)}
    assert len(others) == 8


def test_targets_name_their_slot():
    assert [Target("image", 1).label, Target("audio").label, Target("video").label, Target("state").label] == \
        ["images[1]", "audio[0]", "videos[0]", "state"]
