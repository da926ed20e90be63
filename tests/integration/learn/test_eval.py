"""`omni eval` and `omni calibrate` on the tiny checkpoint: report files, metrics that match the predictions,
calibration bound to its checkpoint, bad records reported by line."""
import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from api.cli.learn import add_calibrate_arguments, add_eval_arguments, run_calibrate, run_eval
from fixtures.inspection import write_keyword_task, write_split
from omni.learn.dataset import DatasetError
from omni.learn.evaluation import ScoredQuestion, compute_metrics
from omni.model.calibration import CALIBRATION_FILE, Calibration, CalibrationError


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return write_keyword_task(tmp_path_factory.mktemp("eval") / "task.jsonl", 16, seed=1)


def parse(add, argv):
    parser = argparse.ArgumentParser()
    add(parser)
    return parser.parse_args(argv)


def test_eval_writes_metrics_report_and_figures_that_agree_with_the_predictions(tiny_dir, task, tmp_path, capsys):
    out = tmp_path / "report"
    assert run_eval(parse(add_eval_arguments, [str(task), "--model", str(tiny_dir), "--out", str(out),
                                               "--quiet"])) == 0
    result = json.loads((out / "metrics.json").read_text())
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 32 and result["meta"]["records"] == 16
    for qid in ("is_red", "size"):
        rows = [p for p in predictions if p["question"] == qid]
        metrics = result["questions"][qid]
        assert metrics["count"] == 16
        assert metrics["accuracy"] == pytest.approx(np.mean([p["label"] == p["predicted"] for p in rows]))
        nll = np.mean([-np.log(p["probabilities"][p["label"]]) for p in rows])
        assert metrics["nll"] == pytest.approx(nll, abs=1e-4)
        assert np.sum(metrics["confusion_matrix"]) == 16
        assert (out / f"reliability_{qid}.png").read_bytes()[:4] == b"\x89PNG"
        assert (out / f"confusion_{qid}.png").read_bytes()[:4] == b"\x89PNG"
    assert result["questions"]["is_red"]["options"] == ["true", "false"]
    assert result["questions"]["size"]["options"] == ["l", "s"]                       # head (prompt) order
    assert set(result["types"]) == {"noul", "choice", "all"} and result["types"]["all"]["count"] == 32
    assert (out / "reliability_type_all.png").is_file()
    report = (out / "report.md").read_text()
    assert "| `is_red` | noul | 16 |" in report and "![reliability_size](reliability_size.png)" in report
    assert "is_red" in capsys.readouterr().out


def test_calibrate_writes_a_bound_file_that_eval_applies(tiny_dir, task, tmp_path):
    checkpoint = shutil.copytree(tiny_dir, tmp_path / "ckpt")
    assert run_calibrate(parse(add_calibrate_arguments, [str(task), "--model", str(checkpoint), "--quiet",
                                                         "--min-samples", "8"])) == 0
    body = json.loads((checkpoint / CALIBRATION_FILE).read_text())
    temperatures = body["temperatures"]
    assert body["format"] == "omni-calibration/2"
    assert set(temperatures) == {"noul:2", "choice:2", "noul:2:text", "choice:2:text"}     # text only: no media
    assert temperatures["noul:2:text"] == temperatures["noul:2"]                         # the same samples
    for group in body["groups"].values():
        assert group["nll_after"] <= group["nll_before"] + 1e-9        # T = 1 is a candidate: never worse
    reports = {}
    for flag in ([], ["--calibration"]):
        out = tmp_path / ("on" if flag else "off")
        run_eval(parse(add_eval_arguments, [str(task), "--model", str(checkpoint), "--out", str(out), "--quiet",
                                            "--no-plots"] + flag))
        reports[bool(flag)] = json.loads((out / "metrics.json").read_text())
    assert reports[True]["meta"]["calibration"] == "on"
    assert reports[True]["types"]["all"]["nll"] <= reports[False]["types"]["all"]["nll"] + 1e-9
    assert not (tmp_path / "on" / "reliability_type_all.png").exists()


def test_a_calibration_file_from_another_checkpoint_is_refused(tiny_dir, task, tmp_path):
    mine = shutil.copytree(tiny_dir, tmp_path / "mine")
    run_calibrate(parse(add_calibrate_arguments, [str(task), "--model", str(mine), "--quiet", "--min-samples", "1"]))
    other = shutil.copytree(tiny_dir, tmp_path / "other")
    head = load_file(str(other / "joint_head.safetensors"))
    head["residual_gate"] = head["residual_gate"] + 0.5             # another checkpoint: a different head
    save_file(head, str(other / "joint_head.safetensors"))
    shutil.copy(mine / CALIBRATION_FILE, other / CALIBRATION_FILE)
    with pytest.raises(CalibrationError, match="another checkpoint"):
        run_eval(parse(add_eval_arguments, [str(task), "--model", str(other), "--out", str(tmp_path / "r"),
                                            "--quiet", "--calibration"]))
    with pytest.raises(CalibrationError, match="no calibration.json"):
        run_eval(parse(add_eval_arguments, [str(task), "--model", str(tiny_dir), "--out", str(tmp_path / "r"),
                                            "--quiet", "--calibration"]))


def test_records_that_fail_at_scoring_are_reported_by_line(tiny_dir, tmp_path):
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n but then nothing")
    good = {"state": "s", "questions": {"q": {"type": "noul"}}, "labels": {"q": True}}
    lines = [good, {**good, "images": ["broken.png"]}, good]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    with pytest.raises(DatasetError) as info:
        run_eval(parse(add_eval_arguments, [str(tmp_path / "data.jsonl"), "--model", str(tiny_dir), "--out",
                                            str(tmp_path / "r"), "--quiet"]))
    assert [line for line, _ in info.value.problems] == [2]
    assert "images[0]" in info.value.problems[0][1]


DEMO_CHECKPOINT = Path(__file__).resolve().parents[3] / "omni" / "model" / "checkpoints" / "tiny-inspection-v1"


@pytest.mark.skipif(not (DEMO_CHECKPOINT / "joint_head.safetensors").is_file(), reason="demo checkpoint not built")
def test_the_committed_demo_checkpoint_answers_held_out_inspection_units(tmp_path):
    """Units 0-7 of the held-out split (seed 1): every answer right, confidently (the demo's regression check)."""
    data = write_split(tmp_path / "units", "test", 8, seed=1)
    run_eval(parse(add_eval_arguments, [str(data), "--model", str(DEMO_CHECKPOINT), "--out", str(tmp_path / "r"),
                                        "--quiet", "--no-plots"]))
    result = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert set(result["questions"]) == {"label_visible", "sounds_normal", "fan_running", "severity", "next_step"}
    for qid, metrics in result["questions"].items():
        assert metrics["accuracy"] == 1.0, qid
        assert metrics["nll"] < 0.1, qid


def test_metrics_group_by_question_and_pool_by_type_from_raw_logits():
    ln = np.log
    scored = [  # team asked with two option sets; labels and logits in head order
        ScoredQuestion(1, "team", "choice", ("a", "b"), np.array([ln(3.0), 0.0]), 0),          # p (.75, .25) ✓
        ScoredQuestion(2, "team", "choice", ("a", "b", "c"), np.array([0.0, ln(2.0), 0.0]), 2),  # p (.25,.5,.25) ✗
        ScoredQuestion(1, "ok", "noul", ("true", "false"), np.array([0.0, ln(4.0)]), 1),        # p (.2, .8) ✓
    ]
    result, groups, _pooled = compute_metrics(scored, target_precision=0.9)
    team = result["questions"]["team"]
    assert team["options"] == ["a", "b", "c"] and team["count"] == 2 and team["accuracy"] == 0.5
    assert team["nll"] == pytest.approx((-ln(0.75) - ln(0.25)) / 2)
    assert team["confusion_matrix"] == [[1, 0, 0], [0, 0, 0], [0, 1, 0]]
    assert groups[0].probabilities[0].tolist() == pytest.approx([0.75, 0.25, 0.0])
    everything = result["types"]["all"]
    assert everything["count"] == 3 and everything["accuracy"] == pytest.approx(2 / 3)
    assert everything["macro_f1"] == pytest.approx((team["macro_f1"] + result["questions"]["ok"]["macro_f1"]) / 2)
    # confidences .8 ✓, .75 ✓, .5 ✗: precision 0.9 is reached down to 0.75, covering two of three answers
    assert everything["precision_threshold"]["threshold"] == pytest.approx(0.75)
    assert everything["precision_threshold"]["coverage"] == pytest.approx(2 / 3)
    halved = compute_metrics(scored, calibration=Calibration({"noul:2": 2.0}, "fp"))[0]["questions"]["ok"]
    assert halved["nll"] == pytest.approx(-ln(2 / 3))                     # logits / 2 → p (1/3, 2/3)


def test_the_engine_applies_calibration_only_when_switched_on(tiny_dir, task, tmp_path):
    from omni.contract.config import EngineConfig
    from omni.contract.request import parse_request
    from omni.model.calibration import checkpoint_fingerprint, prompt_format_fingerprint, save_calibration
    from omni.serve.engine import DecisionEngine

    checkpoint = shutil.copytree(tiny_dir, tmp_path / "ckpt")
    save_calibration(Calibration({"noul:2": 0.25}, checkpoint_fingerprint(checkpoint), prompt_format_fingerprint()),
                     checkpoint)
    body = {"state": "s", "questions": {"q": {"type": "noul"}, "c": {"type": "choice", "criteria": {"a": "one", "b": "two"}}}}
    engines = {on: DecisionEngine(EngineConfig(model_path=str(checkpoint), calibration=on)).load() for on in (False, True)}
    records = {on: e.model.prepare(parse_request(body, e.config)) for on, e in engines.items()}
    logits = engines[False].model.logits([records[False]])[0]
    off = engines[False].model.probabilities([records[False]])[0]
    on = engines[True].model.probabilities([records[True]])[0]
    torch.testing.assert_close(off[0], torch.softmax(logits[0].float(), -1))
    torch.testing.assert_close(on[0], torch.softmax(logits[0].float() / 0.25, -1))     # noul sharpened by T = 0.25
    torch.testing.assert_close(on[1], off[1])                                        # choice:2 not fitted: T = 1
    foreign = shutil.copytree(tiny_dir, tmp_path / "foreign")
    head = load_file(str(foreign / "joint_head.safetensors"))
    head["residual_gate"] = head["residual_gate"] + 0.5
    save_file(head, str(foreign / "joint_head.safetensors"))
    shutil.copy(checkpoint / CALIBRATION_FILE, foreign / CALIBRATION_FILE)
    with pytest.raises(CalibrationError, match="another checkpoint"):
        DecisionEngine(EngineConfig(model_path=str(foreign), calibration=True)).load()
    DecisionEngine(EngineConfig(model_path=str(foreign))).load()                     # off by default: not read


def test_the_engine_calibrates_each_request_in_its_modality_bucket(tiny_dir, tmp_path):
    import base64

    from fixtures.media import image_bytes
    from omni.contract.config import EngineConfig
    from omni.contract.request import parse_request
    from omni.model.calibration import checkpoint_fingerprint, prompt_format_fingerprint, save_calibration
    from omni.serve.engine import DecisionEngine

    checkpoint = shutil.copytree(tiny_dir, tmp_path / "ckpt")
    temperatures = {"noul:2": 1.0, "noul:2:image": 0.25, "noul:2:text": 4.0}
    save_calibration(Calibration(temperatures, checkpoint_fingerprint(checkpoint), prompt_format_fingerprint()),
                     checkpoint)
    model = DecisionEngine(EngineConfig(model_path=str(checkpoint), calibration=True)).load().model
    photo = "data:image/png;base64," + base64.b64encode(image_bytes("PNG", "RGB", 48, 32)).decode()
    text = {"state": "s", "questions": {"q": {"type": "noul"}}}
    for body, temperature in ((text, 4.0), ({**text, "images": [photo]}, 0.25)):
        record = model.prepare(parse_request(body, EngineConfig()))
        logits = model.logits([record])[0][0]
        torch.testing.assert_close(model.probabilities([record])[0][0], torch.softmax(logits.float() / temperature, -1))
