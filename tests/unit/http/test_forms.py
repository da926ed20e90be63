"""Every request form real clients send reaches the engine as the same DecisionRequest (through the app).

JSON Clef media (data URLs and {content_type, base64}), TypeSafe assets (JSON and multipart), llama.cpp `files`,
curl-style multipart fields, zstd / gzip bodies, unknown fields, model aliases.
"""
from __future__ import annotations

import base64
import gzip
import json

import pytest
import zstandard

from tests.unit.fake_model import media
from tests.unit.http.serving import BASIC_QUESTIONS, body, served

PNG, WAV, MP4 = media("image"), media("audio"), media("video")


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def only_request(engine):
    assert len(engine.model.seen) == 1
    return engine.model.seen[0]


def test_json_clef_media_in_both_item_forms():
    with served() as (client, engine):
        r = client.post("/v1/systemone", json=body(
            images=[data_url("image/png", PNG)], audio=[{"content_type": "audio/wav", "base64": b64(WAV)}],
            videos=[data_url("video/mp4", MP4)]))
    assert r.status_code == 200, r.text
    assert set(r.json()["answers"]) == set(BASIC_QUESTIONS)
    req = only_request(engine)
    assert [(m.kind, m.label, m.data) for m in req.media] == [
        ("image", "images[0]", PNG), ("audio", "audio[0]", WAV), ("video", "videos[0]", MP4)]
    assert r.json()["x_usage"] == {"text": 25, "image": 64, "audio": 32, "video": 128}


def test_typesafe_json_assets_land_in_images_and_placeholders_become_ordinal_references():
    ph = "<image:9f1c0e6a0b1c4d2e8f00112233445566>"
    req_body = body(state={"receipt": f"see {ph}", "keys are not scanned": {ph: "x"}},
                    images=[data_url("image/png", PNG)],
                    assets={ph: {"type": "image", "format": "png", "data_base64": b64(PNG + b"asset")}})
    req_body["questions"] = {"paid": {"type": "noul", "instructions": f"Does {ph} show PAID?"},
                             "which": {"type": "choice", "criteria": {"a": [f"left of {ph}"], "b": None}}}
    with served() as (client, engine):
        r = client.post("/v1/systemone", json=req_body)
    assert r.status_code == 200, r.text
    req = only_request(engine)
    assert [(m.label, m.data) for m in req.media] == [("images[0]", PNG), ("images[1]", PNG + b"asset")]
    assert req.state == {"receipt": "see [image 2]", "keys are not scanned": {ph: "x"}}
    q = {q.id: q for q in req.questions}
    assert q["paid"].instructions == "Does [image 2] show PAID?"
    assert q["which"].options[0].description == ["left of [image 2]"]


def test_llama_cpp_files_are_routed_to_their_slot_by_mime_type():
    with served() as (client, engine):
        r = client.post("/v1/systemone", json=body(files=[data_url("image/jpeg", PNG), data_url("audio/wav", WAV)]))
    assert r.status_code == 200, r.text
    assert [(m.kind, m.label) for m in only_request(engine).media] == [("image", "images[0]"), ("audio", "audio[0]")]


def test_curl_style_multipart_with_repeatable_plain_file_fields_in_order():
    files = [("request", ("req.json", json.dumps(body(images=[data_url("image/png", PNG)])), "application/json")),
             ("images", ("unit.png", PNG + b"1", "image/png")),
             ("audio", ("run.wav", WAV, "audio/wav")),
             ("images", ("second.png", PNG + b"2", "application/octet-stream")),
             ("videos", ("fan.mp4", MP4, "video/mp4"))]
    with served() as (client, engine):
        r = client.post("/v1/systemone", files=files)
    assert r.status_code == 200, r.text
    got = [(m.kind, m.label, m.data, m.declared_type) for m in only_request(engine).media]
    assert got == [("image", "images[0]", PNG, "image/png"), ("image", "images[1]", PNG + b"1", "image/png"),
                   ("image", "images[2]", PNG + b"2", None), ("audio", "audio[0]", WAV, "audio/wav"),
                   ("video", "videos[0]", MP4, "video/mp4")]


def test_multipart_request_part_may_be_a_plain_form_field():
    with served() as (client, engine):
        r = client.post("/v1/systemone", data={"request": json.dumps(body())},
                        files=[("images", ("a.png", PNG, "image/png"))])
    assert r.status_code == 200, r.text
    assert [m.label for m in only_request(engine).media] == ["images[0]"]


def test_typesafe_multipart_assets_name_their_parts():
    request = body(state="Receipt: ph-1 and ph-2",
                   assets={"ph-1": {"type": "image", "part": "asset-0"},
                           "ph-2": {"type": "image", "format": "jpg", "data_base64": b64(PNG + b"inline")}})
    files = [("request", ("request", json.dumps(request), "application/json")),
             ("asset-0", ("asset-0", PNG + b"part", "image/png"))]
    with served() as (client, engine):
        r = client.post("/v1/systemone", files=files)
    assert r.status_code == 200, r.text
    req = only_request(engine)
    # the JSON asset sits in the Clef slot first; the part continues the index after it
    assert [(m.label, m.data) for m in req.media] == [("images[0]", PNG + b"inline"), ("images[1]", PNG + b"part")]
    assert req.state == "Receipt: [image 2] and [image 1]"


@pytest.mark.parametrize("encoding", ["zstd", "gzip"])
def test_compressed_json_bodies(encoding):
    raw = json.dumps(body(images=[data_url("image/png", PNG)], padding="x" * 5000)).encode()
    packed = zstandard.ZstdCompressor().compress(raw) if encoding == "zstd" else gzip.compress(raw)
    with served() as (client, engine):
        r = client.post("/v1/systemone", content=packed,
                        headers={"Content-Type": "application/json", "Content-Encoding": encoding})
    assert r.status_code == 200, r.text
    assert only_request(engine).media[0].data == PNG


def test_compressed_multipart_body():
    import httpx

    files = [("request", ("req.json", json.dumps(body()), "application/json")), ("audio", ("a.wav", WAV, "audio/wav"))]
    req = httpx.Request("POST", "http://x/v1/systemone", files=files)
    raw = req.read()
    with served() as (client, engine):
        r = client.post("/v1/systemone", content=zstandard.ZstdCompressor().compress(raw),
                        headers={"Content-Type": req.headers["content-type"], "Content-Encoding": "zstd"})
    assert r.status_code == 200, r.text
    assert [m.label for m in only_request(engine).media] == ["audio[0]"]


def test_unknown_top_level_fields_are_ignored_and_any_authorization_is_accepted_with_auth_off():
    with served() as (client, _):
        r = client.post("/v1/systemone", json=body(provider={"order": ["x"]}, temperature=0.3, metadata={"a": 1}),
                        headers={"Authorization": "Bearer whatever", "X-TypeSafe-SDK": "python/0.7.5"})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("model", [None, "jev-latest", "clef-omni", "  clef-omni ", "my-served"])
def test_accepted_model_names(model):
    b = body()
    if model is None:
        del b["model"]
    else:
        b["model"] = model
    with served(served_name="my-served") as (client, _):
        r = client.post("/v1/systemone", json=b)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "my-served"


def test_aliases_are_configurable():
    with served(model_aliases=("house-model",)) as (client, _):
        assert client.post("/v1/systemone", json=body(model="house-model")).status_code == 200
        assert client.post("/v1/systemone", json=body(model="jev-latest")).status_code == 400


def test_a_json_body_sent_as_curl_default_form_type_is_read_as_json():
    with served() as (client, _):
        r = client.post("/v1/systemone", content=json.dumps(body()),
                        headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("encoding", ["zstd", "gzip"])
def test_decompression_never_allocates_past_the_cap(encoding):
    import tracemalloc

    from api.http.errors import BodyTooLarge
    from api.http.transport import decompress

    raw = b"a" * (64 * 1024 * 1024)
    bomb = zstandard.ZstdCompressor().compress(raw) if encoding == "zstd" else gzip.compress(raw)
    del raw
    tracemalloc.start()
    try:
        with pytest.raises(BodyTooLarge):
            decompress(bomb, encoding, cap_bytes=1024 * 1024)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024  # a 64 MiB inflation was never materialised
    assert decompress(gzip.compress(b"x" * 1000), "gzip", 1000) == b"x" * 1000  # exactly at the cap is fine
