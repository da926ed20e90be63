"""What the benchmarks' smoke checks share: run a script's `--smoke` mode in a subprocess from the repository root
(without the caller's OMNI_* settings; the timeout only guards against a hang), and read what it prints (JSON lines,
markdown tables, finite and positive figures). Knows nothing of any one benchmark.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
HANG_GUARD_S = 900          # scale.py starts two Ray clusters: minutes on a busy 2-core machine


def run_smoke(script: str, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python benchmarks/SCRIPT --smoke EXTRA...` from the repository root; fails the test on a non-zero exit."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OMNI_")}
    done = subprocess.run([sys.executable, f"benchmarks/{script}", "--smoke", *extra], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=HANG_GUARD_S, env={**clean, **(env or {})})
    assert done.returncode == 0, f"{script} --smoke exited {done.returncode}:\n{done.stdout[-3000:]}\n" \
                                 f"{done.stderr[-3000:]}"
    return done


def json_lines(stdout: str) -> list[dict]:
    """Every stdout line that is a JSON object, parsed (a line starting with "{" must parse)."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def finite(value, where: str = "") -> None:
    """Every number in `value` (nested dicts / lists) is finite."""
    if isinstance(value, dict):
        for k, v in value.items():
            finite(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            finite(v, f"{where}[{i}]")
    elif isinstance(value, float):
        assert math.isfinite(value), f"{where} = {value}"


def positive(record: dict, *paths: str) -> None:
    """Each dotted path of `record` ("ms_best.a") holds a finite number > 0."""
    for path in paths:
        value = record
        for key in path.split("."):
            value = value[key]
        assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{path} = {value!r}"
        assert math.isfinite(value) and value > 0, f"{path} = {value}"


def one(lines: list[dict], **match) -> dict:
    """The one line whose fields equal `match`."""
    found = [line for line in lines if all(line.get(k) == v for k, v in match.items())]
    assert len(found) == 1, f"{len(found)} lines match {match}"
    return found[0]


def table(stdout: str, header_start: str) -> list[list[str]]:
    """The rows (cells) of the markdown table whose header line starts with `header_start`."""
    lines = stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(header_start)), None)
    assert start is not None, f"no table starting {header_start!r}"
    assert lines[start + 1].startswith("|---") and set(lines[start + 1]) <= set("|-:"), lines[start + 1]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def require_ray() -> None:
    """Skip without the [cluster] extra (found, not imported: Ray runs in the script's processes only), or fail where
    OMNI_REQUIRE_CLUSTER says it must be there."""
    missing = [name for name in ("ray", "psutil") if importlib.util.find_spec(name) is None]
    if missing:
        message = f"scale.py needs the [cluster] extra (ray[serve], psutil): {', '.join(missing)} missing"
        if os.environ.get("OMNI_REQUIRE_CLUSTER"):
            pytest.fail(message)
        pytest.skip(message)
