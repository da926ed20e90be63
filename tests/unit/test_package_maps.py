"""Package maps: every package's `__init__` docstring names each of its modules (`name.py`) and folders (`name/`).

The map is where a newcomer looks first ("which file does this?"); a module added without a line there is a room
whose door is not on the plan. The scan covers every directory with an `__init__.py` under the shipped packages
(omni/, api/, preprocess/, fixtures/); a folder inside one (a subpackage, or data such as `checkpoints/`, `static/`,
`files/`) is named as `name/`.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("omni", "api", "preprocess", "fixtures")
PACKAGES = sorted(init.parent for room in ROOMS for init in (ROOT / room).rglob("__init__.py"))


def contents(package: Path) -> list[str]:
    """What the map must name: `name.py` for each module, `name/` for each folder (caches and hidden ones aside)."""
    names = [p.name for p in package.glob("*.py") if p.name != "__init__.py"]
    names += [f"{p.name}/" for p in package.iterdir()
              if p.is_dir() and p.name != "__pycache__" and not p.name.startswith(".")]
    return sorted(names)


def named(name: str, docstring: str) -> bool:
    """`name` appears as a whole path component: `review.py` is not named by `review_queue.py` or `x/review.py2`."""
    return re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", docstring) is not None


def docstring_of(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_package_map_names_every_module_and_folder(package):
    docstring = docstring_of(package)
    missing = [name for name in contents(package) if not named(name, docstring)]
    assert not missing, f"{package.relative_to(ROOT)}/__init__.py does not name {missing}"


def test_the_scan_sees_every_room_and_tells_names_apart(tmp_path):
    assert {p.relative_to(ROOT).parts[0] for p in PACKAGES} == set(ROOMS)
    assert ROOT / "omni" / "serve" in PACKAGES and ROOT / "api" / "cluster" in PACKAGES
    assert named("review.py", "    review.py   review directories") and named("serve/", "omni/serve/  the engine")
    assert not named("review.py", "review_queue.py") and not named("review.py", "the_review.py")
    assert not named("media.py", "media.pyc") and not named("serve/", "observe/")
    (tmp_path / "__init__.py").write_text('"""pkg.\n\n    a.py  one\n"""\n')
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    (tmp_path / "data").mkdir()
    (tmp_path / "__pycache__").mkdir()
    assert contents(tmp_path) == ["a.py", "b.py", "data/"]
    assert [n for n in contents(tmp_path) if not named(n, docstring_of(tmp_path))] == ["b.py", "data/"]
