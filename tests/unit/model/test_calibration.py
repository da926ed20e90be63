"""omni.model.calibration: temperature fitting lowers ECE on an over-confident set; buckets by type × band × modality
set with fallback to type × band; files are bound to their checkpoint; format-1 files still load."""
import json

import numpy as np
import pytest
import torch

from omni.contract.types import DecisionRequest, Option, Question
from omni.learn import metrics
from omni.model.calibration import (
    CALIBRATION_FILE,
    Calibration,
    CalibrationError,
    checkpoint_fingerprint,
    fit_calibration,
    fit_temperature,
    group_key,
    load_calibration,
    modality_key,
    prompt_format_fingerprint,
    request_modality,
    save_calibration,
)
from preprocess.item import MediaItem


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def overconfident_set(n=600, k=3, sharpening=4.0, seed=0):
    """Labels drawn from softmax(z); the 'model' reports sharpening·z, so it is over-confident by that factor."""
    rng = np.random.default_rng(seed)
    true_logits = rng.normal(0.0, 1.0, size=(n, k))
    labels = np.array([rng.choice(k, p=p) for p in softmax(true_logits)])
    return true_logits * sharpening, labels


def fake_checkpoint(directory, head_bytes=b"head-v1"):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "joint_head.safetensors").write_bytes(head_bytes)
    (directory / "joint_head_config.json").write_text("{}")
    (directory / "config.json").write_text("{}")
    (directory / "model.safetensors").write_bytes((16).to_bytes(8, "little") + b"{" + b" " * 14 + b"}" + b"w" * 1000)
    return directory


def test_group_keys_band_option_counts():
    assert [group_key("choice", n) for n in (2, 3, 4, 5, 8, 9, 200)] == [
        "choice:2", "choice:3-4", "choice:3-4", "choice:5-8", "choice:5-8", "choice:9+", "choice:9+"]
    assert group_key("noul", 2) == "noul:2"


def test_fit_temperature_recovers_the_sharpening_factor():
    logits, labels = overconfident_set(n=4000)
    assert fit_temperature(list(logits), labels) == pytest.approx(4.0, rel=0.12)


def test_fitted_calibration_lowers_nll_and_ece_of_an_overconfident_set():
    logits, labels = overconfident_set()
    calibration = fit_calibration([("choice", row, y) for row, y in zip(logits, labels, strict=True)], "fp")
    assert set(calibration.temperatures) == {"choice:3-4"}
    assert calibration.temperatures["choice:3-4"] > 2.5
    calibrated = np.stack([calibration.apply("choice", 3, row) for row in logits])
    before, after = softmax(logits), softmax(calibrated)
    assert metrics.expected_calibration_error(after, labels) < 0.5 * metrics.expected_calibration_error(before, labels)
    assert metrics.negative_log_likelihood(after, labels) < metrics.negative_log_likelihood(before, labels)
    detail = calibration.details["choice:3-4"]
    assert detail["nll_after"] < detail["nll_before"] and detail["samples"] == 600


def test_small_groups_keep_temperature_one_and_apply_works_on_tensors():
    calibration = fit_calibration([("noul", np.array([3.0, -3.0]), 1)] * 5, "fp", min_samples=20)
    assert calibration.temperatures == {} and calibration.details["noul:2"]["fitted"] is False
    scaled = Calibration({"noul:2": 2.0}, "fp")
    assert torch.equal(scaled.apply("noul", 2, torch.tensor([4.0, -2.0])), torch.tensor([2.0, -1.0]))
    assert scaled.apply("choice", 2, np.array([4.0])).tolist() == [4.0]          # another group: T = 1
    request = DecisionRequest("s", (Question("a", "noul", (Option("true"), Option("false"))),))
    assert scaled.apply_record(request, [np.array([2.0, 0.0])])[0].tolist() == [1.0, 0.0]


def test_a_saved_calibration_loads_for_its_checkpoint_and_is_refused_for_another(tmp_path):
    mine = fake_checkpoint(tmp_path / "mine")
    other = fake_checkpoint(tmp_path / "other", head_bytes=b"head-v2")
    assert checkpoint_fingerprint(mine) != checkpoint_fingerprint(other)
    calibration = Calibration({"noul:2": 1.7}, checkpoint_fingerprint(mine), prompt_format_fingerprint())
    save_calibration(calibration, mine)
    assert load_calibration(mine).temperatures == {"noul:2": 1.7}
    assert load_calibration(other) is None                          # nothing there: calibration stays off
    with pytest.raises(CalibrationError, match="another checkpoint"):
        load_calibration(other, path=mine / CALIBRATION_FILE)
    (mine / "model.safetensors").write_bytes((mine / "model.safetensors").read_bytes()[:-1] + b"x")
    with pytest.raises(CalibrationError, match="another checkpoint"):  # the backbone changed too
        load_calibration(mine)


def test_corrupt_or_foreign_format_files_are_refused(tmp_path):
    ckpt = fake_checkpoint(tmp_path / "c")
    (ckpt / CALIBRATION_FILE).write_text("{oops")
    with pytest.raises(CalibrationError, match="cannot read"):
        load_calibration(ckpt)
    (ckpt / CALIBRATION_FILE).write_text(json.dumps({"format": "other/9", "temperatures": {},
                                                     "checkpoint_fingerprint": "x", "prompt_format": "y"}))
    with pytest.raises(CalibrationError, match="unknown format"):
        load_calibration(ckpt)


def test_separable_labels_push_the_temperature_to_its_bound_and_say_so():
    separable = [("noul", np.array([2.0, -2.0]), 0)] * 30 + [("noul", np.array([-1.0, 1.0]), 1)] * 30
    calibration = fit_calibration(separable, "fp")
    assert calibration.temperatures["noul:2"] == pytest.approx(0.01, rel=0.05)
    assert calibration.details["noul:2"]["at_bound"] is True
    logits, labels = overconfident_set()
    honest = fit_calibration([("choice", row, y) for row, y in zip(logits, labels, strict=True)], "fp")
    assert honest.details["choice:3-4"]["at_bound"] is False


# ------------------------------------------------------------------------------------------ modality buckets
NOUL = (Question("ok", "noul", (Option("true"), Option("false"))),)


def request_with(*slots):
    return DecisionRequest("s", NOUL, media=tuple(MediaItem(slot, i, b"x") for i, slot in enumerate(slots)))


def test_the_modality_set_is_text_or_the_sorted_kinds_of_the_media():
    assert request_modality(request_with()) == "text"
    assert request_modality(request_with("images", "images")) == "image"
    assert request_modality(request_with("videos")) == "video"          # a soundtrack is part of its video
    assert request_modality(request_with("videos", "images", "audio")) == "audio+image+video"
    assert modality_key(["image", "audio", "image"]) == "audio+image"
    assert group_key("choice", 3, "audio+image") == "choice:3-4:audio+image"


def mixed_set(n_each=400, sharpening=4.0):
    """Image requests over-confident by `sharpening`, text requests honest (labels drawn from their own logits)."""
    image_logits, image_labels = overconfident_set(n_each, k=2, sharpening=sharpening, seed=1)
    text_logits, text_labels = overconfident_set(n_each, k=2, sharpening=1.0, seed=2)
    return ([("noul", row, y, "image") for row, y in zip(image_logits, image_labels, strict=True)]
            + [("noul", row, y, "text") for row, y in zip(text_logits, text_labels, strict=True)])


def test_image_and_text_requests_get_their_own_temperatures():
    calibration = fit_calibration(mixed_set(), "fp")
    t = calibration.temperatures
    assert set(t) == {"noul:2", "noul:2:image", "noul:2:text"}
    assert t["noul:2:image"] == pytest.approx(4.0, rel=0.25)
    assert t["noul:2:text"] == pytest.approx(1.0, rel=0.25)
    assert t["noul:2:text"] < t["noul:2"] < t["noul:2:image"]          # the pooled fit sits in between
    assert calibration.details["noul:2:image"]["samples"] == 400 and calibration.details["noul:2"]["samples"] == 800


def test_a_bucket_under_min_samples_falls_back_to_its_type_and_band():
    samples = mixed_set()[:400] + [("noul", np.array([1.0, -1.0]), 0, "audio")] * 5
    calibration = fit_calibration(samples, "fp", min_samples=20)
    coarse = fit_calibration([s[:3] for s in samples], "fp", min_samples=20)      # no modality: coarse only
    assert set(coarse.temperatures) == {"noul:2"}
    assert calibration.temperatures["noul:2"] == coarse.temperatures["noul:2"]
    assert "noul:2:audio" not in calibration.temperatures
    detail = calibration.details["noul:2:audio"]
    assert detail["fitted"] is False and detail["fallback_temperature"] == coarse.temperatures["noul:2"]
    assert calibration.temperature("noul", 2, "audio") == coarse.temperatures["noul:2"]
    assert calibration.temperature("noul", 2, "image") == calibration.temperatures["noul:2:image"]
    assert calibration.temperature("noul", 2, "video") == coarse.temperatures["noul:2"]      # never seen
    assert calibration.temperature("choice", 3, "image") == 1.0                             # no coarse either


def test_apply_uses_the_bucket_of_the_requests_media():
    calibration = Calibration({"noul:2": 2.0, "noul:2:image": 4.0, "noul:2:text": 0.5}, "fp")
    logits = [np.array([4.0, 0.0])]
    assert calibration.apply_record(request_with("images"), logits)[0].tolist() == [1.0, 0.0]
    assert calibration.apply_record(request_with(), logits)[0].tolist() == [8.0, 0.0]
    assert calibration.apply_record(request_with("audio"), logits)[0].tolist() == [2.0, 0.0]     # coarse
    assert calibration.apply_record(request_with("images", "audio"), logits)[0].tolist() == [2.0, 0.0]
    assert calibration.apply("noul", 2, logits[0]).tolist() == [2.0, 0.0]          # no modality given: coarse


def test_a_fine_calibration_round_trips_and_a_format_1_file_loads_as_coarse(tmp_path):
    ckpt = fake_checkpoint(tmp_path / "c")
    fitted = fit_calibration(mixed_set(), checkpoint_fingerprint(ckpt))
    save_calibration(fitted, ckpt)
    body = json.loads((ckpt / CALIBRATION_FILE).read_text())
    assert body["format"] == "omni-calibration/2"
    assert load_calibration(ckpt).temperatures == fitted.temperatures
    version_1 = {"format": "omni-calibration/1", "checkpoint_fingerprint": checkpoint_fingerprint(ckpt),
                 "prompt_format": prompt_format_fingerprint(), "temperatures": {"noul:2": 1.5},
                 "groups": {"noul:2": {"samples": 30, "fitted": True, "temperature": 1.5}}}
    (ckpt / CALIBRATION_FILE).write_text(json.dumps(version_1))
    loaded = load_calibration(ckpt)
    assert loaded.temperatures == {"noul:2": 1.5}
    for slots in ((), ("images",), ("videos", "audio")):
        assert loaded.apply_record(request_with(*slots), [np.array([3.0, 0.0])])[0].tolist() == [2.0, 0.0]
    (ckpt / CALIBRATION_FILE).write_text(json.dumps({**version_1, "checkpoint_fingerprint": "another"}))
    with pytest.raises(CalibrationError, match="another checkpoint"):                # still bound to its checkpoint
        load_calibration(ckpt)
    (ckpt / CALIBRATION_FILE).write_text(json.dumps({**version_1, "temperatures": {"noul:2:image": 1.5}}))
    with pytest.raises(CalibrationError, match="type × band buckets only"):
        load_calibration(ckpt)
