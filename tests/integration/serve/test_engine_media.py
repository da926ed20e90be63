"""The engine with media: each modality alone and all at once, JSON and CLI forms, x_usage, typed media errors."""
import base64
import json
from pathlib import Path

import pytest
import torch

from fixtures.media import image_bytes, mp3_bytes, video_bytes, wav_bytes
from omni.contract.request import parse_request
from preprocess.errors import CorruptMedia, MediaTooLarge, UnsupportedMedia
from tests.integration.serve.test_engine import run_cli

FILES = Path(__file__).resolve().parents[3] / "fixtures" / "files"
QUESTIONS = {"label_visible": {"type": "noul", "instructions": "Is the label visible?"},
             "sounds_normal": {"type": "noul", "instructions": "Does it sound normal?"},
             "fan_running": {"type": "noul", "instructions": "Is the fan running?"}}


def data_url(mime, data):
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


@pytest.fixture(scope="module")
def media():
    return {"png": image_bytes("PNG", "RGB", 96, 64), "wav": wav_bytes(1.0, 16000, 1),
            "mp3": mp3_bytes(1.0), "mp4": video_bytes(seconds=2.0, width=128, height=96),
            "silent_webm": video_bytes("webm", "libvpx", None, seconds=2.0, width=96, height=64),
            "truncated_wav": (FILES / "corrupt" / "truncated.wav").read_bytes()}


def decide(engine, **fields):
    body = {"state": "Review the installation.", "questions": QUESTIONS, **fields}
    return engine.decide(parse_request(body, engine.config)).to_wire()


def test_each_modality_alone_and_all_at_once(tiny_engine, media):
    text = decide(tiny_engine)
    image = decide(tiny_engine, images=[data_url("image/png", media["png"])])
    audio = decide(tiny_engine, audio=[{"content_type": "audio/wav", "base64": base64.b64encode(media["wav"]).decode()}])
    video = decide(tiny_engine, videos=[data_url("video/mp4", media["mp4"])])
    every = decide(tiny_engine, images=[data_url("image/png", media["png"])],
                   audio=[data_url("audio/wav", media["wav"]), data_url("audio/mpeg", media["mp3"])],
                   videos=[data_url("video/mp4", media["mp4"])])
    # 96×64 is scaled up to the reference minimum of 65,536 px (multiples of 32: 320×192) → 10×6 merged patches... 
    assert image["x_usage"]["image"] == tiny_engine.model.prepare(parse_request(
        {"state": "s", "questions": QUESTIONS, "images": [data_url("image/png", media["png"])]},
        tiny_engine.config)).media.tensors["image_grid_thw"].prod().item() // 4
    assert audio["x_usage"]["audio"] == 13                      # 1 s of audio = 13 tokens
    assert video["x_usage"]["video"] > 0 and video["x_usage"]["video_audio"] == 26   # heard soundtrack, 2 s
    assert every["x_usage"]["audio"] == 26 and every["x_usage"]["video_audio"] == 26
    for out in (image, audio, video, every):
        assert out["usage"]["input_tokens"] == sum(out["x_usage"].values())
        assert out["usage"]["input_tokens"] > text["usage"]["input_tokens"]
        assert out["answers"] != text["answers"]                # the media reach the model
        assert set(out["answers"]) == set(QUESTIONS)


def test_a_silent_video_means_no_video_is_heard(tiny_engine, media):
    out = decide(tiny_engine, videos=[data_url("video/mp4", media["mp4"]), data_url("video/webm", media["silent_webm"])])
    assert "video_audio" not in out["x_usage"] and out["x_usage"]["video"] > 0


def test_media_batch_equals_singles(tiny_engine, media):
    bodies = [{"state": "a", "questions": QUESTIONS, "images": [data_url("image/png", media["png"])]},
              {"state": "b b b", "questions": QUESTIONS, "videos": [data_url("video/mp4", media["mp4"])],
               "audio": [data_url("audio/wav", media["wav"])]},
              {"state": "c", "questions": QUESTIONS}]
    records = [tiny_engine.model.prepare(parse_request(b, tiny_engine.config)) for b in bodies]
    batched = tiny_engine.model.probabilities(records)
    for record, joint in zip(records, batched, strict=True):
        for a, b in zip(joint, tiny_engine.model.probabilities([record])[0], strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_explicit_positions_equal_get_rope_index(tiny_engine, media):
    record = tiny_engine.model.prepare(parse_request({"state": "s", "questions": QUESTIONS,
                                                "videos": [data_url("video/mp4", media["mp4"])],
                                                "images": [data_url("image/png", media["png"])]}, tiny_engine.config))
    ids = record.input_ids[None]
    want, _ = tiny_engine.model.backbone.thinker.model.get_rope_index(
        ids, record.media.tensors["image_grid_thw"], record.media.tensors["video_grid_thw"], torch.ones_like(ids), True,
        record.media.tensors["feature_attention_mask"].sum(-1), record.media.tensors["video_second_per_grid"])
    assert torch.equal(record.position_ids, want.long())


@pytest.mark.parametrize(("field", "item", "error", "label"), [
    ("images", ("video/mp4", "mp4"), UnsupportedMedia, "images[0]"),
    ("videos", ("image/png", "png"), UnsupportedMedia, "videos[0]"),
    ("audio", ("audio/wav", "truncated_wav"), CorruptMedia, "audio[0]"),
])
def test_bad_media_raise_typed_errors_naming_the_item(tiny_engine, media, field, item, error, label):
    mime, key = item
    data = media[key]
    with pytest.raises(error) as info:
        decide(tiny_engine, **{field: [data_url(mime, data)]})
    assert info.value.label == label


def test_too_many_images_names_the_limit(tiny_engine, media):
    with pytest.raises(MediaTooLarge, match=r"images\[4\].*max_images=4"):
        decide(tiny_engine, images=[data_url("image/png", media["png"])] * 5)


def test_cli_media_flags_equal_json_forms(tiny_dir, media, tmp_path):
    (tmp_path / "unit.png").write_bytes(media["png"])
    (tmp_path / "run.wav").write_bytes(media["wav"])
    (tmp_path / "fan.mp4").write_bytes(media["mp4"])
    plain = {"state": "Review the installation.", "questions": QUESTIONS}
    (tmp_path / "req.json").write_text(json.dumps(plain))
    flags = run_cli(["decide", "--model", str(tiny_dir), "--image", str(tmp_path / "unit.png"), "--audio",
                     str(tmp_path / "run.wav"), "--video", str(tmp_path / "fan.mp4"), str(tmp_path / "req.json")])
    assert flags.returncode == 0, flags.stderr
    inline = {**plain, "images": [data_url("image/png", media["png"])], "audio": [data_url("audio/wav", media["wav"])],
              "videos": [data_url("video/mp4", media["mp4"])]}
    via_json = run_cli(["decide", "--model", str(tiny_dir), "-"], stdin=json.dumps(inline))
    assert via_json.returncode == 0, via_json.stderr
    assert json.loads(flags.stdout) == json.loads(via_json.stdout)
    bad = run_cli(["decide", "--model", str(tiny_dir), "--image", str(tmp_path / "fan.mp4"), str(tmp_path / "req.json")])
    assert bad.returncode == 2 and "images[0]" in bad.stderr and "Traceback" not in bad.stderr


def test_short_clips_are_heard_down_to_one_feature_frame(tiny_engine):
    def clip(samples: int) -> dict:
        return {"content_type": "audio/wav", "base64": base64.b64encode(wav_bytes(samples / 16000, 16000, 1)).decode()}

    shortest = decide(tiny_engine, audio=[clip(160)])            # 10 ms: one frame of features, one audio token
    assert shortest["x_usage"]["audio"] == 1
    beside = decide(tiny_engine, audio=[clip(100), clip(16000)])  # 6.25 ms beside 1 s: padded, heard
    assert beside["x_usage"]["audio"] == 1 + 13
    with pytest.raises(CorruptMedia) as info:
        decide(tiny_engine, audio=[clip(159)])                  # 159 samples alone: not one frame
    assert info.value.label == "audio[0]"
    assert "9.9 ms of audio (159 samples at 16 kHz) is too short to hear alone" in str(info.value)
    assert "the minimum is 10.0 ms (160 samples at 16 kHz" in str(info.value)
