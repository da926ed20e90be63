"""The evidence summary (omni.contract.evidence_summary): what of `x_evidence` the decision log keeps (the top items,
none of the maps), and two summaries compared as `omni replay` compares them (weights within the tolerance, the
rest exactly, each difference named by its path)."""
from __future__ import annotations

import copy
import json

from omni.contract.evidence_summary import LOGGED_ASK, evidence_summary, summary_differences

BOX = {"x0": 0.0, "y0": 0.0, "x1": 60.0, "y1": 60.0, "weight": 0.001}


def option(weight: float = 0.02) -> dict:
    """One option's evidence as omni.model.evidence_map writes it (docs/evidence.md's shape)."""
    return {"share": {"prompt": 0.5, "state": 0.1, "image": 0.2, "audio": 0.05, "video": 0.1, "video_audio": 0.05},
            "state": {"chars": 40, "covered_chars": 40,
                      "spans": [{"start": 10, "end": 17, "text": "scratch", "weight": 0.031}]},
            "images": [{"index": 0, "width": 640, "height": 480, "grid": {"rows": 2, "cols": 2},
                        "heatmap": [[0.1, 0.05], [0.03, 0.02]], "boxes": [dict(BOX)]}],
            "audio": [{"index": 0, "seconds": 2.0, "per_second": [0.03, 0.02],
                       "windows": [{"start_s": 1.28, "end_s": 1.36, "weight": 0.004}]}],
            "videos": [{"index": 0, "width": 64, "height": 48, "seconds": 2.0,
                        "timeline": [{"start_s": 0.0, "end_s": 1.0, "weight": 0.04},
                                     {"start_s": 1.0, "end_s": 2.0, "weight": weight}],
                        "moments": [{"start_s": 0.0, "end_s": 1.0, "weight": 0.04, "boxes": [dict(BOX)]}],
                        "soundtrack": {"seconds": 2.0, "per_second": [0.02, 0.03],
                                       "windows": [{"start_s": 1.0, "end_s": 1.08, "weight": 0.002}]}}]}


def x_evidence() -> dict:
    return {"method": "routing-attention/1",
            "questions": {"fan_running": {"answer": "true", **option(),
                                          "options": {"true": option(), "false": option(0.01)}}}}


def test_the_summary_keeps_the_top_items_and_drops_every_map():
    summary = evidence_summary(x_evidence(), 3)
    assert summary["format"] == "evidence-summary/1" and summary["top"] == 3
    assert summary["method"] == "routing-attention/1"
    kept = summary["questions"]["fan_running"]
    assert kept["answer"] == "true" and kept["share"]["image"] == 0.2
    assert kept["state"] == {"chars": 40, "covered_chars": 40,
                             "spans": [{"start": 10, "end": 17, "text": "scratch", "weight": 0.031}]}
    assert kept["images"] == [{"index": 0, "width": 640, "height": 480, "boxes": [BOX]}]
    assert kept["audio"] == [{"index": 0, "seconds": 2.0,
                              "windows": [{"start_s": 1.28, "end_s": 1.36, "weight": 0.004}]}]
    [video] = kept["videos"]
    assert set(video) == {"index", "width", "height", "seconds", "moments", "soundtrack"}
    assert video["moments"][0]["boxes"] == [BOX] and set(video["soundtrack"]) == {"seconds", "windows"}
    text = json.dumps(summary)
    for dropped in ("heatmap", "grid", "per_second", "timeline", "options"):
        assert f'"{dropped}"' not in text
    assert LOGGED_ASK.top == 3 and LOGGED_ASK.options == "chosen"          # what `"x_evidence": true` asks


def test_a_video_without_a_soundtrack_and_a_request_without_media_summarise():
    evidence = x_evidence()
    entry = evidence["questions"]["fan_running"]
    entry["videos"][0]["soundtrack"] = None
    assert evidence_summary(evidence, 2)["questions"]["fan_running"]["videos"][0]["soundtrack"] is None
    entry.update(images=[], audio=[], videos=[])
    kept = evidence_summary(evidence, 2)["questions"]["fan_running"]
    assert kept["images"] == kept["audio"] == kept["videos"] == []


def test_equal_summaries_and_weights_one_rounding_unit_apart_match():
    logged = evidence_summary(x_evidence(), 3)
    replayed = copy.deepcopy(logged)
    assert summary_differences(logged, replayed, 1e-6) == (0.0, [])
    replayed["questions"]["fan_running"]["state"]["spans"][0]["weight"] = 0.031001      # a 6th decimal that flipped
    replayed["questions"]["fan_running"]["share"]["video"] = 0.100001
    diff, found = summary_differences(logged, replayed, 1e-6)
    assert found == [] and 0.9e-6 < diff < 1.1e-6


def test_moved_weights_and_other_places_are_named_by_their_path():
    logged = evidence_summary(x_evidence(), 3)
    replayed = copy.deepcopy(logged)
    kept = replayed["questions"]["fan_running"]
    kept["videos"][0]["moments"][0]["start_s"] = 1.0
    kept["images"][0]["boxes"][0]["weight"] = 0.0012
    kept["audio"][0]["windows"].append({"start_s": 0.0, "end_s": 0.08, "weight": 0.001})
    kept["answer"] = "false"
    diff, found = summary_differences(logged, replayed, 1e-6)
    assert abs(diff - 0.0002) < 1e-12
    assert found == ["questions.fan_running.answer: 'true' logged, 'false' replayed",
                     ("questions.fan_running.images[0].boxes[0].weight: 0.001 logged, 0.0012 replayed "
                     "(|difference| 0.0002)"),
                     "questions.fan_running.audio[0].windows: 1 logged, 2 replayed",
                     "questions.fan_running.videos[0].moments[0].start_s: 0.0 logged, 1.0 replayed"]


def test_a_question_missing_or_a_value_of_another_type_is_a_difference():
    logged = evidence_summary(x_evidence(), 3)
    replayed = copy.deepcopy(logged)
    replayed["questions"]["other"] = replayed["questions"]["fan_running"]
    _, found = summary_differences(logged, replayed, 1e-6)
    assert found == ["questions: keys ['fan_running'] logged, ['fan_running', 'other'] replayed"]
    replayed = copy.deepcopy(logged)
    replayed["questions"]["fan_running"]["state"]["chars"] = True             # not the number 40, nor 1
    replayed["top"] = 2
    _, found = summary_differences(logged, replayed, 1e-6)
    assert found == ["top: 3 logged, 2 replayed", "questions.fan_running.state.chars: 40 logged, True replayed"]
