"""preprocess/ sits below omni/: it must not import it, nor open files or sockets for callers."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PREPROCESS = sorted((Path(__file__).resolve().parents[2] / "preprocess").glob("*.py"))


def roots(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("path", PREPROCESS, ids=lambda p: p.name)
def test_preprocess_does_not_import_omni_or_the_network(path):
    assert not roots(path) & {"omni", "api", "urllib", "requests", "http", "socket"}


def test_scan_sees_the_decoders():
    assert {"video.py", "audio.py", "image.py", "sniff.py", "processor.py"} <= {p.name for p in PREPROCESS}
