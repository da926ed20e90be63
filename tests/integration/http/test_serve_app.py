"""The app in-process around the real tiny engine: HTTP answers equal in-process `engine.decide` answers, for
every request form (Clef JSON media, TypeSafe assets, llama.cpp files, multipart), and metrics see real stages."""
from __future__ import annotations

import base64
import json

import pytest
from fastapi.testclient import TestClient

from api.http.app import create_app
from api.http.settings import Settings
from fixtures.media import image_bytes, video_bytes, wav_bytes
from omni.contract.request import parse_request
from omni.contract.types import Part
from omni.serve.engine import DecisionEngine
from tests.unit.http.serving import wait_ready

QUESTIONS = {"visible": {"type": "noul", "instructions": "Is the label visible?"},
             "team": {"type": "choice", "instructions": "Who fixes it?", "criteria": {"hvac": None, "electric": "E"}}}


@pytest.fixture(scope="module")
def served(tiny_dir):
    settings = Settings().with_values({"model": str(tiny_dir), "max_batch_records": 4})
    engine = DecisionEngine(settings.engine)
    with TestClient(create_app(settings, engine)) as client:
        wait_ready(client, seconds=120)
        yield client, engine


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def in_process(engine, body: dict, extra=()) -> dict:
    return engine.decide(parse_request(body, engine.config, extra)).to_wire()


def test_text_request_equals_in_process_decide(served):
    client, engine = served
    body = {"model": "jev-latest", "state": {"ticket": "Fan rattles"}, "questions": QUESTIONS}
    r = client.post("/v1/systemone", json=body)
    assert r.status_code == 200, r.text
    assert r.json() == in_process(engine, body)


def test_clef_json_media_equals_in_process_decide(served):
    client, engine = served
    png, wav = image_bytes("PNG"), wav_bytes(1.0)
    body = {"state": "Check the unit.", "questions": QUESTIONS, "images": [data_url("image/png", png)],
            "audio": [{"content_type": "audio/wav", "base64": base64.b64encode(wav).decode()}]}
    r = client.post("/v1/systemone", json=body)
    assert r.status_code == 200, r.text
    assert r.json() == in_process(engine, body)


def test_multipart_and_assets_equal_the_clef_json_form(served):
    client, engine = served
    png, mp4 = image_bytes("PNG"), video_bytes()
    clef = {"state": "Receipt: [image 1]", "questions": QUESTIONS, "images": [data_url("image/png", png)],
            "videos": [data_url("video/mp4", mp4)]}
    expected = in_process(engine, clef)
    assets = {"state": "Receipt: <image:ab12>", "questions": QUESTIONS,
              "assets": {"<image:ab12>": {"type": "image", "part": "asset-0"}}}
    r = client.post("/v1/systemone", files=[("request", ("request", json.dumps(assets), "application/json")),
                                            ("asset-0", ("asset-0", png, "image/png")),
                                            ("videos", ("fan.mp4", mp4, "video/mp4"))])
    assert r.status_code == 200, r.text
    assert r.json() == expected


def test_llama_cpp_files_equal_the_clef_json_form(served):
    client, engine = served
    png = image_bytes("JPEG")
    expected = in_process(engine, {"state": "s", "questions": QUESTIONS, "images": [data_url("image/jpeg", png)]})
    r = client.post("/v1/systemone", json={"state": "s", "questions": QUESTIONS, "files": [data_url("image/jpeg", png)]})
    assert r.status_code == 200, r.text
    assert r.json() == expected


def test_corrupt_real_media_is_a_4xx_naming_the_item(served):
    client, _ = served
    truncated = image_bytes("PNG")[:40]
    r = client.post("/v1/systemone", files=[("request", ("r", json.dumps({"state": "s", "questions": QUESTIONS}),
                                                         "application/json")),
                                            ("images", ("cut.png", truncated, "image/png"))])
    assert 400 <= r.status_code < 500, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "images", 0]


def test_metrics_see_real_stages(served):
    client, _ = served
    client.post("/v1/systemone", json={"state": "s", "questions": QUESTIONS})
    text = client.get("/metrics").text
    for stage in ("parse", "decode", "queue", "forward"):
        count = [line for line in text.splitlines()
                 if line.startswith(f'omni_stage_duration_seconds_count{{stage="{stage}"}}')]
        assert count and float(count[0].split()[-1]) >= 1, stage
    assert "omni_batches_total" in text


def test_slot_parts_continue_after_json_items(served):
    """A part named after a slot (a multipart file, `omni decide --image`) continues the slot's index."""
    _, engine = served
    body = {"state": "s", "questions": QUESTIONS, "images": [data_url("image/png", image_bytes("PNG"))]}
    parts = [Part("images", image_bytes("PNG"), origin="--image b.png")]
    media = parse_request(body, engine.config, parts).media
    assert [(m.label, m.origin) for m in media] == [("images[0]", None), ("images[1]", "--image b.png")]


def test_a_repeat_shows_its_cache_hits_in_server_timing_and_metrics(served):
    client, _ = served
    png = image_bytes("PNG", "RGB", 80, 60)
    first = {"state": "Bench 3.", "questions": QUESTIONS, "images": [data_url("image/png", png)]}
    again = {**first, "questions": {"other": {"type": "noul", "instructions": "Anything else?"}}}
    cold, warm = client.post("/v1/systemone", json=first), client.post("/v1/systemone", json=again)
    assert cold.status_code == warm.status_code == 200
    assert 'media-cache;desc="miss"' in cold.headers["server-timing"]
    assert 'prefix-cache;desc="miss"' in cold.headers["server-timing"]
    assert 'media-cache;desc="hit"' in warm.headers["server-timing"]
    assert 'prefix-cache;desc="hit"' in warm.headers["server-timing"]
    text = client.get("/metrics").text
    for cache in ("media", "prefix"):
        hits = [line for line in text.splitlines() if line.startswith(f'omni_cache_hits_total{{cache="{cache}"}}')]
        assert hits and float(hits[0].split()[-1]) >= 1, cache
        assert f'omni_cache_budget_bytes{{cache="{cache}"}}' in text and f'omni_cache_bytes{{cache="{cache}"}}' in text
    assert "omni_long_prefills_in_flight 0.0" in text and "omni_long_prefills_refused_total 0.0" in text


def test_x_isolation_is_checked_and_isolated_answers_are_per_question(served):
    client, engine = served
    bad = client.post("/v1/systemone", json={"state": "s", "questions": QUESTIONS, "x_isolation": "solo"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "x_isolation"]
    isolated = client.post("/v1/systemone", json={"state": "s", "questions": QUESTIONS, "x_isolation": "isolated"})
    assert isolated.status_code == 200, isolated.text
    alone = in_process(engine, {"state": "s", "questions": {"team": QUESTIONS["team"]}})
    assert isolated.json()["answers"]["team"] == alone["answers"]["team"]
