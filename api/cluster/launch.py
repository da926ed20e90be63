"""`omni serve --ray`: the application on a Ray cluster — a local one started here, or `--ray-address`'s.

Starts Ray (no dashboard; logical CPUs enough for the replicas asked for), Serve's HTTP proxy on `--host/--port`,
and the application (`api.cluster.deployments.application`); returns when stopped. A replica that fails to load its
model is retried `--replica-load-retries` times, then the start is reported failed (exit 1), never retried forever.
SIGTERM / SIGINT drain: the gateway says draining (/ready 503, new decisions 503), calls in flight finish (up to
the drain timeout), then Serve shuts down (replicas drain too) and Ray stops.
Exit codes as `omni serve`: 0 clean stop, 1 the model failed to load, 2 bad settings or Ray missing.
Knows nothing of routes or the model.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from api.http.settings import Settings

log = logging.getLogger("omni.cluster")


def start_cluster(settings: Settings) -> None:
    """Ray (here, or at `ray_address`) and Serve's HTTP proxy on the settings' host and port."""
    import ray
    from ray import serve

    if not ray.is_initialized():
        if settings.ray_address:
            ray.init(address=settings.ray_address, namespace="omni")
        else:
            most = settings.autoscale_bounds[1] if settings.autoscale_bounds else settings.replicas
            cpus = max(os.cpu_count() or 1, int(most * settings.replica_cpus + 0.999))
            ray.init(num_cpus=cpus, include_dashboard=False, namespace="omni")
    serve.start(http_options={"host": settings.host, "port": settings.port},
                logging_config={"log_level": settings.log_level.upper(), "enable_access_log": False})


def deploy(settings: Settings, name: str | None = None, route_prefix: str = "/") -> None:
    """The application, blocking until every replica is running; RuntimeError when a deployment failed."""
    import ray
    from ray import serve

    from api.cluster.deployments import APP_NAME, application

    serve.run(application(settings, ray.cluster_resources().get("GPU", 0.0)), name=name or APP_NAME,
              route_prefix=route_prefix)


def drain(settings: Settings) -> None:
    """Stop taking decisions, let those in flight finish (up to the drain timeout), then shut Serve down."""
    from ray import serve
    from ray.exceptions import RayError
    from ray.serve.exceptions import RayServeException

    from api.cluster.deployments import APP_NAME, GATEWAY

    try:
        gateway = serve.get_deployment_handle(GATEWAY, app_name=APP_NAME)
        gateway.begin_drain.remote().result(timeout_s=10)
        deadline = time.monotonic() + settings.drain_s
        while time.monotonic() < deadline and gateway.in_flight.remote().result(timeout_s=10) > 0:
            time.sleep(0.2)
    except (RayError, RayServeException, TimeoutError, RuntimeError) as exc:
        log.warning("drain: %s (the gateway is gone: nothing left to wait for)", exc)
    if settings.ray_address:     # someone else's cluster: take only our application down
        serve.delete(APP_NAME)
    else:
        serve.shutdown()


def run_cluster(settings: Settings) -> int:
    try:
        import ray
        from ray import serve  # noqa: F401
    except ImportError as exc:
        print(f"omni serve --ray: needs the [cluster] extra (pip install 'omni-decide[cluster]'): {exc}",
              file=sys.stderr)
        return 2
    import ray

    stop = threading.Event()
    try:
        start_cluster(settings)
        for sig in (signal.SIGTERM, signal.SIGINT):   # after ray.init, which installs handlers of its own
            signal.signal(sig, lambda *_: stop.set())
        try:
            deploy(settings)
        except RuntimeError as exc:
            log.error("the application failed to start (a replica could not load its model after %d retries): %s",
                      settings.replica_load_retries, exc)
            return 1
        scaling = (f"autoscaling {settings.autoscale} engine replicas" if settings.autoscale
                   else f"{settings.replicas} engine replica(s)")
        log.info("omni serve --ray on http://%s:%d with %s (docs at /docs)", settings.host, settings.port, scaling)
        while not stop.wait(1.0):
            pass
        log.info("draining (up to %.0f s for requests in flight)", settings.drain_s)
        drain(settings)
        return 0
    finally:
        if ray.is_initialized() and not settings.ray_address:
            ray.shutdown()
