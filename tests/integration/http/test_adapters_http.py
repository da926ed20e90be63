"""Adapters over HTTP, on the real tiny checkpoint: /v1/models lists them, a request's `model` (or the Workers-AI
route's `lora`) selects one, the admin routes load / reload / unload them and set shadow pairs (roles, 404, 409,
bad names and folders, a wrong base naming both fingerprints), SIGHUP rescans `--adapters DIR`, /metrics counts them
and a shadow candidate's score lands in the decision log line."""
from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.http.app import create_app
from api.http.settings import Settings
from omni.model.adapter_format import MANIFEST_FILE
from omni.serve.engine import DecisionEngine
from tests.integration.serve.adapter_fixtures import make_adapter
from tests.unit.http.serving import wait_ready, wait_until

KEYS = ("k-admin", "k-app app caller")
ADMIN, APP = ({"Authorization": f"Bearer {k}"} for k in ("k-admin", "k-app"))
QUESTIONS = {"visible": {"type": "noul", "instructions": "Is the label visible?"},
             "team": {"type": "choice", "instructions": "Who fixes it?", "criteria": {"hvac": None, "electric": "E"}}}


def body(model: str | None = None) -> dict:
    return {"state": {"ticket": "Fan rattles near the breaker"}, "questions": QUESTIONS,
            **({"model": model} if model else {})}


@pytest.fixture(scope="module")
def folders(tiny_dir, tmp_path_factory):
    """--adapters DIR with alpha (head-only) and beta (LoRA), spare folders outside it, one of a wrong base."""
    from omni.model.clef import ClefModel

    base = ClefModel.load(tiny_dir)
    root = tmp_path_factory.mktemp("adapters")
    served, spare = root / "served", root / "spare"
    make_adapter(base, served / "alpha", seed=1)
    make_adapter(base, served / "beta", seed=2, mode="lora")
    make_adapter(base, served / "going", seed=5)
    make_adapter(base, spare / "gamma", seed=3)
    make_adapter(base, spare / "delta", seed=4)
    wrong = make_adapter(base, spare / "wrong", seed=6)
    manifest = json.loads((wrong / MANIFEST_FILE).read_text())
    manifest["base_sha256"] = "0" * 64
    (wrong / MANIFEST_FILE).write_text(json.dumps(manifest))
    return {"served": served, "spare": spare, "base_sha256": base.sha256}


@pytest.fixture(scope="module")
def app(tiny_dir, folders, tmp_path_factory):
    settings = Settings().with_values({"model": str(tiny_dir), "api_keys": KEYS, "adapters_dir": str(folders["served"]),
                                       "decision_log": str(tmp_path_factory.mktemp("log"))})
    with TestClient(create_app(settings, DecisionEngine(settings.engine))) as client:
        wait_ready(client, seconds=120)
        yield client


def decide(client, model=None) -> dict:
    response = client.post("/v1/systemone", json=body(model), headers=APP)
    assert response.status_code == 200, response.text
    return response.json()


def test_models_lists_the_base_and_every_adapter_in_models_and_data(app):
    payload = app.get("/v1/models", headers=APP).json()
    cards = {card["name"]: card for card in payload["models"]}
    assert cards["clef-omni"]["mode"] == "base" and cards["clef-omni"]["base"] is None
    assert {"alpha", "beta"} <= set(cards)
    assert cards["alpha"]["mode"] == "head" and cards["beta"]["mode"] == "lora"
    assert cards["alpha"]["base"] == "clef-omni" and len(cards["alpha"]["release_date"]) == 10
    assert cards["alpha"]["resident"] is True          # loaded at start
    data = {entry["id"]: entry for entry in payload["data"]}
    assert data["beta"]["mode"] == "lora" and data["beta"]["base"] == "clef-omni"
    assert data["beta"]["release_date"] == cards["beta"]["release_date"]


def test_a_request_naming_an_adapter_is_answered_by_it(app):
    base, alpha, beta = decide(app), decide(app, "alpha"), decide(app, "beta")
    assert (base["model"], alpha["model"], beta["model"]) == ("clef-omni", "alpha", "beta")
    assert alpha["answers"] != base["answers"] and beta["answers"] != base["answers"]


def test_the_workers_ai_route_selects_an_adapter_by_lora(app):
    response = app.post("/accounts/acc/ai/run/@cf/cloudflare/clef-omni", json={**body(), "lora": "alpha"},
                        headers=APP)
    assert response.status_code == 200, response.text
    assert response.json()["result"]["model"] == "alpha"
    unknown = app.post("/accounts/acc/ai/run/@cf/cloudflare/clef-omni", json={**body(), "lora": "nope"}, headers=APP)
    assert unknown.status_code == 400 and "alpha" in unknown.json()["errors"][0]["message"]


def test_an_unknown_model_is_a_400_naming_every_model_served(app):
    response = app.post("/v1/systemone", json=body("nope"), headers=APP)
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert detail["error_type"] == "api_usage_error"
    assert all(name in detail["message"] for name in ("'nope'", "clef-omni", "alpha", "beta"))


@pytest.mark.parametrize(("method", "path", "payload"), [
    ("GET", "/v1/admin/adapters", None), ("POST", "/v1/admin/adapters", {"name": "x", "path": "/tmp"}),
    ("POST", "/v1/admin/adapters/alpha/reload", None), ("DELETE", "/v1/admin/adapters/alpha", None),
    ("PUT", "/v1/admin/shadows/clef-omni", {"candidate": "alpha"}), ("DELETE", "/v1/admin/shadows/clef-omni", None)])
def test_the_admin_routes_need_the_admin_role(app, method, path, payload):
    assert app.request(method, path, json=payload).status_code == 401
    refused = app.request(method, path, json=payload, headers=APP)
    assert refused.status_code == 403 and "admin" in refused.json()["detail"]["message"]


def test_admin_loads_reloads_and_unloads_an_adapter(app, folders):
    loaded = app.post("/v1/admin/adapters", json={"name": "gamma", "path": str(folders["spare"] / "gamma")},
                      headers=ADMIN)
    assert loaded.status_code == 201, loaded.text
    assert loaded.json()["name"] == "gamma" and loaded.json()["resident"] is True
    first_sha = loaded.json()["sha256"]
    assert decide(app, "gamma")["model"] == "gamma"
    assert "gamma" in {m["name"] for m in app.get("/v1/models", headers=APP).json()["models"]}
    reloaded = app.post("/v1/admin/adapters/gamma/reload", headers=ADMIN)
    assert reloaded.status_code == 200 and reloaded.json()["sha256"] == first_sha
    listing = app.get("/v1/admin/adapters", headers=ADMIN).json()
    assert "gamma" in {card["name"] for card in listing["adapters"]}
    assert listing["stats"]["reloads"] >= 1 and "same_forward" in listing["shadow_stats"]
    assert app.delete("/v1/admin/adapters/gamma", headers=ADMIN).json() == {"name": "gamma", "unloaded": True}
    gone = app.post("/v1/systemone", json=body("gamma"), headers=APP)
    assert gone.status_code == 400 and gone.json()["detail"]["error_type"] == "api_usage_error"
    assert app.delete("/v1/admin/adapters/gamma", headers=ADMIN).status_code == 404
    assert app.post("/v1/admin/adapters/gamma/reload", headers=ADMIN).status_code == 404


def test_unloading_an_adapter_that_a_request_holds_is_a_409(app):
    registry = app.app.state.service.engine.adapters
    held = registry.acquire("alpha")                  # what a request in flight holds until it ends
    try:
        busy = app.delete("/v1/admin/adapters/alpha", headers=ADMIN)
        assert busy.status_code == 409, busy.text
        assert busy.json()["detail"]["error_type"] == "conflict" and "in flight" in busy.json()["detail"]["message"]
    finally:
        registry.release(held)
    assert "alpha" in registry.names()


def test_a_name_already_served_is_a_409(app, folders):
    again = app.post("/v1/admin/adapters", json={"name": "alpha", "path": str(folders["spare"] / "gamma")},
                     headers=ADMIN)
    assert again.status_code == 409 and "already served" in again.json()["detail"]["message"]


@pytest.mark.parametrize("name", ["a/b", "..", "bad\x07name", "tab\tname"])
def test_a_bad_name_is_a_400_naming_it(app, folders, name):
    refused = app.post("/v1/admin/adapters", json={"name": name, "path": str(folders["spare"] / "delta")},
                       headers=ADMIN)
    assert refused.status_code == 400, refused.text
    assert refused.json()["detail"]["error_type"] == "adapter_error"
    assert name not in app.app.state.service.engine.adapters.names()


def test_a_folder_that_is_not_there_or_of_another_base_is_a_400_naming_the_cause(app, folders):
    missing = app.post("/v1/admin/adapters", json={"name": "ghost", "path": str(folders["spare"] / "ghost")},
                       headers=ADMIN)
    assert missing.status_code == 400 and "not a directory" in missing.json()["detail"]["message"]
    wrong = app.post("/v1/admin/adapters", json={"name": "wrong", "path": str(folders["spare"] / "wrong")},
                     headers=ADMIN)
    assert wrong.status_code == 400, wrong.text
    message = wrong.json()["detail"]["message"]
    assert "'wrong'" in message and "0" * 16 in message and folders["base_sha256"][:16] in message
    assert "wrong" not in app.app.state.service.engine.adapters.names()


def test_sighup_rescans_the_adapters_folder(app, folders):
    from api.cli.serve import _reload_on_sighup

    registry = app.app.state.service.engine.adapters
    shutil.copytree(folders["spare"] / "delta", folders["served"] / "delta")
    shutil.rmtree(folders["served"] / "going")
    previous = signal.getsignal(signal.SIGHUP)
    try:
        _reload_on_sighup(app.app.state.service)
        os.kill(os.getpid(), signal.SIGHUP)
        wait_until(lambda: "delta" in registry.names() and "going" not in registry.names(), seconds=60,
                   what="the rescan")
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert decide(app, "delta")["model"] == "delta"
    assert app.post("/v1/systemone", json=body("going"), headers=APP).status_code == 400


def test_metrics_count_adapters_and_shadow_scores(app):
    decide(app, "alpha")
    text = app.get("/metrics", headers=ADMIN).text
    for line in ("omni_adapters_served ", "omni_adapters_resident ", "omni_adapters_resident_lora ",
                 "omni_adapters_resident_bytes ", "omni_adapters_in_flight ", 'omni_adapter_events_total{event="loads"}',
                 'omni_adapter_events_total{event="evictions"}', 'omni_adapter_events_total{event="load_failures"}',
                 'omni_shadow_scores_total{result="same_forward"}', 'omni_shadow_scores_total{result="dropped"}'):
        assert line in text, line
    served = next(row for row in text.splitlines() if row.startswith("omni_adapters_served "))
    assert float(served.split()[1]) == len(app.app.state.service.engine.adapters.names())


def test_a_shadow_pair_set_by_admin_logs_the_candidates_score(app):
    svc = app.app.state.service
    missing = app.put("/v1/admin/shadows/clef-omni", json={"candidate": "nope"}, headers=ADMIN)
    assert missing.status_code == 400 and "nope" in missing.json()["detail"]["message"]
    assert app.put("/v1/admin/shadows/nope", json={"candidate": "alpha"}, headers=ADMIN).status_code == 404
    paired = app.put("/v1/admin/shadows/clef-omni", json={"candidate": "alpha"}, headers=ADMIN)
    assert paired.status_code == 200 and paired.json() == {"shadows": {"clef-omni": "alpha"}}
    try:
        live = app.post("/v1/systemone", json=body(), headers={**APP, "x-request-id": "shadowed-1"})
        assert live.status_code == 200 and live.json()["model"] == "clef-omni"
        alone = decide(app, "alpha")
    finally:
        assert app.delete("/v1/admin/shadows/clef-omni", headers=ADMIN).status_code == 200
    assert app.delete("/v1/admin/shadows/clef-omni", headers=ADMIN).status_code == 404

    def logged() -> list[dict]:     # the line is appended once the candidate's score is in (off the live path)
        assert svc.decision_log.flush(30)
        return [record for segment in sorted(Path(svc.decision_log.directory, "segments").iterdir())
                for record in map(json.loads, segment.read_text().splitlines()) if record["request_id"] == "shadowed-1"]

    wait_until(lambda: bool(logged()), what="the shadowed decision's log line")
    record = logged()[0]
    shadow = record["shadow"]
    assert shadow["model"] == "alpha" and len(shadow["adapter_sha256"]) == 64 and shadow["x_outcome"] is None
    assert record["response"]["model"] == "clef-omni"
    assert shadow["answers"] == alone["answers"]           # the candidate's answers, as it answers alone
    assert set(shadow["probabilities"]) == set(QUESTIONS)


def test_policies_bound_to_adapters_govern_their_decisions_only(tiny_dir, folders, tmp_path):
    """The server's policy bound to `alpha` gives alpha's decisions an outcome and the base's none; an adapter whose
    folder holds its own policy.toml answers under that one."""
    own = shutil.copytree(folders["served"] / "beta", tmp_path / "adapters" / "beta")
    (own / "policy.toml").write_text('version = "beta own"\n[default]\nauto_at = 0.01\n')
    shutil.copytree(folders["served"] / "alpha", tmp_path / "adapters" / "alpha")
    policy = tmp_path / "server.toml"
    policy.write_text('version = "for alpha"\nmodel = "alpha"\n[default]\nauto_at = 0.99\n')
    settings = Settings().with_values({"model": str(tiny_dir), "adapters_dir": str(tmp_path / "adapters"),
                                       "policy": str(policy)})
    with TestClient(create_app(settings, DecisionEngine(settings.engine))) as client:
        wait_ready(client, seconds=120)
        outcomes = {}
        for model in (None, "alpha", "beta"):
            response = client.post("/v1/systemone", json=body(model))
            assert response.status_code == 200, response.text
            outcomes[model] = response.json().get("x_outcome")
    assert outcomes[None] is None                                          # the server's policy is alpha's
    assert outcomes["alpha"]["policy"]["version"] == "for alpha"
    assert outcomes["alpha"]["overall"] == "review"                       # 0.99 is out of the tiny model's reach
    assert outcomes["beta"]["policy"]["version"] == "beta own" and outcomes["beta"]["overall"] != "review"
