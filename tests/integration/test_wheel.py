"""Issue 23, "a wheel that runs anywhere": `pip wheel .` builds a wheel that holds every file the running code reads
from the package (the demo checkpoint, the workbench's files, the fixtures' media) and complete metadata; installed
into a fresh venv and run from outside the repository, it gives the README's main-job answers and serves /ui.

The wheel is built from a copy of the checkout's files (what `git ls-files` lists, committed or not, so a stale
build/ or egg-info of the working tree cannot hide a missing package-data glob). The venv is a real one beside the
test's scratch directory: first the wheel alone (`--no-deps`), where `omni` must name the pip line for torch and
exit 2 (the bad input); then `torch==2.13.0` (pip's configuration finds the CPU wheel) and the wheel with its
[serve] extra. Fast as it honestly can be: `venv --without-pip` with the outer pip driving it (`pip --python`), no
byte-compiling at install (the runs compile what they import, as a first run anywhere does), one torch thread.
"""
from __future__ import annotations

import email
import json
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from api.http.ui import FILES as UI_FILES
from tests.integration.fresh import EXAMPLES, clean_env, copy_checkout, main_job_args, readme_answer, run

PACKAGES = ("omni", "api", "preprocess", "fixtures")           # pyproject.toml [tool.setuptools.packages.find]


@dataclass(frozen=True)
class Installed:
    wheel: Path
    files: list[str]                                                # the checkout's files it was built from
    venv: Path
    outside: Path                                                   # a working directory outside the repository
    env: dict[str, str]
    no_torch: subprocess.CompletedProcess[str]                      # `omni decide` before torch was installed
    seconds: dict[str, float]

    @property
    def omni(self) -> str:
        return str(self.venv / "bin" / "omni")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    source, dist, venv, outside = base / "source", base / "dist", base / "venv", base / "elsewhere"
    outside.mkdir()
    env = clean_env(base)
    env.pop("PYTHONDONTWRITEBYTECODE", None)       # its own venv: the first run keeps what it compiles for the next
    pip = [sys.executable, "-m", "pip"]
    seconds: dict[str, float] = {}

    start = time.monotonic()
    files = copy_checkout(source)
    run([*pip, "wheel", "-q", "--no-deps", "-w", str(dist), str(source)], outside, env)
    (wheel,) = dist.glob("omni_decide-*.whl")
    seconds["build"] = time.monotonic() - start

    start = time.monotonic()
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], outside, env)
    into = [*pip, "--python", str(venv / "bin" / "python"), "install", "-q", "--no-compile"]
    run([*into, "--no-deps", str(wheel)], outside, env)
    no_torch = run([str(venv / "bin" / "omni"), "decide", str(EXAMPLES / "inspection.json")], outside, env,
                   check=False)
    seconds["venv, the wheel alone"] = time.monotonic() - start

    start = time.monotonic()
    run([*into, "torch==2.13.0", f"{wheel}[serve]"], outside, env)
    seconds["torch and the wheel[serve]"] = time.monotonic() - start
    print("wheel test set-up: " + ", ".join(f"{step} {s:.1f} s" for step, s in seconds.items()))   # pytest -s
    return Installed(wheel, files, venv, outside, env, no_torch, seconds)   # pytest keeps the last 3 runs' tmp


# ------------------------------------------------------------------------------------------------- what it holds
def test_the_wheel_holds_every_file_the_packages_have(installed):
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    expected = {name for name in installed.files if name.split("/")[0] in PACKAGES and "__pycache__" not in name}
    assert expected - names == set(), "the wheel lacks these files (a package-data glob misses them)"
    data = {name for name in expected if not name.endswith(".py")}
    assert {f"api/http/static/{name}" for name in UI_FILES} <= data             # every file /ui serves
    assert any(name.startswith("omni/model/checkpoints/tiny-inspection-v1/") and name.endswith(".safetensors")
               for name in data)
    assert not {name for name in names if name.split("/")[0] in ("tests", "examples", "benchmarks", "scripts")}


def test_the_wheel_metadata_is_complete(installed):
    with zipfile.ZipFile(installed.wheel) as wheel:
        info = next(n.rsplit("/", 1)[0] for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(wheel.read(f"{info}/METADATA"))
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
        assert f"{info}/licenses/LICENSE" in wheel.namelist()
    assert meta["Name"] == "omni-decide" and meta["Version"]
    assert meta["License-Expression"] == "Apache-2.0" and meta.get_all("License-File") == ["LICENSE"]
    assert meta["Requires-Python"] == ">=3.10"
    assert meta["Author"] and meta["Keywords"] and meta["Summary"]
    assert len(meta.get_all("Project-URL") or []) >= 2
    classifiers = meta.get_all("Classifier") or []
    assert "Programming Language :: Python :: 3.11" in classifiers and len(classifiers) >= 8
    assert any(line.startswith("Requires-Dist: torch") for line in str(meta).splitlines())
    assert "omni = api.cli.main:main" in entry_points


# -------------------------------------------------------------------------------------------------- what it does
def test_without_torch_omni_names_the_pip_line_and_exits_2(installed):
    done = installed.no_torch
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("omni: torch is not installed in this environment")
    assert "pip install torch==2.13.0" in line and "https://pytorch.org/get-started/locally/" in line


def test_it_runs_from_the_venv_not_the_repository(installed):
    done = run([str(installed.venv / "bin" / "python"), "-c",
                "import api, omni, preprocess, fixtures; print(*(m.__file__ for m in (api, omni, preprocess, fixtures)))"],
               installed.outside, installed.env)
    site = installed.venv.resolve()
    assert all(Path(f).resolve().is_relative_to(site) for f in done.stdout.split()), done.stdout


def test_the_main_job_gives_the_readme_answers(installed):
    done = run([installed.omni, *main_job_args(EXAMPLES)], installed.outside, installed.env)   # absolute paths
    answer, readme = json.loads(done.stdout), readme_answer()
    assert answer["answers"] == readme["answers"]                       # every digit the README prints
    assert answer["usage"] == readme["usage"] and answer["x_usage"] == readme["x_usage"]
    assert "embedded tiny demo checkpoint" in done.stderr              # the packaged one, not a random fallback


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(installed) -> Iterator[httpx.Client]:
    port = free_port()
    log = installed.outside / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([installed.omni, "serve", "--host", "127.0.0.1", "--port", str(port)],
                                cwd=installed.outside, env=installed.env, stdout=out, stderr=subprocess.STDOUT)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
        try:
            end = time.monotonic() + 180
            while True:
                assert proc.poll() is None, f"omni serve exited {proc.returncode}:\n{log.read_text()}"
                assert time.monotonic() < end, f"omni serve not ready after 180 s:\n{log.read_text()}"
                try:
                    if client.get("/ready").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
            yield client
        finally:
            client.close()
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise
    assert code == 0, f"omni serve did not stop cleanly ({code}):\n{log.read_text()}"


def test_it_serves_the_workbench(installed, served):
    page = served.get("/ui")
    assert page.status_code == 200 and "<html" in page.text.lower()
    with zipfile.ZipFile(installed.wheel) as wheel:
        for name in UI_FILES:                                      # index.html, app.js, dom.js, team.js, …
            asset = served.get(f"/ui/{name}")
            assert asset.status_code == 200, name
            assert asset.content == wheel.read(f"api/http/static/{name}"), name   # the packaged file


def test_it_answers_a_decision(served):
    body = {"state": "The unit hums and its label is readable.",
            "questions": {"ok": {"type": "noul", "instructions": "Is the unit fine?"}}}
    answer = served.post("/v1/systemone", json=body)
    assert answer.status_code == 200, answer.text
    assert 0 <= answer.json()["answers"]["ok"]["noul"] <= 1
