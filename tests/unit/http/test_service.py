"""The service around the decision route: /v1/models, probes, metrics, request ids, Server-Timing, OpenAPI,
concurrency with corrupt uploads, micro-batching through HTTP, lifecycle (load failure, drain on shutdown)."""
from __future__ import annotations

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor

from omni.contract.errors import CheckpointError
from omni.serve.engine import DecisionEngine
from tests.unit.fake_model import FakeModel, media
from tests.unit.http.serving import body, served, settings_with, wait_until

WAIT = 30


def test_models_lists_the_served_model_with_every_spec_field_context_limits_and_aliases():
    with served(served_name="clef-omni-local", max_context_tokens=32000) as (client, _):
        payload = client.get("/v1/models").json()
    card = payload["models"][0]
    assert {"name", "description", "release_date"} <= set(card)        # System One spec §0 / E8
    assert card["release_date"] == "2026-10-09" and card["description"]
    assert card["name"] == "clef-omni-local" and card["context"] == 32000
    assert card["aliases"] == ["jev-latest", "clef-omni"]
    assert card["limits"]["inputs"]["images"] == 4
    assert card["tiny_default"] is True  # no model path: the tiny default is what is served
    assert [d["id"] for d in payload["data"]] == ["clef-omni-local", "jev-latest", "clef-omni"]


def test_models_is_503_while_the_engine_loads_its_model(monkeypatch):
    from omni.model.clef import ClefModel

    gate = threading.Event()
    monkeypatch.setattr(ClefModel, "from_config", classmethod(lambda cls, config: (gate.wait(30), FakeModel())[1]))
    settings = settings_with()
    with served(engine=DecisionEngine(settings.engine), wait=False) as (client, _engine):
        loading = client.get("/v1/models")
        assert loading.status_code == 503 and loading.json()["detail"]["error_type"] == "not_ready"
        gate.set()
        wait_until(lambda: client.get("/v1/models").status_code == 200, what="the model card")
        assert client.get("/v1/models").json()["models"][0]["release_date"] == "2026-10-09"


def test_ready_follows_the_engine_while_health_is_live_throughout():
    gate = threading.Event()
    with served(model=FakeModel(load_gate=gate), wait=False) as (client, _):
        assert client.get("/health").json() == {"status": "ok"}
        loading = client.get("/ready")
        assert loading.status_code == 503 and loading.json()["status"] == "loading"
        gate.set()
        wait_until(lambda: client.get("/ready").status_code == 200, what="ready")
        assert client.get("/ready").json() == {"status": "ready"}


def test_a_model_that_fails_to_load_fails_ready_and_health_and_calls_back(tmp_path):
    failures = []
    from fastapi.testclient import TestClient

    from api.http.app import create_app

    settings = settings_with(model=str(tmp_path))          # an empty directory: not a checkpoint
    app = create_app(settings, DecisionEngine(settings.engine), on_load_failure=failures.append)
    with TestClient(app) as client:
        wait_until(lambda: failures, what="the load failure callback")
        assert isinstance(failures[0], CheckpointError)
        assert client.get("/ready").json()["status"] == "failed"
        health = client.get("/health")
        assert health.status_code == 503 and "joint_head" in health.json()["message"]


def test_on_loaded_runs_once_after_the_load_and_before_ready():
    from fastapi.testclient import TestClient

    from api.http.app import create_app

    engine, seen = DecisionEngine(model=FakeModel()), []
    app = create_app(settings_with(), engine, on_loaded=lambda: seen.append((engine.loaded, engine.ready)))
    with TestClient(app) as client:
        wait_until(lambda: client.get("/ready").status_code == 200, what="ready")
    assert seen == [(True, False)]


def test_the_server_settles_its_heap_out_of_the_cyclic_gc():
    import gc

    from api.cli.serve import _settle_heap

    try:
        _settle_heap()
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()


def test_every_response_has_a_request_id_and_decisions_have_server_timing():
    with served() as (client, _):
        ok = client.post("/v1/systemone", json=body())
        for r in (ok, client.get("/health"), client.get("/nope"), client.post("/v1/systemone", json={})):
            assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])
            assert r.headers["x-typesafe-request-id"] == r.headers["x-request-id"]
        echoed = client.get("/health", headers={"x-request-id": "abc-123"})
        assert echoed.headers["x-request-id"] == "abc-123"
        hostile = client.get("/health", headers={"x-request-id": "a b\tc" + "x" * 300})
        assert hostile.headers["x-request-id"] != "a b\tc" + "x" * 300
    stages = dict(part.strip().split(";dur=") for part in ok.headers["server-timing"].split(","))
    assert set(stages) >= {"parse", "decode", "queue", "forward", "total"}
    assert all(float(v) >= 0 for v in stages.values())


def test_metrics_count_requests_stages_batches_and_tokens():
    with served() as (client, _):
        client.post("/v1/systemone", files=[("request", ("r", json.dumps(body()), "application/json")),
                                            ("images", ("a.png", media("image"), "image/png"))])
        client.post("/v1/systemone", json=body(model="nope"))
        text = client.get("/metrics").text
    assert 'omni_requests_total{route="/v1/systemone",status="200"} 1.0' in text
    assert 'omni_requests_total{route="/v1/systemone",status="400"} 1.0' in text
    for stage in ("parse", "decode", "queue", "forward"):
        assert f'omni_stage_duration_seconds_count{{stage="{stage}"}} ' in text
    assert 'omni_stage_duration_seconds_count{stage="forward"} 1.0' in text
    assert "omni_batch_size_count 1.0" in text
    assert 'omni_batches_total{size="1"} 1.0' in text and "omni_queue_depth 0.0" in text
    assert 'omni_input_tokens_total{modality="image"} 64.0' in text
    assert 'omni_model_info{name="clef-omni",tiny_default="true"} 1.0' in text


def test_openapi_documents_the_decision_route_json_and_multipart():
    with served() as (client, _):
        spec = client.get("/openapi.json").json()
        assert client.get("/docs").status_code == 200
    content = spec["paths"]["/v1/systemone"]["post"]["requestBody"]["content"]
    assert set(content) == {"application/json", "multipart/form-data"}
    schemas = spec["components"]["schemas"]
    assert {"SystemOneRequest", "MultipartRequest", "NoulQuestion"} <= set(schemas)
    assert {"200", "422", "429", "504"} <= set(spec["paths"]["/v1/systemone"]["post"]["responses"])


def test_32_concurrent_requests_with_2_corrupt_uploads():
    with served(max_batch_records=8, max_wait_ms=5) as (client, _engine):
        def send(i: int):
            upload = media("image", corrupt=i in (7, 19), payload=f"img{i}".encode())
            return client.post("/v1/systemone", files=[
                ("request", ("r", json.dumps(body(f"request {i}")), "application/json")),
                ("images", (f"u{i}.png", upload, "image/png"))])

        with ThreadPoolExecutor(32) as pool:
            results = list(pool.map(send, range(32)))
        statuses = [r.status_code for r in results]
        assert statuses.count(200) == 30
        for i in (7, 19):
            assert results[i].status_code == 422
            assert results[i].json()["detail"][0]["loc"] == ["body", "images", 0]
            assert f"u{i}.png" in results[i].json()["detail"][0]["msg"]
        for i, r in enumerate(results):
            if i not in (7, 19):
                assert set(r.json()["answers"]) == {"ok", "team", "level"}
        assert client.get("/ready").status_code == 200
        assert client.post("/v1/systemone", json=body()).status_code == 200


def test_requests_are_micro_batched_behind_a_busy_model():
    gate = threading.Event()
    with served(model=FakeModel(forward_gate=gate), max_batch_records=4, max_wait_ms=0) as (client, engine):
        with ThreadPoolExecutor(5) as pool:
            futures = [pool.submit(client.post, "/v1/systemone", json=body("b0"))]
            wait_until(lambda: engine.model.forwards_started == 1, what="the first request in the model")
            futures += [pool.submit(client.post, "/v1/systemone", json=body(f"b{i}")) for i in range(1, 5)]
            wait_until(lambda: engine.batcher.stats().queue_depth == 4, what="four requests queued behind it")
            gate.set()
            assert [f.result(WAIT).status_code for f in futures] == [200] * 5
        sizes = engine.batcher.stats().batch_sizes
    assert sizes == {1: 1, 4: 1}  # the first ran alone; the four that waited behind it ran together


def test_failing_batch_fails_only_its_own_requests():
    with served(max_batch_records=1) as (client, _), ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda s: client.post("/v1/systemone", json=body(s)),
                                ["fine", "__boom__", "fine", "fine", "__boom__", "fine"]))
    assert [r.status_code for r in results] == [200, 500, 200, 200, 500, 200]


def test_shutdown_drains_in_flight_requests():
    gate = threading.Event()
    ctx = served(model=FakeModel(forward_gate=gate))
    client, engine = ctx.__enter__()
    pool = ThreadPoolExecutor(1)
    in_flight = pool.submit(client.post, "/v1/systemone", json=body())
    wait_until(lambda: engine.model.seen, what="the request reached the engine")
    threading.Timer(0.2, gate.set).start()
    assert in_flight.result(WAIT).status_code == 200
    ctx.__exit__(None, None, None)
    assert not engine.ready and engine.batcher is None       # stopped, after the request in flight finished
    pool.shutdown()
