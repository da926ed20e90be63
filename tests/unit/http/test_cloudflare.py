"""Cloudflare's route (`/accounts/{id}/ai/run/@cf/cloudflare/{model}`): the /v1/systemone decision in Cloudflare's
envelope, with the same auth, limits, batching and metrics, its error envelope, and the route's model rule."""
from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.unit.fake_model import FakeModel, media
from tests.unit.http.serving import body, served, wait_until

CF = "/accounts/0123abcd/ai/run/@cf/cloudflare/clef-omni"
WAIT = 30


def cf_body(state="Fan rattles.", **extra) -> dict:
    """The System One test body as a Workers AI client sends it to the clef-omni route."""
    return {**body(state, **extra), "model": "clef-omni"}


def cf_error(r, status: int, code: int) -> list[str]:
    assert r.status_code == status, r.text
    payload = r.json()
    assert payload["success"] is False and payload["result"] is None and payload["messages"] == []
    assert payload["errors"] and all(e["code"] == code for e in payload["errors"])
    assert r.headers["x-request-id"]
    return [e["message"] for e in payload["errors"]]


def test_the_answer_is_the_systemone_answer_in_cloudflares_envelope():
    with served() as (client, _):
        plain = client.post("/v1/systemone", json=body())
        wrapped = client.post(CF, json=cf_body())
    assert wrapped.status_code == 200, wrapped.text
    assert wrapped.json() == {"result": plain.json(), "success": True, "errors": [], "messages": []}
    stages = dict(part.strip().split(";dur=") for part in wrapped.headers["server-timing"].split(","))
    assert {"parse", "queue", "forward", "total"} <= set(stages)


@pytest.mark.parametrize(("path_model", "body_model"), [("clef-omni", {}), ("clef-omni", {"model": "  clef-omni "}),
                                                        ("clef", {"model": "clef"}), ("clef", {"model": None})])
def test_a_body_model_that_agrees_with_the_route_or_none_is_accepted(path_model, body_model):
    b = {**{k: v for k, v in body().items() if k != "model"}, **body_model}
    with served(served_name="house-model") as (client, _):
        r = client.post(f"/accounts/x/ai/run/@cf/cloudflare/{path_model}", json=b)
    assert r.status_code == 200, r.text
    assert r.json()["result"]["model"] == "house-model"


@pytest.mark.parametrize("body_model", ["jev-latest", "clef", 7])
def test_a_body_model_that_contradicts_the_route_is_refused(body_model):
    with served() as (client, engine):
        messages = cf_error(client.post(CF, json={**body(), "model": body_model}), 422, 5012)
        assert messages[0].startswith("model: ") and "@cf/cloudflare/clef-omni" in messages[0]
        assert engine.model.seen == []


def test_a_model_this_server_does_not_run_has_no_route():
    with served() as (client, _):
        messages = cf_error(client.post("/accounts/x/ai/run/@cf/cloudflare/clef-flash", json=cf_body()), 400, 7000)
    assert "clef-flash" in messages[0]


def test_validation_media_and_size_errors_use_the_envelope_with_cloudflare_codes():
    with served(max_body_bytes=64 * 1024, media_max_image_bytes=100) as (client, _):
        invalid = cf_error(client.post(CF, json={"state": 1, "questions": {"q": {"type": "rank"}}}), 422, 5012)
        assert any(m.startswith("state: ") for m in invalid) and any(m.startswith("questions.q: ") for m in invalid)
        corrupt = client.post(CF, files=[("request", ("r", json.dumps(cf_body()), "application/json")),
                                         ("videos", ("fan.mp4", media("video", corrupt=True), "video/mp4"))])
        assert cf_error(corrupt, 422, 5012)[0].startswith("videos.0: ") and "fan.mp4" in corrupt.text
        big_image = client.post(CF, files=[("request", ("r", json.dumps(cf_body()), "application/json")),
                                           ("images", ("big.png", media("image", b"x" * 500), "image/png"))])
        assert "max_image_bytes=100" in cf_error(big_image, 413, 5021)[0]
        too_big = client.post(CF, content=json.dumps(cf_body(padding="x" * 70_000)),
                              headers={"Content-Type": "application/json"})
        cf_error(too_big, 413, 5021)
        not_json = client.post(CF, content=b"<xml/>", headers={"Content-Type": "application/xml"})
        cf_error(not_json, 415, 6003)


def test_the_same_api_keys_guard_the_route():
    with served(api_keys=("k-1",)) as (client, _):
        cf_error(client.post(CF, json=cf_body()), 401, 10000)
        cf_error(client.post(CF, json=cf_body(), headers={"Authorization": "Bearer nope"}), 401, 10000)
        assert client.post(CF, json=cf_body(), headers={"Authorization": "Bearer k-1"}).status_code == 200


def test_not_ready_overload_and_bugs_keep_their_status_and_headers():
    gate = threading.Event()
    with served(model=FakeModel(load_gate=gate), wait=False) as (client, _):
        r = client.post(CF, json=cf_body())
        cf_error(r, 503, 3040)
        assert r.headers["retry-after"] == "5"
        gate.set()
    hold = threading.Event()
    with served(model=FakeModel(forward_gate=hold), max_queue=1, max_batch_records=1) as (client, engine), \
            ThreadPoolExecutor(1) as pool:
        held = pool.submit(client.post, CF, json=cf_body())
        wait_until(lambda: engine.model.forwards_started == 1, what="the first request in the model")
        full = client.post(CF, json=cf_body())
        cf_error(full, 429, 3040)
        assert full.headers["retry-after"] == "1"
        hold.set()
        assert held.result(WAIT).status_code == 200
    with served() as (client, _):
        r = client.post(CF, json=cf_body("__bug__"), headers={"x-request-id": "trace-7"})
        message = cf_error(r, 500, 5012)[0]
    assert "trace-7" in message and "secret" not in r.text and "/srv" not in r.text


def test_requests_of_both_routes_share_batches_and_metrics():
    gate = threading.Event()
    with served(model=FakeModel(forward_gate=gate), max_batch_records=4, max_wait_ms=0) as (client, engine), \
            ThreadPoolExecutor(3) as pool:
        first = pool.submit(client.post, "/v1/systemone", json=body("first"))
        wait_until(lambda: engine.model.forwards_started == 1, what="the first request in the model")
        both = [pool.submit(client.post, "/v1/systemone", json=body("plain")), pool.submit(client.post, CF, json=cf_body())]
        wait_until(lambda: engine.batcher.stats().queue_depth == 2, what="one request of each route queued")
        gate.set()
        assert [f.result(WAIT).status_code for f in [first, *both]] == [200, 200, 200]
        assert engine.batcher.stats().batch_sizes == {1: 1, 2: 1}          # the two routes ran in one batch
        text = client.get("/metrics").text
    route = "/accounts/{account_id}/ai/run/@cf/cloudflare/{model_name}"
    assert f'omni_requests_total{{route="{route}",status="200"}} 1.0' in text
    assert 'omni_stage_duration_seconds_count{stage="forward"} 3.0' in text


def test_openapi_documents_the_route_with_both_body_forms():
    with served() as (client, _):
        spec = client.get("/openapi.json").json()
    post = spec["paths"]["/accounts/{account_id}/ai/run/@cf/cloudflare/{model_name}"]["post"]
    assert set(post["requestBody"]["content"]) == {"application/json", "multipart/form-data"}
    assert {"200", "401", "422", "429"} <= set(post["responses"])
