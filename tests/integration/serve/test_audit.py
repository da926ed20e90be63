"""The audit record on the tiny checkpoint: every field on text, image, audio and heard-video requests; hashes equal
hashlib's over the very bytes; stable across a restart; a changed question or calibration file changes the right
hash; shown only when asked (or `audit="always"`), kept for every decision with `audit="record"`."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from fixtures.media import image_bytes, video_bytes, wav_bytes
from omni.contract.audit import AUDIT_FORMAT, audit_from_wire
from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.model.calibration import Calibration, checkpoint_fingerprint, prompt_format_fingerprint, save_calibration
from omni.model.fingerprint import checkpoint_files, sidecar_path
from omni.serve.engine import DecisionEngine
from preprocess.item import MediaItem

QUESTIONS = {"ok": {"type": "noul", "instructions": "Is the unit fine?"},
             "team": {"type": "choice", "criteria": {"hvac": None, "electric": "wiring"}}}


def request(engine: DecisionEngine, media: tuple[MediaItem, ...] = (), **body):
    return dataclasses.replace(parse_request({"state": "The fan rattles.", "questions": QUESTIONS, "x_audit": True,
                                              **body}, engine.config), media=media, request_id="rid-1")


def independent_checkpoint_sha256(directory: Path) -> str:
    """The documented rule, recomputed from the files themselves."""
    lines = ""
    for path in checkpoint_files(directory):
        data = path.read_bytes()
        lines += f"{path.name}\t{len(data)}\t{hashlib.sha256(data).hexdigest()}\n"
    return hashlib.sha256(lines.encode()).hexdigest()


@pytest.fixture(scope="module")
def engine(tiny_dir, tmp_path_factory):
    return DecisionEngine(EngineConfig(model_path=str(tiny_dir), cache_dir=str(tmp_path_factory.mktemp("cache")))
                          ).load()


def test_a_text_request_gets_every_part_of_the_record(engine, tiny_dir):
    decision = engine.decide(request(engine))
    wire = decision.to_wire()["x_audit"]
    assert wire["format"] == AUDIT_FORMAT and audit_from_wire(wire) == decision.audit
    model = wire["model"]
    assert model["id"] == "clef-omni" and model["sha256"] == independent_checkpoint_sha256(tiny_dir)
    assert model["head"] == json.loads((tiny_dir / "joint_head_config.json").read_text())
    assert model["release_date"] == engine.info["release_date"] and model["source"] == str(tiny_dir)
    assert wire["calibration"] is None
    prompt = wire["prompt"]
    ids = engine.model.prepare(request(engine)).input_ids.numpy()
    assert prompt["input_ids_sha256"] == hashlib.sha256(ids.astype("<u4").tobytes()).hexdigest()
    assert prompt["input_tokens"] == len(ids) == decision.usage.input_tokens
    assert prompt["tokens_by_modality"] == {"text": len(ids)} and prompt["isolation"] == "joint"
    assert prompt["truncated_state_tokens"] == prompt["truncated_state_chars"] == 0
    assert prompt["template"] == "clef-joint-schema/1" and len(prompt["template_sha256"]) == 64
    assert wire["media"] == []
    runtime = wire["runtime"]
    assert runtime["batch_size"] == 1 and runtime["chunked"] is False and runtime["device"] == "cpu"
    assert runtime["backbone_dtype"] == runtime["head_dtype"] == "float32"
    assert all(runtime[k] for k in ("omni_decide", "torch", "transformers", "pyav", "ffmpeg"))
    assert wire["request_id"] == "rid-1" and wire["decided_at"].endswith("Z") and wire["policy_sha256"] is None


def test_media_records_say_what_was_used_and_hash_the_callers_bytes(engine):
    photo = image_bytes("JPEG", width=160, height=96, exif_orientation=6)   # stored turned: EXIF makes it upright
    clip = wav_bytes(0.5, sample_rate_hz=44100, channels=2)
    video = video_bytes(seconds=2.0, width=128, height=96)                   # 25 fps with an AAC soundtrack
    items = (MediaItem("images", 0, photo), MediaItem("audio", 0, clip), MediaItem("videos", 0, video))
    decision = engine.decide(request(engine, items))
    media = decision.to_wire()["x_audit"]["media"]
    assert [(m["slot"], m["index"], m["sha256"], m["bytes"]) for m in media] == [
        (i.slot, i.index, hashlib.sha256(i.data).hexdigest(), len(i.data)) for i in items]
    image, audio, clip_video = (m["used"] for m in media)
    assert [m["type"] for m in media] == ["jpeg", "wav", "mp4"]
    assert image["orientation"] == 6 and (image["source_width"], image["source_height"]) == (160, 96)
    assert image["width"] % 32 == 0 and image["height"] % 32 == 0 and image["tokens"] == decision.tokens_by_modality[
        "image"]
    assert audio["source_sample_rate_hz"] == 44100 and audio["source_channels"] == 2
    assert audio["seconds"] == pytest.approx(0.5, abs=1e-3) and audio["sample_rate_hz"] == 16000
    assert audio["tokens"] == decision.tokens_by_modality["audio"]
    assert clip_video["frames"] == 4 and len(clip_video["frame_times_s"]) == 4
    assert np.allclose(clip_video["frame_times_s"], [0.0, 0.52, 1.0, 1.52], atol=0.03)      # nearest 25 fps frames
    assert clip_video["soundtrack_heard"] is True and clip_video["soundtrack_seconds"] > 1.5
    assert clip_video["soundtrack_tokens"] == decision.tokens_by_modality["video_audio"]
    assert (clip_video["source_width"], clip_video["source_height"], clip_video["rotation_degrees"]) == (128, 96, 0)


def test_hashes_are_stable_across_a_restart_and_follow_what_changed(engine, tiny_dir, tmp_path, monkeypatch):
    from omni.model import fingerprint

    engine.decide(request(engine))
    assert not (Path(engine.config.cache_dir) / "fingerprints").exists()  # a small checkpoint leaves no sidecar
    monkeypatch.setattr(fingerprint, "SIDECAR_MIN_BYTES", 0)                # as a 60 GB one would
    first = engine.decide(request(engine)).audit
    restarted = DecisionEngine(EngineConfig(model_path=str(tiny_dir), cache_dir=str(tmp_path))).load()
    again = restarted.decide(request(restarted)).audit
    assert (again.model.sha256, again.prompt.input_ids_sha256) == (first.model.sha256, first.prompt.input_ids_sha256)
    assert sidecar_path(tiny_dir, tmp_path).is_file()                       # a third start reads hashes, not files
    changed = restarted.decide(request(restarted, questions={**QUESTIONS, "ok": {"type": "noul",
                                                                                "instructions": "Is it broken?"}}))
    assert changed.audit.prompt.input_ids_sha256 != first.prompt.input_ids_sha256
    assert changed.audit.model.sha256 == first.model.sha256


def test_a_calibrated_model_names_its_file_and_the_bucket_each_question_took(tiny_dir, tmp_path):
    import shutil

    checkpoint = tmp_path / "ckpt"
    shutil.copytree(tiny_dir, checkpoint)
    hashes = []
    for temperature in (2.0, 3.0):
        path = save_calibration(Calibration({"noul:2": temperature}, checkpoint_fingerprint(checkpoint),
                                            prompt_format_fingerprint()), checkpoint)
        config = EngineConfig(model_path=str(checkpoint), calibration=True, cache_dir=str(tmp_path / "cache"))
        calibrated = DecisionEngine(config).load()
        audit = calibrated.decide(request(calibrated)).audit
        assert audit.calibration is not None
        assert audit.calibration.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        assert audit.calibration.format == "omni-calibration/2"
        assert audit.calibration.buckets == {"ok": "noul:2", "team": None}       # no choice:2 temperature fitted
        hashes.append((audit.calibration.sha256, audit.model.sha256))
    assert hashes[0][0] != hashes[1][0] and hashes[0][1] == hashes[1][1]        # calibration is not the model


def test_the_record_is_shown_only_when_asked_and_kept_for_every_decision_in_record_mode(engine, tiny_dir):
    plain = engine.decide(request(engine, x_audit=False))
    assert plain.audit is None and "x_audit" not in plain.to_wire()
    for mode, shown in (("record", False), ("always", True)):
        other = DecisionEngine(dataclasses.replace(engine.config, audit=mode), engine.model).load()
        decision = other.decide(request(other, x_audit=False))
        assert decision.audit is not None and ("x_audit" in decision.to_wire()) is shown


def test_omni_decide_audit_prints_the_record_and_leaves_it_out_without_the_flag(tiny_dir, tmp_path, capsys):
    from api.cli.main import main

    body = tmp_path / "request.json"
    body.write_text(json.dumps({"state": "The fan rattles.", "questions": QUESTIONS}))
    png = tmp_path / "unit.png"
    png.write_bytes(image_bytes())
    assert main(["decide", str(body), "--model", str(tiny_dir), "--image", str(png), "--compact", "--audit"]) == 0
    audited = json.loads(capsys.readouterr().out)
    record = audit_from_wire(audited["x_audit"])
    assert record.media[0].sha256 == hashlib.sha256(png.read_bytes()).hexdigest() and record.media[0].slot == "images"
    assert record.model.sha256 == independent_checkpoint_sha256(tiny_dir)
    assert main(["decide", str(body), "--model", str(tiny_dir), "--image", str(png), "--compact"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "x_audit" not in plain and plain["answers"] == audited["answers"]
