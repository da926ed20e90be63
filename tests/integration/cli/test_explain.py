"""`omni explain` on the README's demo request (examples/inspection.json with unit.png, hum.wav, fan.mp4) and the
embedded demo checkpoint: the evidence summary, and `--occlude` masking each medium's top-evidence region against a
random one of the same size — a row for every question × medium with evidence, regions read from the evidence, the
same rows for the same seed, every |Δp| the distance between two probabilities the engine gave; a caller's mistake
is one line and exit 2. What the figures say about the model is benchmarks/occlusion.py's job, not asserted here."""
from __future__ import annotations

import contextlib
import io
import json
import math

import pytest

from api.cli.main import main

DEMO = ["examples/inspection.json", "--image", "examples/inspection/unit.png", "--audio",
        "examples/inspection/hum.wav", "--video", "examples/inspection/fan.mp4", "--torch-threads", "1"]
QUESTIONS = ["label_visible", "sounds_normal", "fan_running", "severity", "next_step"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["explain", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def explained() -> dict:
    """The evidence and three --occlude runs (seed 0 twice, seed 1 in batches of 3), as --json prints them (a
    module fixture cannot take capsys: stdout is redirected)."""
    outputs = {}
    for name, extra in (("evidence", []), ("seed0", ["--occlude", "--seed", "0"]), ("again", ["--occlude"]),
                        ("seed1", ["--occlude", "--seed", "1", "--batch-size", "3"])):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            assert main(["explain", *DEMO, "--json", *extra]) == 0
        outputs[name] = [json.loads(line) for line in buffer.getvalue().splitlines()]
    return outputs


def test_the_evidence_of_every_question(explained):
    (evidence,) = explained["evidence"]
    assert evidence["method"] == "routing-attention/1"
    assert list(evidence["questions"]) == QUESTIONS
    for entry in evidence["questions"].values():
        assert [i["index"] for i in entry["images"]] == [0]
        assert entry["images"][0]["boxes"]
        assert entry["audio"][0]["windows"]
        assert entry["videos"][0]["moments"]


def test_occlude_masks_the_top_region_of_every_medium_for_every_question(explained):
    (evidence,) = explained["evidence"]
    *rows, summary = explained["seed0"]
    assert all(row["event"] == "row" for row in rows)
    assert summary["event"] == "summary"
    media = ["state", "images[0]", "audio[0]", "videos[0]"]
    for qid in QUESTIONS:
        entry = evidence["questions"][qid]
        mine = {row["medium"]: row for row in rows if row["question"] == qid}
        assert list(mine) == [m for m in media if m != "state" or entry["state"]["spans"]]
        box = entry["images"][0]["boxes"][0]
        assert mine["images[0]"]["top"]["region"] == {k: round(box[k], 2) for k in ("x0", "y0", "x1", "y1")}
        moment = entry["videos"][0]["moments"][0]
        assert mine["videos[0]"]["top"]["region"] == {"start_s": moment["start_s"], "end_s": moment["end_s"]}
        window = entry["audio"][0]["windows"][0]
        assert mine["audio[0]"]["top"]["region"]["start_s"] == round(window["start_s"], 3)
        for row in mine.values():
            assert row["answer"] == str(entry["answer"])
            for side in ("top", "random"):
                assert 0 <= row[side]["p"] <= 1
                assert math.isclose(row[side]["abs_dp"], abs(row[side]["p"] - row["p"]), abs_tol=1e-4)
            assert row["top"]["region"] != row["random"]["region"]
    assert set(summary["by_medium"]) <= {"state", "image", "audio", "video"}
    assert sum(m["rows"] for m in summary["by_medium"].values()) == len(rows)


def test_the_same_seed_gives_the_same_rows_and_another_seed_other_random_regions(explained):
    assert explained["seed0"] == explained["again"]
    first = {(r["question"], r["medium"]): r for r in explained["seed0"][:-1]}
    other = {(r["question"], r["medium"]): r for r in explained["seed1"][:-1]}
    assert first.keys() == other.keys()
    assert all(first[k]["top"] == other[k]["top"] for k in first)            # the top mask does not depend on it
    assert any(first[k]["random"]["region"] != other[k]["random"]["region"] for k in first)


def test_the_tables_for_a_reader(capsys):
    code, out, _ = run(capsys, *DEMO)
    assert code == 0
    assert "label_visible" in out
    assert "images[0]" in out


def test_a_missing_file_or_a_bad_flag_is_one_line_and_exit_2(capsys, tmp_path):
    code, out, err = run(capsys, "examples/inspection.json", "--image", str(tmp_path / "missing.png"), "--occlude")
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert "missing.png" in err
    with pytest.raises(SystemExit) as exit_:
        main(["explain", *DEMO, "--occlude", "--batch-size", "0"])
    assert exit_.value.code == 2
    assert "at least 1" in capsys.readouterr().err
