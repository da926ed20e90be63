"""Issue 22, bug 5: a request with several bad media items answers ONE 4xx naming every one of them (before, only the
first, and the second only after the first was removed): 422 for mixed kinds, the kind's own status when they share
one; good items beside them are not reported, each item is decoded once, every item over its byte limit is named, and
the error crosses a process boundary whole. Against the app around the real tiny engine."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import omni.model.media as media_module
from api.http.app import create_app
from api.http.settings import Settings
from fixtures.media import image_bytes
from omni.contract.avrik import AVRIK_CLIENT_AGENT
from omni.contract.config import EngineConfig
from omni.serve.engine import DecisionEngine
from preprocess.errors import CorruptMedia, MediaErrors, MediaTooLarge, UnsupportedMedia
from preprocess.item import MediaItem
from preprocess.loader import load_processor_parts
from preprocess.media import MediaLimits, check_request
from tests.unit.http.serving import wait_ready

FILES = Path(__file__).resolve().parents[3] / "fixtures" / "files"
QUESTIONS = {"visible": {"type": "noul", "instructions": "Is the label visible?"}}
TRUNCATED_PNG = (FILES / "corrupt" / "truncated.png").read_bytes()
TEXT_AS_WAV = b"these are notes about the fan, not a recording\n" * 4


@pytest.fixture(scope="module")
def served(tiny_dir):
    settings = Settings().with_values({"model": str(tiny_dir), "max_batch_records": 4})
    with TestClient(create_app(settings, DecisionEngine(settings.engine))) as client:
        wait_ready(client, seconds=120)
        yield client


def post(client: TestClient, *files: tuple[str, str, bytes, str], headers: dict[str, str] | None = None):
    request = ("request", ("request", json.dumps({"state": "Check the unit.", "questions": QUESTIONS}),
                           "application/json"))
    return client.post("/v1/systemone", headers=headers,
                       files=[request, *((slot, (name, data, mime)) for slot, name, data, mime in files)])


def test_two_broken_files_are_both_named_in_one_422(served):
    r = post(served, ("images", "unit.png", image_bytes("PNG"), "image/png"),
             ("images", "cut.png", TRUNCATED_PNG, "image/png"),
             ("audio", "notes.wav", TEXT_AS_WAV, "audio/wav"))
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert [issue["loc"] for issue in detail] == [["body", "images", 1], ["body", "audio", 0]]
    assert [issue["type"] for issue in detail] == ["corrupt_media", "unsupported_media"]
    for issue in detail:                                    # a clear message each, never a library's words
        assert issue["msg"] and "Traceback" not in issue["msg"] and "Error(" not in issue["msg"]
    assert r.headers["x-request-id"] == r.json()["request_id"]


def test_one_broken_file_keeps_its_own_status_and_several_of_one_kind_share_it(served):
    r = post(served, ("audio", "notes.wav", TEXT_AS_WAV, "audio/wav"))
    assert r.status_code == 415, r.text
    assert [issue["loc"] for issue in r.json()["detail"]] == [["body", "audio", 0]]
    r = post(served, ("audio", "notes.wav", TEXT_AS_WAV, "audio/wav"), ("audio", "more.wav", TEXT_AS_WAV, "audio/wav"))
    assert r.status_code == 415, r.text
    assert [(issue["loc"], issue["type"]) for issue in r.json()["detail"]] == [
        (["body", "audio", 0], "unsupported_media"), (["body", "audio", 1], "unsupported_media")]


def test_every_envelope_lists_every_bad_item(served):
    files = (("images", "cut.png", TRUNCATED_PNG, "image/png"), ("audio", "notes.wav", TEXT_AS_WAV, "audio/wav"))
    avrik = post(served, *files, headers={"User-Agent": AVRIK_CLIENT_AGENT + "/1.0"})
    assert avrik.status_code == 422, avrik.text
    assert len(avrik.json()["detail"]) == 2                  # avrik's object: the first place and how many more
    assert avrik.json()["error"]["field"] == "images.0" and "1 more" in avrik.json()["error"]["message"]


def test_good_requests_decode_each_item_once(tiny_dir, monkeypatch):
    model = DecisionEngine(EngineConfig(model_path=str(tiny_dir), media_cache_mb=0)).load().model
    assert model is not None
    calls: list[str] = []
    real = media_module.decode_item
    monkeypatch.setattr(media_module, "decode_item", lambda item, *a, **k: calls.append(item.label) or real(item, *a, **k))
    items = [MediaItem("images", 0, image_bytes("PNG")), MediaItem("images", 1, image_bytes("JPEG"))]
    model.encode_media(tuple(items))
    assert calls == ["images[0]", "images[1]"]
    calls.clear()
    with pytest.raises(MediaErrors) as info:                 # every item is tried, each once
        model.encode_media((MediaItem("images", 0, TRUNCATED_PNG), items[1], MediaItem("audio", 0, TEXT_AS_WAV)))
    assert calls == ["images[0]", "images[1]", "audio[0]"]
    assert [type(e) for e in info.value.errors] == [CorruptMedia, UnsupportedMedia]


def test_the_media_encoder_and_pickling_keep_every_error(tiny_dir):
    encoder = media_module.MediaEncoder(load_processor_parts(tiny_dir), MediaLimits())    # what the server decodes with
    with pytest.raises(MediaErrors) as info:
        encoder.encode([MediaItem("images", 0, TRUNCATED_PNG), MediaItem("images", 1, image_bytes("PNG")),
                        MediaItem("audio", 0, TEXT_AS_WAV)])
    error = info.value
    assert [e.label for e in error.errors] == ["images[0]", "audio[0]"]
    assert "images[0]" in str(error) and "audio[0]" in str(error)
    copy = pickle.loads(pickle.dumps(error))                # a cluster replica sends it back to the edge
    assert [(type(e), e.label, e.message) for e in copy.errors] == [(type(e), e.label, e.message) for e in error.errors]
    assert all(e.item.data == b"" for e in copy.errors)     # without the bytes
    with pytest.raises(CorruptMedia):                        # one bad item: its own error, as before
        encoder.encode([MediaItem("images", 0, TRUNCATED_PNG)])


def test_every_item_over_its_byte_limit_is_named_before_anything_is_decoded():
    limits = MediaLimits(max_image_bytes=100, max_audio_bytes=100)
    items = [MediaItem("images", 0, bytes(101)), MediaItem("images", 1, bytes(10)), MediaItem("audio", 0, bytes(200))]
    with pytest.raises(MediaErrors) as info:
        check_request(items, limits)
    assert [(type(e), e.label) for e in info.value.errors] == [(MediaTooLarge, "images[0]"), (MediaTooLarge, "audio[0]")]
    assert "max_image_bytes=100" in str(info.value) and "max_audio_bytes=100" in str(info.value)
    with pytest.raises(MediaTooLarge) as one:                # one: its own error, as before
        check_request(items[:2], limits)
    assert one.value.label == "images[0]"
