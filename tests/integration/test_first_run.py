"""Issue 23, "a one-minute first run": the README's first command, as written, in a copy of the checkout without a
.venv (what a fresh clone holds): `bash scripts/bootstrap.sh && .venv/bin/omni decide …` prints the README's
answer; the set-up installed the project with its [serve] extra and nothing the tests alone need (no Ray, no
Playwright or other dev tools, no training extras); a second set-up run changes nothing.

CI runs `bootstrap.sh --tests` (.ci/run), so nothing else runs the plain set-up. The time is printed (pytest -s),
not asserted: it depends on the machine and its load; benchmarks/RESULTS.md "first run" records it.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.integration.fresh import clean_env, copy_checkout, readme_answer, readme_first_command, run

MAIN_JOB_NEEDS = {"torch", "transformers", "av", "fastapi", "uvicorn", "omni-decide"}
TESTS_ONLY = {"ray", "playwright", "pytest", "mypy", "ruff", "hypothesis", "schemathesis", "avrik-sdk", "matplotlib",
              "scipy", "peft"}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> tuple[Path, dict[str, str], str, float]:
    clone = tmp_path_factory.mktemp("clone")
    copy_checkout(clone)
    env = clean_env(clone)
    command = readme_first_command()
    start = time.monotonic()
    done = run(["bash", "-c", command], clone, env)
    seconds = time.monotonic() - start
    print(f"first run (README line 1, fresh copy): {seconds:.1f} s")   # pytest -s
    return clone, env, done.stdout, seconds


def installed(clone: Path, env: dict[str, str]) -> set[str]:
    listed = run([str(clone / ".venv" / "bin" / "python"), "-m", "pip", "list", "--format", "json"], clone, env)
    return {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}


def test_the_readme_first_command_prints_the_readme_answer(first_run):
    _, _, stdout, _ = first_run
    answer, readme = json.loads(stdout), readme_answer()
    assert answer["answers"] == readme["answers"]


def test_it_installs_the_main_job_and_nothing_only_the_tests_need(first_run):
    clone, env, _, _ = first_run
    names = installed(clone, env)
    assert names >= MAIN_JOB_NEEDS
    assert not names & TESTS_ONLY, f"the plain set-up installed what only the tests need: {names & TESTS_ONLY}"


def test_a_second_set_up_changes_nothing(first_run):
    clone, env, _, _ = first_run
    before = installed(clone, env)
    run(["bash", "scripts/bootstrap.sh"], clone, env)
    assert installed(clone, env) == before
