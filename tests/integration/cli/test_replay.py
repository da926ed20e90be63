"""`omni replay` on the tiny checkpoint: a mixed log (text joint and isolated, image, audio, heard video; batched and
alone; calibrated; over several segments) is reproduced within 1e-5 on the unrounded probabilities; a changed
checkpoint or calibration is refused naming both hashes, and `--force` replays it and reports the drift; hash-only,
missing and altered media are unreplayable per record; corrupt, foreign and missing files are exit 2 with one line."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest

from api.cli.main import main
from fixtures.media import image_bytes, video_bytes, wav_bytes
from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.model.calibration import Calibration, checkpoint_fingerprint, prompt_format_fingerprint, save_calibration
from omni.model.tiny import write_checkpoint
from omni.serve.decision_log import DecisionLog
from omni.serve.decision_log_files import read_records, segment_paths
from omni.serve.engine import DecisionEngine
from preprocess.item import MediaItem

QUESTIONS = {"ok": {"type": "noul", "instructions": "Is the unit fine?"},
             "team": {"type": "choice", "criteria": {"hvac": None, "electric": "wiring"}},
             "severity": {"type": "score", "criteria": ["none", "minor", "major"]}}


@pytest.fixture(scope="module")
def checkpoint(tiny_dir, tmp_path_factory) -> Path:
    """The tiny checkpoint with a calibration file of its own."""
    directory = tmp_path_factory.mktemp("calibrated") / "ckpt"
    shutil.copytree(tiny_dir, directory)
    save_calibration(Calibration({"noul:2": 2.0, "score:3": 0.5}, checkpoint_fingerprint(directory),
                                 prompt_format_fingerprint()), directory)
    return directory


@pytest.fixture(scope="module")
def logged(checkpoint, tmp_path_factory) -> tuple[Path, Path, list[dict]]:
    """(the log, the same decisions logged hash-only, their responses and audit records): one engine, written as
    `omni serve --decision-log` writes them, a segment rotated every record or two."""
    engine = DecisionEngine(EngineConfig(model_path=str(checkpoint), calibration=True, audit="record")).load()

    def request(state: str, rid: str, *media: MediaItem, **body):
        parsed = parse_request({"state": state, "questions": QUESTIONS, **body}, engine.config)
        return dataclasses.replace(parsed, media=media, request_id=rid)

    photo, clip = image_bytes("JPEG", width=80, height=48, exif_orientation=6), wav_bytes(0.5)
    video = video_bytes(seconds=1.0, width=64, height=48)                # with an AAC soundtrack, heard
    batched = [request("The fan rattles.", "text-1"), request("Hums evenly.", "isolated-1", x_isolation="isolated"),
               request("Photo attached.", "image-1", MediaItem("images", 0, photo))]
    alone = [request("Listen.", "audio-1", MediaItem("audio", 0, clip)),
             request("Watch and listen.", "video-1", MediaItem("videos", 0, video)),
             request("Both.", "mixed-1", MediaItem("images", 0, photo), MediaItem("audio", 0, clip))]
    decisions = engine.decide_batch(batched) + [engine.decide(one) for one in alone]
    root = tmp_path_factory.mktemp("logs")
    for directory, media in ((root / "log", "store"), (root / "hash-only", "hash-only")):
        with DecisionLog(directory, media=media, segment_bytes=6000) as log:
            for one, decision in zip(batched + alone, decisions, strict=True):
                assert decision.audit is not None
                log.append(one, decision.to_wire(), decision.audit.to_wire(), request_id=one.request_id,
                           decided_at=decision.audit.decided_at)
    kept = [{"response": d.to_wire(), "audit": d.audit.to_wire()} for d in decisions if d.audit is not None]
    return root / "log", root / "hash-only", kept


def replay(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["replay", *map(str, args), "--quiet"])
    out, err = capsys.readouterr()
    return code, out, err


def replay_json(capsys, *args) -> tuple[int, dict]:
    code, out, _err = replay(capsys, *args, "--json")
    return code, json.loads(out)


def test_the_audit_record_keeps_the_probabilities_the_rounded_answers_came_from(logged):
    _log, _hash_only, kept = logged
    for decision in kept:
        exact, answers = decision["audit"]["probabilities"], decision["response"]["answers"]
        assert list(exact) == list(answers)
        assert abs(exact["ok"]["true"] - answers["ok"]["noul"]) <= 1e-4
        assert set(exact["team"]) == set(answers["team"]["probabilities"]) == {"hvac", "electric"}
        for question in ("team", "severity"):
            for option, p in exact[question].items():
                assert abs(p - answers[question]["probabilities"][option]) <= 1e-4
        assert any(len(repr(p)) > 8 for p in exact["team"].values())     # not rounded to 4 decimals


def test_a_mixed_log_is_reproduced_within_1e5(logged, checkpoint, capsys):
    log, _hash_only, kept = logged
    assert len(segment_paths(log)) >= 3
    code, result = replay_json(capsys, log)        # model, dtypes and calibration: as the records say
    assert code == 0, result
    assert result["reproduced"] is True and result["tolerance"] == 1e-5
    assert result["counts"] == {"reproduced": 6, "differs": 0, "drift": 0, "refused": 0, "unreplayable": 0}
    assert [r["request_id"] for r in result["records"]] == ["text-1", "isolated-1", "image-1", "audio-1",
                                                            "video-1", "mixed-1"]
    assert result["max_abs_diff"] <= 1e-5
    assert result["max_abs_diff"] == max(r["max_abs_diff"] for r in result["records"])
    assert all(set(r["questions"]) == set(QUESTIONS) and r["drift"] == {} for r in result["records"])
    audit = kept[0]["audit"]
    assert result["model_sha256"] == audit["model"]["sha256"]
    assert result["calibration_sha256"] == audit["calibration"]["sha256"] is not None
    assert {m["slot"] for d in kept for m in d["audit"]["media"]} == {"images", "audio", "videos"}
    assert any(m["used"].get("soundtrack_heard") for d in kept for m in d["audit"]["media"])


def test_one_record_and_one_request_id_can_be_replayed_alone(logged, checkpoint, capsys):
    log, _hash_only, _kept = logged
    video = next(d for d in read_records(log) if d.record["request_id"] == "video-1")
    code, out, _err = replay(capsys, f"{video.segment}:{video.line}", "--model", checkpoint)
    rows = out.strip().splitlines()
    assert code == 0 and len(rows) == 3                                   # header, the record, the summary
    assert f"{video.segment.name}:{video.line}" in rows[1] and "video-1" in rows[1] and "reproduced" in rows[1]
    assert rows[2].startswith("1 records: 1 reproduced; max |dp| ")
    code, result = replay_json(capsys, log, "--request-id", "isolated-1", "--batch-size", 1)
    assert code == 0 and [r["request_id"] for r in result["records"]] == ["isolated-1"]


def test_a_changed_checkpoint_is_refused_naming_both_hashes_and_force_reports_the_drift(logged, tmp_path, capsys):
    log, _hash_only, kept = logged
    other = write_checkpoint(tmp_path / "other", seed=1)
    logged_model, logged_calibration = kept[0]["audit"]["model"]["sha256"], kept[0]["audit"]["calibration"]["sha256"]
    code, out, _err = replay(capsys, log, "--model", other, "--no-calibration")
    assert code == 1
    refused = out.strip().splitlines()[1:-1]
    assert len(refused) == 6 and all(" refused " in row for row in refused)
    loaded_model = re.search(r"model sha256 ([0-9a-f]{64}), calibration none$", out.strip())[1]
    assert loaded_model != logged_model
    for row in refused:          # both hashes of the model, both of the calibration (a file, then none)
        assert logged_model in row and loaded_model in row and logged_calibration in row and "none" in row
        assert "--force" in row

    code, result = replay_json(capsys, log, "--model", other, "--no-calibration", "--force")
    assert code == 1 and result["counts"]["drift"] == 6 and result["reproduced"] is False
    for record in result["records"]:
        assert record["status"] == "drift" and record["reason"] is None
        assert record["drift"]["model"] == {"logged": logged_model, "replayed": loaded_model}
        assert record["drift"]["calibration"] == {"logged": logged_calibration, "replayed": None}
        assert record["max_abs_diff"] > 1e-3 and set(record["questions"]) == set(QUESTIONS)
    assert result["max_abs_diff"] == max(r["max_abs_diff"] for r in result["records"])


def test_a_record_decided_calibrated_is_refused_without_its_calibration(logged, checkpoint, capsys):
    log, _hash_only, kept = logged
    code, result = replay_json(capsys, log, "--request-id", "text-1", "--no-calibration")
    [record] = result["records"]
    assert code == 1 and record["status"] == "refused" and record["max_abs_diff"] is None
    assert kept[0]["audit"]["calibration"]["sha256"] in record["reason"] and "none (uncalibrated)" in record["reason"]
    assert "model" not in record["drift"]


def test_media_kept_as_hashes_only_are_not_replayable_and_are_counted(logged, capsys):
    _log, hash_only, _kept = logged
    code, out, _err = replay(capsys, hash_only)
    assert code == 1
    assert "2 reproduced, 4 unreplayable" in out.splitlines()[-1]          # the two text records still replay
    rows = {row.split()[1]: row for row in out.splitlines()[1:-1]}
    assert "hashes only" in rows["video-1"] and "videos.0 (sha256 " in rows["video-1"]


def test_missing_or_altered_media_make_their_record_unreplayable(logged, tmp_path, capsys):
    log, _hash_only, kept = logged
    copy = tmp_path / "log"
    shutil.copytree(log, copy)
    audio_sha = next(m["sha256"] for d in kept for m in d["audit"]["media"] if m["slot"] == "audio")
    image_sha = next(m["sha256"] for d in kept for m in d["audit"]["media"] if m["slot"] == "images")
    next((copy / "media").glob(f"{audio_sha}.*")).unlink()
    next((copy / "media").glob(f"{image_sha}.*")).write_bytes(image_bytes("PNG"))
    code, result = replay_json(capsys, copy)
    status = {r["request_id"]: (r["status"], r["reason"]) for r in result["records"]}
    assert code == 1 and result["counts"]["unreplayable"] == 3 and result["counts"]["reproduced"] == 3
    assert status["audio-1"][0] == "unreplayable" and "cannot be read back" in status["audio-1"][1]
    assert status["image-1"][0] == "unreplayable" and f"not the ones decided on (sha256 {image_sha})" in \
        status["image-1"][1]


def test_corrupt_foreign_and_missing_inputs_are_exit_2_with_one_line(logged, tmp_path, capsys):
    log, _hash_only, _kept = logged
    copy = tmp_path / "log"
    shutil.copytree(log, copy)
    second = segment_paths(copy)[1]
    bad_line = len(second.read_bytes().splitlines()) + 1
    second.write_bytes(second.read_bytes() + b'{"format": "omni-decision/1", "request_id": 3}\n{"a": 1}\n')
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text('{"state": "a dataset line", "questions": {}}\n')
    picture = tmp_path / "unit.png"
    picture.write_bytes(image_bytes("PNG"))
    cases = [(copy, f"{second}: line {bad_line}: a decision-log record without decided_at, request, response, audit"),
             (foreign, f"{foreign}: line 1: not a decision-log record"),
             (picture, f"{picture}: line 1: not a decision-log record (not UTF-8 text)"),
             (tmp_path, f"{tmp_path}: is not a decision log directory"),
             (tmp_path / "nowhere", f"{tmp_path / 'nowhere'}: does not exist"),
             (f"{segment_paths(log)[0]}:99", f"{segment_paths(log)[0]}: line 99: no record on this line"),
             (log, "no record with request id 'nobody'")]
    for target, message in cases:
        extra = ["--request-id", "nobody"] if message.startswith("no record with") else []
        code, out, err = replay(capsys, target, *extra)
        assert code == 2 and out == "", (target, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith("omni replay: ") and message in err, err
