"""The declared surfaces hold at run time too (mypy checks them statically): the test FakeModel is a DecisionModel
(tests/integration/model/test_surfaces.py checks ClefModel), and nothing in the engine's room or the app's engine
wiring looks a member up by name (`getattr` / `hasattr` with a string), which would hide a member from the
Protocols and the type checker."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from omni.model.surface import DecisionModel, TrainableModel
from tests.unit.fake_model import FakeModel

ROOT = Path(__file__).resolve().parents[2]
ENGINE_FILES = sorted((ROOT / "omni" / "serve").glob("*.py")) + [
    ROOT / "api" / "http" / name for name in ("app.py", "routes.py", "dependencies.py", "metrics.py")] + [ROOT / "api/cluster/remote.py"]


def lookups_by_name(source: str) -> list[str]:
    """`getattr(x, "name"...)` / `hasattr(x, "name")` calls with a literal name, as `func:name` strings."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            found.append(f"{node.func.id}:{node.args[1].value}")
    return found


def test_the_fake_model_is_a_decision_model_and_not_a_trainable_one():
    fake = FakeModel()
    assert isinstance(fake, DecisionModel)
    assert not isinstance(fake, TrainableModel)          # no weights to train


@pytest.mark.parametrize("path", ENGINE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_member_is_looked_up_by_name(path):
    assert lookups_by_name(path.read_text(encoding="utf-8")) == []


def test_the_scan_finds_lookups_by_name():
    source = 'getattr(model, "needs_chunks", None)\nhasattr(engine, "batcher")\ngetattr(stats, field.name)\n'
    assert lookups_by_name(source) == ["getattr:needs_chunks", "hasattr:batcher"]
