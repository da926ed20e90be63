"""Docs that cannot rot: every shell (and python) block of the README and docs/ runs against the tiny model, or its
marker says why not (the markers: `tests/integration/docs/blocks.py`).

Each page runs in a scratch directory of its own that sees the repository's `examples/` and `.venv/` (so
`.venv/bin/omni` and `omni` both work), with the environment's `OMNI_*` variables cleared, one thread per process
and the hub offline; two pages run at a time. Blocks run in page order, so a later command uses what an earlier one
wrote. A server block starts `omni serve` / `omni review` on a free port, waits for /ready, runs the block's other
commands against it (a curl must get a 2xx, and a JSON body that is not an error), then stops it with SIGTERM and
expects a clean exit (0). The main job's stated answers (README: label visible ≈ 0.98, sounds normal ≈ 0.02, fan running ≈ 0.98, severity ≈ 1, next
step rework) are checked on its output. Also: every page exists and is linked from the README, relative links and
their anchors resolve, the README's commands are what `.ci/run` runs, and no file points outside the repository.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.integration.docs.blocks import (
    SETUP,
    Block,
    MarkerError,
    commands,
    plan_of,
    read_blocks,
    starts_server,
)

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND_TIMEOUT_S = 300
READY_TIMEOUT_S = 180
MAIN_JOB = (".venv/bin/omni decide examples/inspection.json --image examples/inspection/unit.png "
            "--audio examples/inspection/hum.wav --video examples/inspection/fan.mp4")


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


# ------------------------------------------------------------------------------------------ every block is marked
def test_every_runnable_block_runs_or_says_why_not():
    problems = []
    for page in PAGES:
        for block in read_blocks(page):
            if not block.lang:
                problems.append(f"{block.where}: a fence without a language (```bash, ```json, ```text …)")
            elif block.runnable:
                try:
                    plan_of(block)
                except MarkerError as exc:
                    problems.append(str(exc))
    assert not problems, "\n".join(problems)


def test_the_pages_exist_and_their_links_resolve():
    names = {p.name for p in PAGES}
    assert {"README.md", "architecture.md", "serving.md", "media.md", "review-and-batch.md", "learning.md",
            "scaling-out.md", "deployment.md", "performance.md"} <= names
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for target, anchor in re.findall(r"\]\((?!https?://)([^)#]*)(?:#([^)]*))?\)", text):   # links resolve
            path = page.parent / target if target else page
            assert path.exists(), f"{page_id(page)} links to {target}, which does not exist"
            if anchor and path.suffix == ".md":
                assert anchor in anchors(path), f"{page_id(page)} links to {target}#{anchor}: no such heading"
        if page.parent.name == "docs":
            assert f"(docs/{page.name})" in readme, f"the README does not link to docs/{page.name}"


OUTSIDE = "../" + "shared"          # the sessions' folder beside the repository (written so as not to match itself)
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".txt", ".json", ".js", ".html", ".css", ".cfg", ""}


def test_nothing_in_the_repository_points_outside_it():
    """A clone holds the repository only: no file may send its reader to a folder beside it."""
    skip = {".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis",
            "test-artifacts", "build", "dist"}
    offenders = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in skip and not d.endswith(".egg-info")]
        for path in (Path(folder) / name for name in files):
            if path.suffix in TEXT_SUFFIXES and OUTSIDE in path.read_text(encoding="utf-8", errors="replace"):
                offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, f"these files point to {OUTSIDE}: {offenders}"


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+\s+(.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_the_readme_commands_are_what_ci_runs():
    """Line 1 is the main job after the plain set-up; line 2's set-up and test command are lines of .ci/run, exactly."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    first = next(b for b in read_blocks(ROOT / "README.md") if b.runnable)
    setup_then_job, setup_then_tests = commands(first)
    assert setup_then_job == SETUP + MAIN_JOB
    tests_setup, _, tests_command = setup_then_tests.partition(" && ")
    assert tests_setup == "bash scripts/bootstrap.sh --tests"
    assert tests_setup in ci and tests_command in ci
    assert plan_of(first).setup_reason and 2 in plan_of(first).skipped


def test_the_checker_catches_unmarked_and_unreasoned_blocks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("intro\n```bash\nomni decide x.json\n```\n<!-- doc-test: not run: -->\n```sh\nls\n```\n"
                    "<!-- doc-test: run; line 3 not run: because it is long -->\n```bash\n# a comment\n"
                    "echo 'a\nb' \\\n  | cat\ncat > f <<'EOF'\n{\"x\": 1}\nEOF\n```\n```\nls\n```\n", encoding="utf-8")
    unmarked, unreasoned, marked, bare = read_blocks(page)
    with pytest.raises(MarkerError, match="without a doc-test marker"):
        plan_of(unmarked)
    with pytest.raises(MarkerError, match="say why"):
        plan_of(unreasoned)
    assert commands(marked) == ["echo 'a\nb' \\\n  | cat", "cat > f <<'EOF'\n{\"x\": 1}\nEOF"]
    with pytest.raises(MarkerError, match="names a command the block does not have"):
        plan_of(marked)
    assert bare.lang == "" and not bare.runnable
    assert starts_server(".venv/bin/omni serve --model x") and starts_server("omni review --batch a")
    assert not starts_server("omni batch a --url http://localhost:8000")


# ------------------------------------------------------------------------------------------------- running them
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMNI_")}
    bin_dir = str(Path(sys.executable).parent)
    env.update(PATH=bin_dir + os.pathsep + env.get("PATH", ""), OMNI_TORCH_THREADS="1", HF_HUB_OFFLINE="1",
               OMNI_CACHE_DIR=str(scratch / ".omni-cache"), PYTHONUNBUFFERED="1", TQDM_DISABLE="1",
               OMP_NUM_THREADS="1")
    return env


def scratch_for(page: Path, tmp_path_factory) -> Path:
    scratch = tmp_path_factory.mktemp(page.stem)
    (scratch / "examples").symlink_to(ROOT / "examples")
    (scratch / ".venv").symlink_to(Path(sys.prefix))
    return scratch


def tail(text: str, chars: int = 3000) -> str:
    return text if len(text) <= chars else "…" + text[-chars:]


class Page:
    """Runs one page's blocks in its scratch directory; `outputs` keeps each command's stdout."""

    def __init__(self, page: Path, scratch: Path):
        self.page, self.scratch, self.env = page, scratch, environment(scratch)
        self.outputs: dict[str, str] = {}
        self.server: subprocess.Popen | None = None
        self.port = 0

    def run_block(self, block: Block) -> None:
        plan = plan_of(block)
        if plan.mode == "not run":
            return
        try:
            for number, command in enumerate(commands(block), start=1):
                if number in plan.skipped:
                    continue
                if plan.setup_reason:
                    command = command.removeprefix(SETUP)
                if starts_server(command):
                    assert plan.mode == "server", f"{block.where}: `{command}` starts a server: mark the block server"
                    self.start(command, block)
                elif block.lang == "python":
                    self.run([sys.executable, "-c", command], command, block)
                else:
                    self.run_shell(command, block)
        finally:
            self.stop(block)

    def run_shell(self, command: str, block: Block) -> None:
        curls = list(re.finditer(r"(^|\|)\s*curl\s", command, re.MULTILINE))
        if self.server is not None:
            command = re.sub(r"(localhost|127\.0\.0\.1):8000", f"127.0.0.1:{self.port}", command)
        elif curls:
            pytest.fail(f"{block.where}: `{command}` needs a server: start one earlier in the block (mark it server)")
        if curls:     # the last curl of the command also prints the status, on a line of its own
            at = curls[-1].end()
            command = command[:at] + "-w '\\n%{http_code}' " + command[at:]
        out = self.run(["bash", "-c", "set -euo pipefail\n" + command], command, block)
        if curls:
            self.check_http(out, command, block)

    def run(self, argv: list[str], command: str, block: Block) -> str:
        done = subprocess.run(argv, check=False, cwd=self.scratch, env=self.env, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S)
        assert done.returncode == 0, (f"{block.where}: `{command}` exited {done.returncode}\n"
                                      f"stdout: {tail(done.stdout)}\nstderr: {tail(done.stderr)}")
        self.outputs[command] = done.stdout
        return done.stdout

    @staticmethod
    def check_http(out: str, command: str, block: Block) -> None:
        body, _, status = out.rpartition("\n")
        assert status.isdigit() and 200 <= int(status) < 300, f"{block.where}: `{command}` got {status}: {tail(body)}"
        if body.lstrip().startswith(("{", "[")):
            payload = json.loads(body)
            assert not (isinstance(payload, dict) and ("detail" in payload or payload.get("success") is False)), \
                f"{block.where}: `{command}` answered an error: {tail(body)}"

    def start(self, command: str, block: Block) -> None:
        assert self.server is None, f"{block.where}: one server per block"
        self.port = free_port()
        argv = [*shlex.split(command, comments=True), "--port", str(self.port)]
        self.log = self.scratch / f"server-{self.port}.log"
        with open(self.log, "wb") as log:
            self.server = subprocess.Popen(["bash", "-c", "exec " + shlex.join(argv)], cwd=self.scratch,
                                           env=self.env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{self.port}"
        end = time.monotonic() + READY_TIMEOUT_S
        while True:
            assert self.server.poll() is None, f"{block.where}: `{command}` exited: {tail(self.log_text())}"
            assert time.monotonic() < end, f"{block.where}: `{command}` not ready: {tail(self.log_text())}"
            try:
                if httpx.get(url + "/ready", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        if re.match(r"(\.venv/bin/)?omni review\b", command.strip()):     # it prints the page's address
            assert f"omni review: open {url}/ui" in self.log_text(), tail(self.log_text())
            assert httpx.get(url + "/ui", timeout=10).status_code == 200

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, block: Block) -> None:
        if self.server is None:
            return
        server, self.server = self.server, None
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        assert server.returncode == 0, f"{block.where}: the server did not stop cleanly: {tail(self.log_text())}"


def check_main_job(stdout: str) -> None:
    """The README's stated answers of the main job, to the precision it states them."""
    answers = json.loads(stdout)["answers"]
    assert answers["label_visible"]["noul"] == pytest.approx(0.98, abs=0.01)
    assert answers["sounds_normal"]["noul"] == pytest.approx(0.02, abs=0.01)
    assert answers["fan_running"]["noul"] == pytest.approx(0.98, abs=0.01)
    assert round(answers["severity"]["score"]) == 1 and answers["severity"]["legend"]["1"] == "minor"
    assert answers["next_step"]["choice"] == "rework"


def runs_something(page: Path) -> bool:
    """Whether a block of the page is not marked `not run` (a broken marker counts: running the page says why)."""
    return any(b.runnable and not (b.marker or "").startswith("not run:") for b in read_blocks(page))


RUN_PAGES = [p for p in PAGES if runs_something(p)]


def run_page(page: Path, scratch: Path) -> dict[str, str]:
    runner = Page(page, scratch)
    for block in read_blocks(page):
        if block.runnable:
            runner.run_block(block)
    return runner.outputs


@pytest.fixture(scope="module")
def page_runs(request, tmp_path_factory) -> Iterator[dict[Path, Future]]:
    """The selected pages, run two at a time: each command is one process on one thread (OMP_NUM_THREADS=1), so on
    two cores two pages take about the time of one. Each test waits for its own page's outcome."""
    selected = {item.callspec.params["page"] for item in request.session.items
                if item.originalname == "test_the_commands_of_the_page_run"}
    scratches = {page: scratch_for(page, tmp_path_factory) for page in RUN_PAGES if page in selected}
    slowest_first = sorted(scratches, key=lambda p: -len(commands_of(p)))
    with ThreadPoolExecutor(2, thread_name_prefix="doc-page") as pool:
        yield {page: pool.submit(run_page, page, scratches[page]) for page in slowest_first}


def commands_of(page: Path) -> list[str]:
    return [c for b in read_blocks(page) if b.runnable and not (b.marker or "").startswith("not run:")
            for c in commands(b)]


@pytest.mark.parametrize("page", RUN_PAGES, ids=page_id)
def test_the_commands_of_the_page_run(page, page_runs):
    outputs = page_runs[page].result()
    if page.name == "README.md":
        check_main_job(outputs[MAIN_JOB])
