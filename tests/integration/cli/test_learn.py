"""`omni eval`, `omni calibrate` and `omni finetune` take a review directory (its labels.jsonl, media paths relative
to the directory) on the tiny checkpoint; calibration fits a bucket per modality set that eval applies; a directory
without labels.jsonl is one line and exit 2."""
from __future__ import annotations

import base64
import json
import math
import shutil

import pytest

from api.cli.main import main
from fixtures.media import image_bytes
from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.model.calibration import CALIBRATION_FILE
from omni.review.directory import REVIEW_DATASET_FILE, ReviewDir

QUESTIONS = {"ok": {"type": "noul", "instructions": "Is the unit fine?"}}
RECORDS_PER_KIND = 6


def data_url(data: bytes) -> str:
    return f"data:image/png;base64,{base64.b64encode(data).decode()}"


@pytest.fixture(scope="module")
def review(tmp_path_factory):
    """A review directory as `omni review` leaves it: 6 labelled requests with a photo, 6 with text only."""
    review_dir = ReviewDir(tmp_path_factory.mktemp("review") / "inspection")
    for i in range(2 * RECORDS_PER_KIND):
        body = {"state": f"Unit {i} was inspected; note {i * 7 % 5}.", "questions": QUESTIONS}
        if i % 2 == 0:
            body["images"] = [data_url(image_bytes("PNG", "RGB", 40 + 4 * i, 30))]
        request = parse_request(body, EngineConfig())
        review_dir.save_labels(f"item-{i}", "test", request, {}, {"ok": "true" if i % 3 else "false"})
    return review_dir.root


@pytest.fixture
def checkpoint(tiny_dir, tmp_path):
    return shutil.copytree(tiny_dir, tmp_path / "ckpt")       # calibrate writes into it


def test_the_review_directory_is_a_dataset_with_media_beside_it(review):
    lines = [json.loads(x) for x in (review / REVIEW_DATASET_FILE).read_text().splitlines()]
    paths = [p for line in lines for p in line.get("images", [])]
    assert len(lines) == 2 * RECORDS_PER_KIND and len(paths) == RECORDS_PER_KIND
    assert all(p.startswith("media/") and (review / p).is_file() for p in paths)   # relative to the directory


def test_eval_reads_a_review_directory(review, checkpoint, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["eval", str(review), "--model", str(checkpoint), "--out", str(out), "--quiet", "--no-plots"]) == 0
    result = json.loads((out / "metrics.json").read_text())
    assert result["meta"]["records"] == 2 * RECORDS_PER_KIND
    assert result["meta"]["dataset"] == str(review / REVIEW_DATASET_FILE)
    assert result["questions"]["ok"]["count"] == 2 * RECORDS_PER_KIND
    assert "ok" in capsys.readouterr().out


def noul_probabilities(path) -> dict[int, float]:
    """predictions.jsonl → line number: P(true)."""
    return {p["line"]: p["probabilities"]["true"] for p in map(json.loads, path.read_text().splitlines())}


def test_calibrate_fits_a_bucket_per_modality_set_that_eval_applies(review, checkpoint, tmp_path, capsys):
    assert main(["calibrate", str(review), "--model", str(checkpoint), "--quiet", "--min-samples", "4"]) == 0
    printed = capsys.readouterr().out
    body = json.loads((checkpoint / CALIBRATION_FILE).read_text())
    temperatures = body["temperatures"]
    assert body["format"] == "omni-calibration/2"
    assert set(temperatures) == {"noul:2", "noul:2:image", "noul:2:text"}
    assert body["groups"]["noul:2:image"]["samples"] == RECORDS_PER_KIND
    assert "noul:2:image" in printed and "noul:2:text" in printed
    probabilities = {}
    for flag in ([], ["--calibration"]):
        out = tmp_path / ("on" if flag else "off")
        assert main(["eval", str(review), "--model", str(checkpoint), "--out", str(out), "--quiet", "--no-plots"]
                    + flag) == 0
        probabilities[bool(flag)] = noul_probabilities(out / "predictions.jsonl")
    lines = [json.loads(x) for x in (review / REVIEW_DATASET_FILE).read_text().splitlines()]
    for number, line in enumerate(lines, start=1):     # P(true) = sigmoid(logit gap / T of the record's bucket)
        raw = probabilities[False][number]
        gap = math.log(raw / (1.0 - raw))
        temperature = temperatures["noul:2:image" if line.get("images") else "noul:2:text"]
        assert probabilities[True][number] == pytest.approx(1.0 / (1.0 + math.exp(-gap / temperature)), abs=5e-4)


def test_calibrate_falls_back_to_type_and_band_below_min_samples(review, checkpoint, capsys):
    assert main(["calibrate", str(review), "--model", str(checkpoint), "--quiet",
                 "--min-samples", str(RECORDS_PER_KIND + 1)]) == 0
    body = json.loads((checkpoint / CALIBRATION_FILE).read_text())
    assert set(body["temperatures"]) == {"noul:2"}
    for key in ("noul:2:image", "noul:2:text"):
        assert body["groups"][key]["fitted"] is False
        assert body["groups"][key]["fallback_temperature"] == body["temperatures"]["noul:2"]
    assert "too few samples: type × band T =" in capsys.readouterr().out


def test_finetune_trains_on_a_review_directory(review, checkpoint, tmp_path):
    out = tmp_path / "tuned"
    assert main(["finetune", str(review), "--model", str(checkpoint), "--out", str(out), "--epochs", "1",
                 "--validation", str(review), "--quiet", "--merged"]) == 0
    summary = json.loads((out / "training.json").read_text())
    assert [epoch["epoch"] for epoch in summary["history"]] == [0, 1]          # 0: before training
    assert (out / "joint_head.safetensors").is_file()
    assert main(["eval", str(review), "--model", str(out), "--out", str(tmp_path / "r"), "--quiet",
                 "--no-plots"]) == 0                                       # the result loads and scores


@pytest.mark.parametrize("command", [["eval", "--out", "r"], ["calibrate"], ["finetune", "--out", "r"]])
def test_a_directory_without_labels_is_one_line_and_exit_2(command, tmp_path, capsys):
    empty = tmp_path / "not-a-review"
    empty.mkdir()
    argv = [command[0], str(empty), *command[1:], "--quiet"]
    assert main([a if a != "r" else str(tmp_path / "r") for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"{empty}: a directory without labels.jsonl" in err
