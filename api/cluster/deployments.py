"""The Ray Serve application: `OmniGateway` (the FastAPI app of `omni serve`, unchanged) in front of `OmniEngine`
(one `DecisionEngine` per replica), routed by `CacheAffinityRouter`.

- `OmniEngine` loads and warms its engine in its constructor, so Ray sends it nothing until it is ready; a replica
  whose model fails to load is retried `replica_load_retries` times, then the deployment is reported failed (Ray's
  `max_constructor_retry_count`). Scale-down and shutdown drain: Ray stops routing to a stopping replica and waits
  up to the drain timeout for its calls in flight, then the engine stops with drain.
- Adapters (`--adapters`, `--adapter`) ride on Ray Serve's model multiplexing: the gateway sends a request whose
  `model` names an adapter with `multiplexed_model_id=<name>`, Ray routes it to a replica where that adapter is
  resident (else to the one with fewest), and the replica's `@serve.multiplexed` loader (at most `max_adapters` per
  replica, LRU) makes it resident in that replica's engine first; Ray's eviction unloads it there
  (`api.cluster.adapters`). The base model is resident everywhere; its requests carry no model id.
- `OmniGateway` builds the app at replica start (`__serve_build_asgi_app__`) with a `RemoteEngine` in place of the
  local engine: every route, auth rule, limit, error shape, header and metric is `omni serve`'s own code.
- `application(settings)` binds both from one `Settings`; `build_app(args)` is the builder that `serve deploy`
  configs name (`deploy/ray-serve.yaml`): `args` are settings by field name, over the `OMNI_*` environment.
Knows nothing of argv or signals (`api/cluster/launch.py`), nor of how the engine batches.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ray import serve
from ray.serve.config import RequestRouterConfig
from ray.serve.exceptions import RayServeException

from api.cluster.adapters import ReplicaAdapters, ResidentAdapter, ServedModels, adapter_table, replica_config
from api.cluster.remote import RemoteEngine, ReplicaAnswer, ReplicaSnapshot
from api.cluster.router import CacheAffinityRouter
from api.http.settings import Settings
from omni.contract.config import EngineConfig
from omni.contract.errors import AdapterError, MediaError, OmniError, Overloaded
from omni.contract.types import DecisionRequest
from omni.serve.surface import ModelCard

if TYPE_CHECKING:
    from fastapi import FastAPI
    from ray.serve import Application
    from ray.serve.handle import DeploymentHandle

    from omni.model.adapters import Adapter
    from omni.serve.engine import DecisionEngine

log = logging.getLogger("omni.cluster")
APP_NAME = "omni"
ENGINE = "OmniEngine"
GATEWAY = "OmniGateway"
LOAD_RETRY_S = 0.05     # an adapter's load waits this long between tries while every resident adapter is held


class OmniEngine:
    """One engine replica: a `DecisionEngine` with its own caches, micro-batcher and model thread."""

    def __init__(self, config: EngineConfig):
        from omni.serve.engine import DecisionEngine  # lazily: the gateway's process never loads torch

        table = adapter_table(config)
        self._engine = DecisionEngine(replica_config(config)).start()   # blocking: no traffic before it is warm
        self._adapters = ReplicaAdapters(self._engine.adapters, table, self._engine.selector.base_names,
                                         config.shadows)
        # Ray's multiplexed loader, made here because its bound on models per replica is a setting (a plain
        # function: Ray keeps its model cache as an attribute of what it wraps, which a bound method cannot take)
        self._load_wait_s = config.request_timeout_s

        async def load_adapter(name: str) -> ResidentAdapter:
            return await self._load_adapter(name)

        self._resident = serve.multiplexed(max_num_models_per_replica=config.max_adapters)(load_adapter)
        try:
            self._replica = serve.get_replica_context().replica_id.unique_id
        except RayServeException:   # constructed outside a replica (tests of the class itself)
            self._replica = f"local-{os.getpid()}"
        log.info("engine replica %s ready (pid %d)", self._replica, os.getpid())

    async def _load_adapter(self, name: str) -> ResidentAdapter:
        """Ray's multiplexed loader: `name` resident in this replica's engine. While every resident adapter is held
        by requests (Ray evicted one that is still in use) it waits for a release, up to the request timeout."""
        deadline = time.monotonic() + self._load_wait_s
        while True:
            try:
                await asyncio.to_thread(self._adapters.make_resident, name)
                return ResidentAdapter(self._adapters, name)
            except Overloaded:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(LOAD_RETRY_S)

    async def decide(self, request: DecisionRequest, deadline_s: float | None,
                     affinity: str | None = None) -> ReplicaAnswer:
        """The engine's answer or its typed error (both sent back whole), with this replica's counters. A request
        for an adapter first makes it resident here (Ray's multiplexed loader) and holds it to its end."""
        try:
            held = await self._hold(request)
        except (OmniError, MediaError) as exc:
            return ReplicaAnswer(None, exc, self._snapshot())
        try:
            return await self._answer(request, deadline_s)
        finally:
            if held is not None:
                self._adapters.release(held)

    async def _hold(self, request: DecisionRequest) -> Adapter | None:
        name = self._adapters.served.adapter_of(request.model)
        if name is None:
            return None
        for _attempt in range(3):        # evicted between the loader and the hold by another adapter's load: again
            await self._resident(name)
            try:
                return self._adapters.hold(name)
            except AdapterError:
                continue
        raise Overloaded(f"adapter {name!r} was evicted from this replica three times while loading", retry_after_s=1.0)

    async def _answer(self, request: DecisionRequest, deadline_s: float | None) -> ReplicaAnswer:
        try:
            future = self._engine.submit(request, deadline_s=deadline_s)
        except (OmniError, MediaError) as exc:
            return ReplicaAnswer(None, exc, self._snapshot())
        try:
            decision = await asyncio.wrap_future(future)   # cancelled by the caller -> the engine skips or drops it
        except (OmniError, MediaError) as exc:
            return ReplicaAnswer(None, exc, self._snapshot())
        return ReplicaAnswer(decision, None, self._snapshot())

    def info(self) -> ModelCard:
        return self._engine.info

    def served_models(self) -> ServedModels:
        """The base's names and every adapter the deployment serves (resident here or not)."""
        return self._adapters.served

    def replica_pid(self) -> tuple[str, int]:
        return self._replica, os.getpid()

    def check_health(self) -> None:
        if not self._engine.ready:
            raise RuntimeError("the engine is not running")

    def _snapshot(self) -> ReplicaSnapshot:
        engine = self._engine
        return ReplicaSnapshot(self._replica, engine.cache_stats(), engine.batcher_stats(), engine.long_prefills(),
                               multiplexed_model_id=serve.get_multiplexed_model_id(),
                               adapters=self._adapters.resident())

    def __del__(self) -> None:
        engine: DecisionEngine | None = self.__dict__.get("_engine")    # absent when the constructor failed
        if engine is not None:
            engine.stop(drain=True)


@serve.ingress()
class OmniGateway:
    """The HTTP app of `omni serve` with the engine replicas behind a `RemoteEngine`."""

    def __init__(self, settings: Settings, engine: DeploymentHandle):
        self._settings = settings
        self._engine = RemoteEngine(engine, settled=self._engines_settled)
        self._app: FastAPI | None = None
        self._app_name = serve.get_replica_context().app_name

    def _engines_settled(self) -> bool:
        """Every engine replica the deployment wants is running (or it will never get them: /ready then follows the
        replicas that did start; the launcher reports the failure)."""
        try:
            status = serve.status().applications[self._app_name].deployments[ENGINE].status
        except (KeyError, RayServeException):
            return False
        return status not in ("UPDATING", "UPSCALING")

    def __serve_build_asgi_app__(self) -> FastAPI:
        from api.http.app import create_app

        self._app = create_app(self._settings, self._engine, request_id_header=False)   # Ray's proxy sends it
        return self._app

    def begin_drain(self) -> None:
        """From `omni serve --ray` on SIGTERM: /ready says draining and new decisions get 503; those in flight end."""
        if self._app is not None:               # built when the replica started
            self._app.state.service.begin_drain()

    def in_flight(self) -> int:
        return self._engine.in_flight


def application(settings: Settings, cluster_gpus: float = 0.0) -> Application:
    """Both deployments bound from one Settings; `cluster_gpus` picks the default GPUs per engine replica."""
    gpus = settings.replica_gpus if settings.replica_gpus is not None else (1.0 if cluster_gpus > 0 else 0.0)
    engine_cfg = settings.engine
    bounds = settings.autoscale_bounds
    scaling: dict[str, Any] = {"num_replicas": settings.replicas} if bounds is None else {
        "autoscaling_config": {"min_replicas": bounds[0], "initial_replicas": bounds[0], "max_replicas": bounds[1],
                               "target_ongoing_requests": 2 * engine_cfg.max_batch_records,
                               "upscale_delay_s": 10.0, "downscale_delay_s": 60.0}}
    logs = {"log_level": settings.log_level.upper(), "enable_access_log": False}   # no log line per call
    engine = serve.deployment(name=ENGINE)(OmniEngine).options(
        logging_config=logs,
        ray_actor_options={"num_cpus": settings.replica_cpus, "num_gpus": gpus},
        max_ongoing_requests=engine_cfg.max_queue, max_queued_requests=engine_cfg.max_queue,
        graceful_shutdown_timeout_s=settings.drain_s, graceful_shutdown_wait_loop_s=0.5,
        max_constructor_retry_count=max(1, settings.replica_load_retries + 1),
        health_check_period_s=10.0, health_check_timeout_s=30.0,
        request_router_config=RequestRouterConfig(
            # Ray takes the class itself (or its import path); its annotation names only the serialised form
            request_router_class=CacheAffinityRouter,  # type: ignore[arg-type]
            request_router_kwargs={"slack_requests": settings.affinity_slack_requests})
        if settings.cache_affinity else RequestRouterConfig(),       # Ray's default: power of two choices
        **scaling)
    gateway = serve.deployment(name=GATEWAY)(OmniGateway).options(
        logging_config=logs,
        num_replicas=1, ray_actor_options={"num_cpus": 0},
        max_ongoing_requests=4 * engine_cfg.max_queue, graceful_shutdown_timeout_s=settings.drain_s)
    return gateway.bind(settings, engine.bind(engine_cfg))


def build_app(args: dict[str, Any]) -> Application:
    """`serve deploy` / `serve run` builder: settings by field name (`model`, `max_batch_records`, `replicas`, ...)
    over the `OMNI_*` environment of the process that builds it."""
    import ray

    values = {key: tuple(value) if isinstance(value, list) else value for key, value in dict(args or {}).items()}
    settings = Settings.from_env().with_cli(SimpleNamespace(**values))   # strings coerced as flags are
    gpus = ray.cluster_resources().get("GPU", 0.0) if ray.is_initialized() else 0.0
    return application(settings, gpus)
