"""What the fresh-install tests share (test_wheel.py, test_first_run.py): the checkout's files copied as a clone
with its uncommitted work would hold them, an environment without this session's settings, a bounded subprocess
that fails the test with its output, the README's first command and the main job's answer as the README prints it.

Knows nothing of what the tests check.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.docs.blocks import commands, read_blocks

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
STEP_TIMEOUT_S = 600


def checkout_files() -> list[str]:
    """The checkout's files: tracked, or untracked and not ignored (no .venv, build/, egg-info, caches)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.fail("this test copies the checkout's files: it needs git and a git checkout (.ci/run has both)")
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    return [name for name in listed if name and (ROOT / name).is_file()]


def copy_checkout(to: Path) -> list[str]:
    """Copies the checkout's files to `to`; returns their names."""
    files = checkout_files()
    for name in files:
        (to / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, to / name)
    return files


def clean_env(scratch: Path) -> dict[str, str]:
    """This process's environment without its venv, PYTHONPATH or OMNI_* settings (pip's configuration stays: it
    names the local torch wheel); one torch thread, the hub offline, a cache of its own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OMNI_") and k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(OMNI_TORCH_THREADS="1", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TQDM_DISABLE="1",
               OMNI_CACHE_DIR=str(scratch / ".omni-cache"))
    return env


def run(argv: list[str], cwd: Path, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S, check=False)
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def readme_answer() -> dict:
    """The main job's answer as the README's tour prints it (its ```json block with label_visible)."""
    block = next(b for b in read_blocks(ROOT / "README.md") if b.lang == "json" and '"label_visible"' in b.body)
    return json.loads(block.body)


def readme_first_command() -> str:
    """The README's first command: the set-up, then the main job."""
    return commands(next(b for b in read_blocks(ROOT / "README.md") if b.runnable))[0]


def main_job_args(examples: Path) -> list[str]:
    """The README's main job after `omni`, with the example files under `examples`."""
    return ["decide", str(examples / "inspection.json"), "--image", str(examples / "inspection" / "unit.png"),
            "--audio", str(examples / "inspection" / "hum.wav"), "--video", str(examples / "inspection" / "fan.mp4")]
