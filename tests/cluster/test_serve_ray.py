"""`omni serve --ray` on a local Ray instance: two CPU engine replicas of the tiny checkpoint behind the gateway.

The same inspection request gets the same answers, headers and errors as `omni serve` (the app in-process around a
local engine); auth and the limits (counts, body cap, gzip bomb, media bytes, Content-Type) answer the same; a
burst with corrupt uploads mixed in loses nothing and gets no 5xx; requests with the same media or the same state
go to the same replica (their caches hit); scale-down drains; killing a replica mid-burst leaves every request with
an answer or a 503, never a hang; a replica that cannot load its model is reported, not retried forever. Tests run
in file order: the replica kill is last.
"""
from __future__ import annotations

import asyncio
import base64
import gzip
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from api.http.app import create_app
from api.http.settings import Settings
from fixtures.media import image_bytes
from tests.cluster.conftest import QUESTIONS, inspection_files, metric_values, run_async
from tests.unit.http.serving import wait_ready

KEY = "cluster-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def photo(i: int) -> bytes:
    return image_bytes("PNG", width=64 + i, height=48)


def settings_for(tiny_dir, port: int, **more) -> Settings:
    return Settings().with_values({"model": str(tiny_dir), "port": port, "api_keys": (KEY,), "replicas": 2,
                                   "torch_threads": 1, "max_batch_records": 4, "replica_load_retries": 1, **more})


POLICY = 'version = "ray-1"\n[default]\nauto_at = 0.9\n[questions.visible]\nauto_at = 0.5\nact_on = [false]\n'


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("policy") / "policy.toml"
    path.write_text(POLICY, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def cluster(ray_instance, tiny_dir, policy_file):
    from api.cluster.launch import deploy

    settings = settings_for(tiny_dir, ray_instance, policy=str(policy_file))
    deploy(settings)
    with httpx.Client(base_url=f"http://127.0.0.1:{ray_instance}", headers=AUTH, timeout=120) as client:
        deadline = time.monotonic() + 120
        while client.get("/ready").status_code != 200:
            assert time.monotonic() < deadline, "the gateway never became ready"
            time.sleep(0.5)
        yield client, settings


@pytest.fixture(scope="module")
def local(tiny_dir, policy_file):
    """`omni serve`'s app in-process around a local engine on the same checkpoint: the reference."""
    settings = Settings().with_values({"model": str(tiny_dir), "api_keys": (KEY,), "max_batch_records": 4,
                                       "policy": str(policy_file)})
    with TestClient(create_app(settings), headers=AUTH) as client:
        wait_ready(client, seconds=120)
        yield client


def without_ids(body: dict) -> dict:
    return {k: v for k, v in body.items() if k != "request_id"}


def test_the_inspection_request_gets_the_answers_headers_and_errors_of_omni_serve(cluster, local):
    client, _ = cluster
    ours, theirs = client.post("/v1/systemone", files=inspection_files()), local.post("/v1/systemone",
                                                                                       files=inspection_files())
    assert ours.status_code == theirs.status_code == 200, ours.text
    assert ours.json() == theirs.json()
    assert ours.json()["usage"]["input_tokens"] == 991
    assert ours.json()["x_outcome"]["policy"]["version"] == "ray-1"          # the gateway applies the policy
    timing = ours.headers["server-timing"]
    for stage in ("parse;dur=", "decode;dur=", "forward;dur=", "total;dur=", 'media-cache;desc="', 'prefix-cache;desc="'):
        assert stage in timing
    assert ours.headers.get_list("x-request-id") == [ours.headers["x-typesafe-request-id"]]   # once, and the same
    given = client.post("/v1/systemone", json={"state": "x", "questions": QUESTIONS}, headers={"x-request-id": "abc-1"})
    assert given.headers.get_list("x-request-id") == ["abc-1"]
    # errors: validation, corrupt media, unknown model, bad JSON — same status, same body, same headers
    bad = [{"json": {"state": "x", "questions": {}}},
           {"json": {"state": "x", "questions": QUESTIONS, "images": [data_url("image/png", b"\x89PNG\r\n\x1a\n broken")]}},
           {"json": {"model": "gpt-9", "state": "x", "questions": QUESTIONS}},
           {"content": b"{not json", "headers": {"content-type": "application/json"}}]
    for kwargs in bad:
        ours, theirs = client.post("/v1/systemone", **kwargs), local.post("/v1/systemone", **kwargs)
        assert ours.status_code == theirs.status_code and 400 <= ours.status_code < 500, ours.text
        assert without_ids(ours.json()) == without_ids(theirs.json())
        assert ours.json()["request_id"] == ours.headers["x-request-id"]
    ours, theirs = client.get("/v1/models").json(), local.get("/v1/models").json()
    assert ours == theirs
    cloudflare = client.post("/accounts/any/ai/run/@cf/cloudflare/clef-omni", files=inspection_files())
    assert cloudflare.status_code == 200 and cloudflare.json()["result"] == local.post(
        "/v1/systemone", files=inspection_files()).json()


def test_the_policy_reloads_through_the_gateways_admin_route(cluster, policy_file):
    client, _ = cluster
    policy_file.write_text(POLICY.replace("ray-1", "ray-2"), encoding="utf-8")
    try:
        assert client.post("/v1/admin/policy/reload").json()["version"] == "ray-2"
        answer = client.post("/v1/systemone", json={"state": "x", "questions": QUESTIONS}).json()
        assert answer["x_outcome"]["policy"]["version"] == "ray-2"
    finally:
        policy_file.write_text(POLICY, encoding="utf-8")
        assert client.post("/v1/admin/policy/reload").json()["version"] == "ray-1"


def test_the_same_auth_rules(cluster):
    client, _ = cluster
    base = str(client.base_url)
    with httpx.Client(base_url=base, timeout=30) as anonymous:
        for path in ("/v1/models", "/metrics", "/docs", "/openapi.json"):
            r = anonymous.get(path)
            assert r.status_code == 401 and r.json()["detail"]["error_type"] == "authentication_error", path
        r = anonymous.post("/v1/systemone", json={"state": "x", "questions": QUESTIONS})
        assert r.status_code == 401
        wrong = anonymous.get("/v1/models", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert anonymous.get("/health").json() == {"status": "ok"}
        assert anonymous.get("/ready").json() == {"status": "ready"}
        assert anonymous.get("/ui").status_code == 200           # the page's own files carry no data


def test_the_same_limits_through_rays_proxy(cluster, local):
    """Every limit answers as in `omni serve` — same status, same body — with Ray's proxy in between: counts,
    a body over the cap, a gzip body that inflates over it, one photo over its byte limit, a Content-Type."""
    client, settings = cluster
    cap = settings.body_cap_bytes
    media = settings.engine.media
    big_photo = b"\x89PNG\r\n\x1a\n" + bytes(media.max_image_bytes)          # over the per-photo limit
    bomb = gzip.compress(b'{"state": "' + b" " * (cap + 1) + b'"}', compresslevel=1)
    cases = {
        "too many photos": {"json": {"state": "x", "questions": QUESTIONS,
                                     "images": [data_url("image/png", photo(i)) for i in range(media.max_images + 1)]}},
        "too many questions": {"json": {"state": "x", "questions": {
            f"q{i}": QUESTIONS["visible"] for i in range(settings.engine.max_questions + 1)}}},
        "body over the cap": {"content": b'{"state": "' + b"x" * cap + b'"}',
                              "headers": {"content-type": "application/json"}},
        "gzip over the cap": {"content": bomb, "headers": {"content-type": "application/json",
                                                           "content-encoding": "gzip"}},
        "photo over its limit": {"json": {"state": "x", "questions": QUESTIONS,
                                          "images": [data_url("image/png", big_photo)]}},
        "content type": {"content": b"<state>x</state>", "headers": {"content-type": "application/xml"}},
    }
    statuses = {}
    for name, kwargs in cases.items():
        ours, theirs = client.post("/v1/systemone", **kwargs), local.post("/v1/systemone", **kwargs)
        assert ours.status_code == theirs.status_code and 400 <= ours.status_code < 500, (name, ours.text[:300])
        assert without_ids(ours.json()) == without_ids(theirs.json()), name
        statuses[name] = ours.status_code
    assert statuses == {"too many photos": 413, "too many questions": 422, "body over the cap": 413,
                        "gzip over the cap": 413, "photo over its limit": 413, "content type": 415}


def test_metrics_sum_the_replicas(cluster):
    client, _ = cluster
    for i in range(4):
        assert client.post("/v1/systemone", json={"state": f"metrics {i}", "questions": QUESTIONS}).status_code == 200
    lines = metric_values(client.get("/metrics").text)
    assert lines['omni_requests_total{route="/v1/systemone",status="200"}'] >= 4
    assert lines['omni_cache_misses_total{cache="prefix"}'] >= 4
    assert lines['omni_cache_budget_bytes{cache="prefix"}'] == 2 * 1024 * 2**20    # two replicas' budgets
    assert 'omni_queue_depth' in lines and 'omni_long_prefills_refused_total' in lines
    assert sum(v for k, v in lines.items() if k.startswith("omni_batches_total")) >= 4


async def _burst(base: str, bodies: list[dict], timeout_s: float = 120) -> list[httpx.Response | Exception]:
    async with httpx.AsyncClient(base_url=base, headers=AUTH, timeout=timeout_s) as client:
        return await asyncio.gather(*(client.post("/v1/systemone", json=b) for b in bodies), return_exceptions=True)


def test_a_burst_with_corrupt_uploads_loses_nothing_and_gets_no_5xx(cluster, local):
    client, _ = cluster
    bodies, expected = [], []
    for i in range(40):
        if i % 4 == 3:
            bodies.append({"state": f"unit {i}", "questions": QUESTIONS,
                           "images": [data_url("image/png", b"\x89PNG\r\n\x1a\n" + bytes(range(i, i + 40)))]})
            expected.append(422)
        else:
            bodies.append({"state": f"unit {i}", "questions": QUESTIONS, "images": [data_url("image/png", photo(i))]})
            expected.append(200)
    replies = run_async(_burst(str(client.base_url), bodies))
    assert all(isinstance(r, httpx.Response) for r in replies), [r for r in replies if not isinstance(r, httpx.Response)]
    assert [r.status_code for r in replies] == expected
    for body, reply in zip(bodies, replies, strict=True):
        if reply.status_code == 200:       # the burst's answers are the reference's, whichever replica answered
            assert reply.json() == local.post("/v1/systemone", json=body).json()
        else:
            assert reply.json()["detail"][0]["loc"] == ["body", "images", 0]


def cache_outcomes(reply: httpx.Response) -> dict[str, str]:
    outcome = {}
    for entry in reply.headers["server-timing"].split(", "):
        if "-cache;desc=" in entry:
            name, desc = entry.split(";desc=")
            outcome[name.removesuffix("-cache")] = desc.strip('"')
    return outcome


@pytest.mark.parametrize("kind", ["media", "state"])
def test_the_same_media_or_state_goes_to_the_replica_that_has_it(cluster, kind):
    client, _ = cluster
    outcomes = []
    for i in range(8):
        if kind == "media":       # new states and questions about one photo: its replica has it decoded
            body = {"state": f"affinity state {i}", "questions": {f"q{i}": QUESTIONS["visible"]},
                    "images": [data_url("image/png", photo(500))]}
        else:                     # one state, new questions: its replica has the prompt prefix
            body = {"state": "one long shared ticket " * 20, "questions": {f"q{i}": QUESTIONS["visible"]}}
        reply = client.post("/v1/systemone", json=body)
        assert reply.status_code == 200, reply.text
        outcomes.append(cache_outcomes(reply)[kind == "media" and "media" or "prefix"])
    assert outcomes[0] == "miss" and outcomes[1:] == ["hit"] * 7, outcomes


def test_a_replica_that_cannot_load_its_model_is_reported_not_retried_forever(cluster, tmp_path):
    from ray import serve

    from api.cluster.launch import deploy

    client, settings = cluster
    broken = settings.with_values({"model": str(tmp_path / "no-such-checkpoint"), "replicas": 1})
    started = time.monotonic()
    with pytest.raises(RuntimeError) as failure:
        deploy(broken, name="broken", route_prefix="/broken")
    assert time.monotonic() - started < 300
    assert "no-such-checkpoint" in str(failure.value) or "OmniEngine" in str(failure.value)
    assert serve.status().applications["broken"].status == "DEPLOY_FAILED"
    serve.delete("broken")
    assert client.post("/v1/systemone", json={"state": "still here", "questions": QUESTIONS}).status_code == 200


def test_scale_down_drains_requests_in_flight(cluster):
    from api.cluster.launch import deploy

    client, settings = cluster
    bodies = [{"state": f"scale down {i}", "questions": QUESTIONS, "images": [data_url("image/png", photo(100 + i))]}
              for i in range(24)]

    async def burst_then_scale_down():
        sending = asyncio.ensure_future(_burst(str(client.base_url), bodies))
        await asyncio.sleep(0.3)
        await asyncio.to_thread(deploy, settings.with_values({"replicas": 1}))
        return await sending

    replies = run_async(burst_then_scale_down())
    assert [getattr(r, "status_code", r) for r in replies] == [200] * len(bodies)
    deploy(settings)      # back to two for the tests after this one


def engine_replicas() -> list:
    """The engine replicas' actor handles (Serve names its replica actors in the "serve" namespace)."""
    import ray

    names = [a for a in ray.util.list_named_actors(all_namespaces=True)
             if a["namespace"] == "serve" and "#OmniEngine#" in a["name"] and a["name"].count("#") == 2
             and a["name"].split("::")[-1].startswith("omni#")]
    return [ray.get_actor(a["name"], namespace="serve") for a in names]


def test_killing_a_replica_mid_burst_gives_each_request_an_answer_or_a_503(cluster):
    import ray

    client, _ = cluster
    replicas = engine_replicas()
    assert len(replicas) == 2
    bodies = [{"state": f"kill {i}", "questions": QUESTIONS, "images": [data_url("image/png", photo(200 + i))]}
              for i in range(40)]

    async def burst_and_kill():
        sending = asyncio.ensure_future(_burst(str(client.base_url), bodies, timeout_s=180))
        await asyncio.sleep(0.5)
        ray.kill(replicas[0], no_restart=True)
        return await sending

    started = time.monotonic()
    replies = run_async(burst_and_kill())
    assert time.monotonic() - started < 180                            # no hang
    statuses = [getattr(r, "status_code", repr(r)) for r in replies]
    assert set(statuses) <= {200, 503}, statuses
    assert statuses.count(200) >= len(bodies) // 2, statuses
    for reply in replies:
        if reply.status_code == 503:
            assert reply.headers["retry-after"] and reply.json()["detail"]["error_type"] == "not_ready"
    # Ray replaces the replica; the service answers throughout
    assert client.post("/v1/systemone", json={"state": "after the kill", "questions": QUESTIONS}).status_code == 200
