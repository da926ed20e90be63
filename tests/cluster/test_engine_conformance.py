"""The `ServingEngine` conformance suite (tests/conformance/serving_engine.py) against `RemoteEngine`, in front of a real
engine replica (the tiny checkpoint) deployed on a local Ray instance. tests/unit/serve/test_engine_conformance.py runs
the same suite against the local `DecisionEngine`."""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.cluster.conftest import require_ray

require_ray()

from ray import serve

from api.cluster.deployments import ENGINE, OmniEngine
from api.cluster.remote import RemoteEngine
from omni.contract.config import EngineConfig
from omni.serve.surface import ServingEngine
from tests.conformance.serving_engine import *  # the suite's tests, collected here


@pytest.fixture(scope="module")
def engine_handle(ray_instance, tiny_dir):
    """One engine replica of the tiny checkpoint, its deployment's handle (no gateway: the tests are the caller)."""
    config = EngineConfig(model_path=str(tiny_dir), torch_threads=1, max_wait_ms=1.0)
    app = serve.deployment(OmniEngine, name=ENGINE).options(num_replicas=1, ray_actor_options={"num_cpus": 1})
    handle = serve.run(app.bind(config), name="conformance", route_prefix=None)
    yield handle
    serve.delete("conformance")


@pytest.fixture
def make_engine(engine_handle) -> Callable[[], ServingEngine]:
    def make() -> ServingEngine:
        # started on a thread without an event loop, as the gateway does (its app loads the engine in a thread):
        # Ray refuses blocking calls on a thread whose loop runs, and a full test run keeps one on the main thread
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(lambda: RemoteEngine(engine_handle).start()).result(timeout=300)

    return make
