"""Layering: imports go one way (api.cli -> api.cluster -> api.http -> omni.serve | omni.learn -> omni.model -> omni.contract ->
preprocess), nothing below api/ imports the web stack or the network, only api/http/settings.py reads the
environment, and benchmarks import the installed package."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEB = {"fastapi", "starlette", "pydantic", "uvicorn", "multipart", "python_multipart", "prometheus_client", "api"}
NETWORK = {"urllib", "requests", "http", "socket", "httpx"}
# rank of each room: a module may import its own room and rooms of a LOWER rank only
RANKS = {"preprocess": 0, "omni.contract": 1, "omni.model": 2, "omni.serve": 3, "omni.learn": 3, "api.http": 4,
         "api.cluster": 5, "api.cli": 6}


def imported_modules(source: str) -> set[str]:
    """Every absolute module name imported anywhere in `source` (function-level imports too)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)   # `from omni import model`
    return found


def imported_roots(source: str) -> set[str]:
    return {name.split(".")[0] for name in imported_modules(source)}


def room_of(module: str) -> str | None:
    return next((room for room in sorted(RANKS, key=len, reverse=True)
                 if module == room or module.startswith(room + ".")), None)


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


PACKAGE_FILES = sorted(p for pkg in ("omni", "preprocess", "api") for p in (ROOT / pkg).rglob("*.py"))
CORE_FILES = [p for p in PACKAGE_FILES if p.parts[len(ROOT.parts)] in ("omni", "preprocess")]


@pytest.mark.parametrize("path", PACKAGE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down_the_rooms(path):
    room = room_of(module_name(path))
    if room is None:          # the package roots themselves (omni/__init__.py, api/__init__.py)
        return
    for target in imported_modules(path.read_text(encoding="utf-8")):
        other = room_of(target)
        if other is None or other == room:
            continue
        assert RANKS[other] < RANKS[room], f"{module_name(path)} ({room}) imports {target} ({other})"


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_core_does_not_import_the_web_stack_or_the_network(path):
    assert not imported_roots(path.read_text(encoding="utf-8")) & (WEB | NETWORK)


def test_every_module_lives_in_a_room():
    homeless = [module_name(p) for p in PACKAGE_FILES if room_of(module_name(p)) is None]
    assert sorted(homeless) == ["api", "omni"], homeless


def test_the_scan_sees_every_room_and_catches_bad_arrows():
    assert {room_of(module_name(p)) for p in PACKAGE_FILES} >= set(RANKS)
    source = "import os\nimport pydantic.v1 as p\nfrom starlette.requests import Request\nfrom . import x\n" \
             "def f():\n    from omni.serve import engine\n"
    assert imported_roots(source) & WEB == {"pydantic", "starlette"}
    assert "omni.serve.engine" in imported_modules(source)          # function-level imports count
    assert room_of("omni.serve.engine") == "omni.serve" and room_of("omni.modelish") is None


def reads_environment(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and \
                isinstance(node.value, ast.Name) and node.value.id == "os":
            return True
    return False


def test_only_api_http_settings_reads_the_environment():
    readers = {str(p.relative_to(ROOT)) for p in PACKAGE_FILES if reads_environment(p)}
    assert readers <= {"api/http/settings.py"}, readers


@pytest.mark.parametrize("path", sorted((ROOT / "benchmarks").glob("*.py")), ids=lambda p: p.name)
def test_benchmarks_import_the_installed_package(path):
    """No sys.path edits, and no script named like a package (its folder comes first on sys.path when it runs)."""
    assert "sys.path" not in path.read_text(encoding="utf-8")
    assert path.stem not in {"omni", "preprocess", "api", "fixtures", "tests"}


def test_no_module_of_the_model_room_is_over_300_lines():
    """A file does one job (loading, inputs, prefix state, forward, ...): none in omni/model/ outgrows 300 lines."""
    long = {p.name: n for p in (ROOT / "omni" / "model").glob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 300}
    assert long == {}, long
