"""Shared fixtures: the tiny checkpoint is built once per session (offline, seed 0) and loaded through the real path.

Test folders set the pytest marks: tests/unit → unit, tests/integration → integration, tests/gpu → gpu,
tests/browser → browser, tests/cluster → cluster. Under pytest-xdist, tests/workers.py says which tests share a
worker and the order they are handed out in.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import workers


def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = Path(str(item.fspath)).parts
        for mark in ("unit", "integration", "gpu", "browser", "cluster"):
            if mark in parts:
                item.add_marker(getattr(pytest.mark, mark))
    if hasattr(config, "workerinput"):     # an xdist worker: the longest groups first
        workers.longest_first(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker per CPU this process may run on (its affinity), hyper-threads included: the tests mostly
    wait on subprocesses and servers, or run one torch thread."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` (pyproject's addopts): tests/workers.py's groups, longest first."""
    return workers.scheduler(config, log) if config.getvalue("dist") == "loadgroup" else None


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
