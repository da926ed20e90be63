"""The cluster's configuration: the shipped `serve deploy` file validates and builds the application through the
same builder as `omni serve --ray`; settings for replicas and autoscaling are checked; the router ranks real
replica wrappers by cache affinity (Ray's request-router interface, no Ray instance)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tests.cluster.conftest import require_ray, run_async

require_ray()

from ray.serve.schema import ServeDeploySchema

from api.cluster.affinity import home_replica
from api.cluster.router import CacheAffinityRouter
from api.http.settings import Settings, SettingsError

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_serve_deploy_file_validates_and_builds_both_deployments():
    config = yaml.safe_load((ROOT / "deploy" / "ray-serve.yaml").read_text())
    schema = ServeDeploySchema.model_validate(config)
    app = schema.applications[0]
    assert app.import_path == "api.cluster.deployments:build_app" and app.route_prefix == "/"
    assert {d.name for d in app.deployments} == {"OmniEngine", "OmniGateway"}
    engine = next(d for d in app.deployments if d.name == "OmniEngine")
    assert engine.ray_actor_options.num_gpus == 1
    from api.cluster.deployments import build_app

    built = build_app({**app.args, "model": None, "api_keys": ["k1", "k2"]})
    gateway = built._bound_deployment
    settings, engine_app = gateway.init_args
    assert settings.api_keys == ("k1", "k2") and settings.autoscale_bounds == (1, 4)
    options = engine_app._bound_deployment._deployment_config
    assert options.autoscaling_config.min_replicas == 1 and options.autoscaling_config.max_replicas == 4
    assert options.max_constructor_retry_count == settings.replica_load_retries + 1
    assert "CacheAffinityRouter" in str(options.request_router_config.request_router_class)


@pytest.mark.parametrize(("values", "message"), [
    ({"replicas": 0}, "replicas must be >= 1"),
    ({"autoscale": "4:1"}, "autoscale must be MIN:MAX"),
    ({"autoscale": "0:3"}, "autoscale must be MIN:MAX"),
    ({"autoscale": "two"}, "autoscale must be MIN:MAX"),
    ({"replica_gpus": -1}, "replica_gpus must be >= 0"),
])
def test_cluster_settings_are_checked(values, message):
    with pytest.raises(SettingsError, match=message):
        Settings().with_values(values)


def test_cluster_flags_and_environment():
    settings = Settings.from_env({"OMNI_RAY": "1", "OMNI_AUTOSCALE": "2:5"})
    assert settings.ray and settings.autoscale_bounds == (2, 5)
    from api.cli.serve import build_settings

    args = SimpleNamespace(ray="true", replicas="3", autoscale=None, cache_affinity="false")
    settings = build_settings(args, environ={})
    assert settings.ray and settings.replicas == 3 and settings.autoscale_bounds is None and not settings.cache_affinity


def replica(rid: str, max_ongoing: int = 32):
    return SimpleNamespace(replica_id=SimpleNamespace(unique_id=rid), max_ongoing_requests=max_ongoing)


NO_MODEL_ID = SimpleNamespace(multiplexed_model_id="")      # a base request: no adapter, no multiplexed model id


def router(queue_lengths: dict[str, int | None], slack: int = 8) -> CacheAffinityRouter:
    chosen = CacheAffinityRouter.__new__(CacheAffinityRouter)      # the ranking needs no running Serve
    chosen._replica_queue_len_cache = SimpleNamespace(get=lambda rid: queue_lengths.get(rid.unique_id))
    chosen.initialize_state(slack_requests=slack)
    return chosen


def test_the_router_ranks_the_home_replica_first_and_gives_way_when_it_is_busy():
    replicas = [replica("a"), replica("b"), replica("c")]
    key = "f" * 64
    home = home_replica(key, ["a", "b", "c"])
    pending = SimpleNamespace(kwargs={"affinity": key}, metadata=NO_MODEL_ID)
    ranked = run_async(router({"a": 0, "b": 0, "c": 0}).choose_replicas(replicas, pending))
    assert [r.replica_id.unique_id for r in ranked[0]] == [home]
    busy = {"a": 0, "b": 0, "c": 0, home: 20}
    ranked = run_async(router(busy).choose_replicas(replicas, pending))
    assert len(ranked) == 1 and ranked[0][-1].replica_id.unique_id == home
    unkeyed = run_async(router({"a": 3, "b": 1, "c": 2}).choose_replicas(replicas, SimpleNamespace(kwargs={}, metadata=NO_MODEL_ID)))
    assert [r.replica_id.unique_id for r in unkeyed[0]] == ["b", "c", "a"]


@dataclasses.dataclass(frozen=True)
class _ReplicaId:
    unique_id: str


def test_a_call_for_an_adapter_goes_where_it_is_resident_first_then_to_the_emptiest_by_affinity():
    resident = {"a": {"l1"}, "b": set(), "c": {"h1"}}
    replicas = [SimpleNamespace(replica_id=_ReplicaId(rid), max_ongoing_requests=32, multiplexed_model_ids=models)
                for rid, models in resident.items()]
    chosen = router({"a": 0, "b": 0, "c": 0})
    chosen._replicas = {r.replica_id: r for r in replicas}
    chosen._multiplexed_model_id_to_replica_ids = {"h1": {_ReplicaId("c")}, "l1": {_ReplicaId("a")}}
    key = "f" * 64
    for model_id, first in (("h1", "c"), ("l1", "a")):
        pending = SimpleNamespace(kwargs={"affinity": key}, metadata=SimpleNamespace(multiplexed_model_id=model_id))
        ranked = run_async(chosen.choose_replicas(replicas, pending))
        assert [[r.replica_id.unique_id for r in tier] for tier in ranked] == [[first], ["b"], [{"a": "c", "c": "a"}[first]]]
    fresh = SimpleNamespace(kwargs={"affinity": key}, metadata=SimpleNamespace(multiplexed_model_id="l2"))
    assert [r.replica_id.unique_id for r in run_async(chosen.choose_replicas(replicas, fresh))[0]] == ["b"]
