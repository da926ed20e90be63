"""The occlusion check (omni/learn/occlusion.py) over a `decide` whose answers are a known function of the media: the
top region's mask moves the answer as the function says, a random region elsewhere does not, equal masks are decided
once, the summary counts what the rows say. (The engine and the demo model: tests/integration/cli/test_explain.py.)"""
from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import pytest
from PIL import Image

from fixtures.media import wav_bytes
from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.contract.types import DecisionRequest, Part
from omni.learn.occlusion import chosen, masked_request, occlusion_rows, option_probabilities, summarize
from omni.learn.occlusion_regions import Region, Target

PLATE = (32, 64, 64, 96)              # x0, y0, x1, y1: where the "nameplate" is, white on black


def photo() -> bytes:
    pixels = np.zeros((128, 128, 3), np.uint8)
    x0, y0, x1, y1 = PLATE
    pixels[y0:y1, x0:x1] = 255
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def request() -> DecisionRequest:
    body = {"state": "the lid has a scratch", "questions": {
        "plate": {"type": "noul", "instructions": "Is the plate visible?"},
        "damage": {"type": "choice", "instructions": "Damage?", "criteria": {"none": None, "scratch": None}}}}
    return parse_request(body, EngineConfig(), [Part("images", photo()), Part("audio", wav_bytes(seconds=0.5))])


def answers_of(req: DecisionRequest) -> dict[str, dict]:
    """p(plate) = the white share of the plate's pixels; p(scratch) = 0.9 if the state still says "scratch"."""
    with Image.open(io.BytesIO(req.media[0].data)) as image:
        pixels = np.asarray(image.convert("L"))
    x0, y0, x1, y1 = PLATE
    white = float((pixels[y0:y1, x0:x1] == 255).mean())
    p_scratch = 0.9 if "scratch" in str(req.state) else 0.2
    return {"plate": {"type": "noul", "noul": round(0.05 + 0.9 * white, 4)},
            "damage": {"type": "choice", "choice": "scratch" if p_scratch > 0.5 else "none",
                       "probabilities": {"none": round(1 - p_scratch, 4), "scratch": p_scratch}}}


EVIDENCE = {"questions": {
    "plate": {"answer": "true",
              "images": [{"index": 0, "width": 128, "height": 128,
                          "boxes": [{"x0": 32.0, "y0": 64.0, "x1": 64.0, "y1": 96.0, "weight": 0.1}]}],
              "audio": [{"index": 0, "seconds": 0.5, "windows": [{"start_s": 0.16, "end_s": 0.24, "weight": 0.01}]}]},
    "damage": {"answer": "scratch",
               "state": {"chars": 21, "covered_chars": 21,
                         "spans": [{"start": 14, "end": 21, "text": "scratch", "weight": 0.2}]},
               "images": [{"index": 0, "width": 128, "height": 128,
                           "boxes": [{"x0": 32.0, "y0": 64.0, "x1": 64.0, "y1": 96.0, "weight": 0.1}]}]}}}


class Counting:
    def __init__(self) -> None:
        self.requests = 0
        self.calls = 0

    def __call__(self, requests: Sequence[DecisionRequest]) -> list[dict]:
        self.calls += 1
        self.requests += len(requests)
        return [answers_of(r) for r in requests]


def test_the_top_mask_moves_the_answer_and_a_random_one_does_not():
    req = request()
    decide = Counting()
    rows = occlusion_rows(req, EVIDENCE, answers_of(req), decide, seed=3, batch_size=4)
    by = {(row.question, row.target.label): row for row in rows}
    assert list(by) == [("plate", "images[0]"), ("plate", "audio[0]"), ("damage", "state"), ("damage", "images[0]")]
    plate = by[("plate", "images[0]")]
    assert (plate.p, plate.p_top, plate.p_random) == (0.95, 0.05, 0.95)
    assert plate.answer_top == "false"
    assert plate.answer_random == "true"
    assert plate.abs_dp_top == pytest.approx(0.9)
    assert plate.abs_dp_random == 0
    damage = by[("damage", "state")]
    assert (damage.p, damage.p_top, damage.p_random, damage.answer_top) == (0.9, 0.2, 0.9, "none")
    assert by[("plate", "audio[0]")].abs_dp_top == by[("plate", "audio[0]")].abs_dp_random == 0
    # the image's top box is the same for both questions: 8 masks planned, 7 distinct (unless a random box repeats)
    assert decide.requests == 7
    assert decide.calls == 2


def test_the_rows_are_reproducible_from_the_seed():
    req = request()
    first = occlusion_rows(req, EVIDENCE, answers_of(req), Counting(), seed=5)
    again = occlusion_rows(req, EVIDENCE, answers_of(req), Counting(), seed=5)
    other = occlusion_rows(req, EVIDENCE, answers_of(req), Counting(), seed=6)
    assert [r.to_wire() for r in first] == [r.to_wire() for r in again]
    assert [r.random for r in first] != [r.random for r in other]


def test_the_summary_counts_what_the_rows_say():
    req = request()
    summary = summarize(occlusion_rows(req, EVIDENCE, answers_of(req), Counting()))
    assert list(summary) == ["state", "image", "audio"]
    assert summary["image"] == {"rows": 2, "mean_abs_dp_top": pytest.approx(0.45), "mean_abs_dp_random": 0.0,
                                "share_top_moved_more": 0.5, "share_tied": 0.5, "flipped_top": 1, "flipped_random": 0}
    assert summary["state"]["share_top_moved_more"] == 1.0
    assert summary["state"]["flipped_top"] == 1
    assert summary["audio"]["share_tied"] == 1.0


def test_a_row_on_the_wire():
    req = request()
    row = occlusion_rows(req, EVIDENCE, answers_of(req), Counting(), seed=3)[0]
    wire = row.to_wire()
    assert wire["medium"] == "images[0]"
    assert wire["kind"] == "image"
    assert wire["answer"] == "true"
    assert wire["top"] == {"region": {"x0": 32.0, "y0": 64.0, "x1": 64.0, "y1": 96.0}, "p": 0.05, "abs_dp": 0.9,
                           "answer": "false", "flipped": True}
    assert wire["random"]["flipped"] is False
    assert set(wire["random"]["region"]) == {"x0", "y0", "x1", "y1"}


def test_a_masked_request_changes_only_its_medium():
    req = request()
    masked = masked_request(req, Target("audio"), Region("window", 0.0, 0.1))
    assert masked.media[0] is req.media[0]
    assert masked.media[1].data != req.media[1].data
    assert masked.media[1].origin.endswith("masked 0.00-0.10 s")
    assert masked.state == req.state
    with pytest.raises(ValueError, match="videos\\[0\\]"):
        masked_request(req, Target("video"), Region("window", 0.0, 1.0))


def test_probabilities_and_the_chosen_option_of_each_answer_type():
    assert option_probabilities({"type": "noul", "noul": 0.3}) == {"true": 0.3, "false": 0.7}
    assert chosen({"type": "noul", "noul": 0.3}) == "false"
    assert chosen({"type": "noul", "noul": 0.5}) == "true"
    score = {"type": "score", "score": 1.2, "probabilities": {"0": 0.1, "1": 0.6, "2": 0.3}}
    assert chosen(score) == "1"
    assert option_probabilities(score)["2"] == 0.3
