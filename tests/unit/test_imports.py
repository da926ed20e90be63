"""Layering: nothing under omni/ or preprocess/ imports the web stack, and only api/settings.py reads the env."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEB = {"fastapi", "starlette", "pydantic", "uvicorn", "multipart", "python_multipart", "prometheus_client", "api"}


def imported_roots(source: str) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


CORE_FILES = sorted(p for pkg in ("omni", "preprocess") for p in (ROOT / pkg).rglob("*.py"))


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_core_does_not_import_the_web_stack(path):
    assert not imported_roots(path.read_text(encoding="utf-8")) & WEB


def test_the_scan_sees_the_core_and_catches_web_imports():
    assert any(p.name == "engine.py" for p in CORE_FILES) and any(p.parent.name == "preprocess" for p in CORE_FILES)
    source = "import os\nimport pydantic.v1 as p\nfrom starlette.requests import Request\nfrom . import x\n"
    assert imported_roots(source) & WEB == {"pydantic", "starlette"}


def reads_environment(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and \
                isinstance(node.value, ast.Name) and node.value.id == "os":
            return True
    return False


def test_only_api_settings_reads_the_environment():
    readers = {str(p.relative_to(ROOT)) for p in sorted((ROOT / "api").rglob("*.py")) + CORE_FILES
               if reads_environment(p)}
    assert readers <= {"api/http/settings.py"}, readers
