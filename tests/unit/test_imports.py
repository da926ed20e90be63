"""Layering: imports go one way (api.cli -> api.cluster | api.line -> api.http -> omni.governance -> omni.serve | omni.review |
omni.learn -> omni.model -> omni.contract -> preprocess), no module takes part in an import circle (not even under
TYPE_CHECKING or inside a function), nothing below api/ imports the web stack or the network, only
api/http/settings.py reads the environment, and benchmarks import the installed package."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEB = {"fastapi", "starlette", "pydantic", "uvicorn", "multipart", "python_multipart", "prometheus_client", "api"}
NETWORK = {"urllib", "requests", "http", "socket", "httpx"}
# rank of each room: a module may import its own room and rooms of a LOWER rank only
RANKS = {"preprocess": 0, "omni.contract": 1, "omni.model": 2, "omni.serve": 3, "omni.banks": 3, "omni.review": 3, "omni.learn": 3,
         "omni.governance": 4, "api.http": 5, "api.cluster": 6, "api.line": 6, "api.cli": 7}


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


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """module -> the modules of `sources` it imports (every import: module level, TYPE_CHECKING, function level)."""
    return {name: {target for target in imported_modules(source) if target in sources and target != name}
            for name, source in sources.items()}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    return seen


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every set of more than one module that import each other, directly or through others (sorted)."""
    reach = {module: reachable(graph, module) for module in graph}
    circles = {tuple(sorted({module} | {other for other in reach[module] if module in reach[other]}))
               for module in graph if module in reach[module]}
    return sorted(list(circle) for circle in circles)


def test_no_import_circles():
    sources = {module_name(p): p.read_text(encoding="utf-8") for p in PACKAGE_FILES}
    assert import_circles(import_graph(sources)) == []


def test_the_circle_scan_finds_circles_through_type_checking_and_functions():
    sources = {"a": "import b\n", "b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from c import x\n",
               "c": "def f():\n    import a\n", "d": "import a\n", "e": "import e\n"}
    assert import_circles(import_graph(sources)) == [["a", "b", "c"]]
    assert import_circles(import_graph({"a": "import b\n", "b": "x = 1\n"})) == []


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
