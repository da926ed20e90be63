"""The `ServingEngine` conformance suite (tests/conformance/serving_engine.py) against the local `DecisionEngine`, with
the test `FakeModel` behind it. tests/cluster/test_engine_conformance.py runs the same suite against `RemoteEngine`."""
from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from omni.contract.config import EngineConfig
from omni.serve.engine import DecisionEngine
from omni.serve.surface import ServingEngine
from tests.conformance.serving_engine import *  # the suite's tests, collected here
from tests.unit.fake_model import FakeModel


@pytest.fixture
def make_engine() -> Iterator[Callable[[], ServingEngine]]:
    started: list[DecisionEngine] = []

    def make() -> ServingEngine:
        config = EngineConfig(max_wait_ms=1.0)
        started.append(DecisionEngine(config, FakeModel(config)).start())
        return started[-1]

    yield make
    for engine in started:
        engine.stop(drain=False)
