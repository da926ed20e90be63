"""Shared fixtures: the tiny checkpoint is built once per session (offline, seed 0) and loaded through the real path.

Test folders set the pytest marks: tests/unit → unit, tests/integration → integration, tests/gpu → gpu,
tests/browser → browser, tests/cluster → cluster.
"""
from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = Path(str(item.fspath)).parts
        for mark in ("unit", "integration", "gpu", "browser", "cluster"):
            if mark in parts:
                item.add_marker(getattr(pytest.mark, mark))


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """Two cores shared with other work: one torch thread is faster and far steadier than oversubscribed two."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    from omni.model.tiny import write_checkpoint

    return write_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt", seed=0)


@pytest.fixture(scope="session")
def tiny_engine(tiny_dir):
    from omni.contract.config import EngineConfig
    from omni.serve.engine import DecisionEngine

    return DecisionEngine(EngineConfig(model_path=str(tiny_dir))).load()
