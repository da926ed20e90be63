"""Cluster tests: `omni serve --ray` on a local Ray instance on this machine (the [cluster] extra).

Without Ray these tests skip, unless `OMNI_REQUIRE_CLUSTER=1` (CI sets it), where that is a failure. One Ray
instance per test module (started here, shut down after the module); the engine replicas load the tiny checkpoint.
"""
from __future__ import annotations

import asyncio
import os
import socket
import time
from pathlib import Path

import pytest


def require_ray() -> None:
    try:
        import ray  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError as exc:
        message = f"needs the [cluster] extra (ray[serve]): {exc}"
        if os.environ.get("OMNI_REQUIRE_CLUSTER"):
            pytest.fail(message)
        pytest.skip(message)


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUESTIONS = {"visible": {"type": "noul", "instructions": "Is the label visible?"},
             "team": {"type": "choice", "instructions": "Who fixes it?", "criteria": {"hvac": None, "electric": "E"}}}


def inspection_files() -> dict:
    """The README's inspection request as a multipart upload: request.json, a photo, a recording, a video."""
    return {"request": ("request.json", (EXAMPLES / "inspection.json").read_bytes(), "application/json"),
            "images": ("unit.png", (EXAMPLES / "inspection/unit.png").read_bytes(), "image/png"),
            "audio": ("hum.wav", (EXAMPLES / "inspection/hum.wav").read_bytes(), "audio/wav"),
            "videos": ("fan.mp4", (EXAMPLES / "inspection/fan.mp4").read_bytes(), "video/mp4")}


def metric_values(text: str) -> dict[str, float]:
    """/metrics' samples by name with labels: {'omni_cache_budget_bytes{cache="prefix"}': 2147483648.0, ...}."""
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


GCS_PORT_WAIT_S = "120"    # Ray's own default is 30 s; a loaded CI machine (an image build beside) can take longer


def start_ray(ray, tries: int = 3) -> None:
    """`ray.init` for a test module, patient with a busy machine: Ray waits up to RAY_gcs_server_port_wait_time_s
    for its GCS server to say its port (set to 120 s here unless the caller set it), and a start that still times
    out is shut down and tried again, up to `tries` times (a clean-clone CI run on 2026-12-05 saw two starts 2 minutes
    apart time out with no GCS log at all, and the same worker's next start 2 minutes later succeed; another, that
    evening, saw a raylet not register with the GCS within Ray's fixed 30 s — a bare Exception — and, before it was
    retried too, lost 11 tests to it). A Ray that cannot start in any try fails the module's tests."""
    os.environ.setdefault("RAY_gcs_server_port_wait_time_s", GCS_PORT_WAIT_S)
    for attempt in range(1, tries + 1):
        try:
            ray.init(num_cpus=4, include_dashboard=False, namespace="omni-tests", log_to_driver=False)
            return
        except Exception:           # RuntimeError: a GCS port never said; a bare Exception: a raylet not registered
            ray.shutdown()
            if attempt == tries:
                raise
            time.sleep(5.0)         # let the failed start's processes go before the next


@pytest.fixture(scope="module")
def ray_instance():
    """A local Ray instance for one module: 4 logical CPUs (two replicas, room for a third while one restarts)."""
    require_ray()
    import ray
    from ray import serve

    start_ray(ray)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield port
    finally:
        serve.shutdown()
        ray.shutdown()


def run_async(coroutine):
    """`asyncio.run` on a thread of its own: the session's browser fixture (Playwright's sync API) keeps an event
    loop running on the main thread when the whole suite runs."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
