"""Short audio end to end on the tiny engine: a 10 ms clip alone is decided on (one audio token), fewer than 160
samples alone are refused with the minimum in the words, an empty clip is corrupt, a short clip beside a longer one
(a clip or a heard soundtrack) is heard; over HTTP the refusal is a 422 naming the field."""
from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import soundfile

from fixtures.media import video_bytes, wav_bytes, wav_header
from omni.contract.request import parse_request
from preprocess.errors import CorruptMedia

QUESTIONS = {"sounds_normal": {"type": "noul", "instructions": "Does it sound normal?"}}
MINIMUM = "the minimum is 10.0 ms (160 samples at 16 kHz, one frame of features); sent with a longer clip it is heard"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def wav_item(data: bytes) -> dict:
    return {"content_type": "audio/wav", "base64": b64(data)}


def clip(samples: int) -> dict:
    return wav_item(wav_bytes(samples / 16000, 16000, 1))


def ten_ms_stereo_float_wav() -> bytes:
    """10 ms at 44.1 kHz, 2 channels, 32-bit float (441 frames of a tone plus noise): 160 samples at 16 kHz."""
    rng = np.random.default_rng(7)
    t = np.arange(441) / 44100
    stereo = np.stack([0.5 * np.sin(2 * np.pi * 440 * t), 0.3 * np.sin(2 * np.pi * 1000 * t)], axis=1)
    buffer = io.BytesIO()
    soundfile.write(buffer, (stereo + 0.05 * rng.standard_normal(stereo.shape)).astype(np.float32), 44100,
                    subtype="FLOAT", format="WAV")
    return buffer.getvalue()


def soundtrack_video(last_frame_seconds: float) -> str:
    """A mov data URL whose 16 kHz PCM soundtrack has round((last_frame_seconds + 0.001) * 16000) samples."""
    data = video_bytes("mov", "libx264", "pcm_s16le", frame_times=[0.0, last_frame_seconds], fps=1000,
                       audio_rate_hz=16000, audio_channels=1)
    return f"data:video/quicktime;base64,{b64(data)}"


def decide(engine, **fields) -> dict:
    body = {"state": "Listen to the fan.", "questions": QUESTIONS, **fields}
    return engine.decide(parse_request(body, engine.config)).to_wire()


def test_the_10_ms_44k_stereo_float_clip_alone_is_decided_on(tiny_engine):
    body = {"state": "Listen to the fan.", "questions": QUESTIONS, "audio": [wav_item(ten_ms_stereo_float_wav())]}
    record = tiny_engine.model.prepare(parse_request(body, tiny_engine.config))
    assert tuple(record.media.tensors["input_features"].shape[-1:]) == (1,)       # one frame of features
    assert record.media.tensors["feature_attention_mask"].tolist() == [[1]]
    out = decide(tiny_engine, audio=body["audio"])
    assert out["x_usage"]["audio"] == 1
    assert out["usage"]["input_tokens"] > decide(tiny_engine)["usage"]["input_tokens"]
    assert set(out["answers"]) == set(QUESTIONS)


@pytest.mark.parametrize("samples", [160, 180, 200, 201])
def test_one_frame_clips_alone_are_one_audio_token(tiny_engine, samples):
    assert decide(tiny_engine, audio=[clip(samples)])["x_usage"]["audio"] == 1


@pytest.mark.parametrize(("samples", "words"), [(159, "9.9 ms of audio (159 samples at 16 kHz)"),
                                                (100, "6.2 ms of audio (100 samples at 16 kHz)")])
def test_under_160_samples_alone_is_refused_with_the_minimum(tiny_engine, samples, words):
    with pytest.raises(CorruptMedia) as info:
        decide(tiny_engine, audio=[clip(samples)])
    assert info.value.label == "audio[0]"
    assert f"{words} is too short to hear alone: {MINIMUM}" in str(info.value)


def test_the_longest_short_clip_is_named(tiny_engine):
    with pytest.raises(CorruptMedia) as info:
        decide(tiny_engine, audio=[clip(100), clip(150)])
    assert info.value.label == "audio[1]" and "150 samples" in str(info.value)


def test_an_empty_clip_is_still_corrupt(tiny_engine):
    with pytest.raises(CorruptMedia) as info:
        decide(tiny_engine, audio=[wav_item(wav_header(16000, 1, 16, 0)), clip(16000)])
    assert info.value.label == "audio[0]" and "no audio samples" in str(info.value)


def test_a_short_clip_beside_a_longer_one_is_heard(tiny_engine):
    assert decide(tiny_engine, audio=[clip(100), clip(16000)])["x_usage"]["audio"] == 1 + 13
    assert decide(tiny_engine, audio=[clip(100), clip(180)])["x_usage"]["audio"] == 1 + 1   # both under 201


def test_a_short_clip_beside_a_heard_soundtrack_is_heard(tiny_engine):
    """The soundtracks of heard videos are in the same feature call, so they make a short clip heard too."""
    out = decide(tiny_engine, audio=[clip(100)], videos=[soundtrack_video(0.009)])   # a 160-sample soundtrack
    assert out["x_usage"]["audio"] == 1 and out["x_usage"]["video_audio"] == 1


def test_a_soundtrack_from_160_samples_is_heard_and_shorter_counts_as_none(tiny_engine):
    heard = decide(tiny_engine, videos=[soundtrack_video(0.009)])                    # 160 samples
    assert heard["x_usage"]["video_audio"] == 1 and heard["x_usage"]["video"] > 0
    silent = decide(tiny_engine, videos=[soundtrack_video(0.0089375)])               # 159 samples
    assert "video_audio" not in silent["x_usage"] and silent["x_usage"]["video"] > 0


@pytest.fixture(scope="module")
def served(tiny_app_client):
    return tiny_app_client


def test_over_http_a_too_short_clip_is_a_422_naming_the_field(served):
    r = served.post("/v1/systemone", json={"state": "s", "questions": QUESTIONS, "audio": [clip(159)]})
    assert r.status_code == 422, r.text
    [issue] = r.json()["detail"]
    assert issue["loc"] == ["body", "audio", 0]
    assert MINIMUM in issue["msg"] and "159 samples" in issue["msg"]
    ok = served.post("/v1/systemone", json={"state": "s", "questions": QUESTIONS,
                                            "audio": [wav_item(ten_ms_stereo_float_wav())]})
    assert ok.status_code == 200, ok.text
    assert ok.json()["x_usage"]["audio"] == 1
