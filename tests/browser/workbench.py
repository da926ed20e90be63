"""The workbench the browser tests open: a batch answered by `omni batch`, an `omni eval` report, and `omni review`
serving them (the embedded tiny demo model, so the answers are the README's), restartable."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from api.cli.main import main as omni
from tests.integration.cli.test_serve_subprocess import OMNI, ROOT, free_port

EXAMPLES = ROOT / "examples"
INSPECTION = json.loads((EXAMPLES / "inspection.json").read_text())
STATES = ["Unit 14 after the fan swap.", "Unit 15: the label was replaced yesterday.", "Unit 16, night shift check.",
          "Unit 17: customer says it hums."]


def write_batch_input(folder: Path) -> Path:
    """Four inspection requests with the example files (paths relative to the file), and one with a broken photo."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("unit.png", "hum.wav", "fan.mp4"):
        shutil.copy(EXAMPLES / "inspection" / name, folder / name)
    shutil.copy(ROOT / "fixtures" / "files" / "corrupt" / "truncated.png", folder / "broken.png")
    lines = [{"state": state, "questions": INSPECTION["questions"], "images": ["unit.png"], "audio": ["hum.wav"],
              "videos": ["fan.mp4"]} for state in STATES]
    lines.append({"state": "A unit with a broken photo.", "questions": INSPECTION["questions"], "images": ["broken.png"]})
    path = folder / "in.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def write_report(folder: Path) -> Path:
    """An `omni eval` report on two labelled inspection requests."""
    data = folder / "labelled.jsonl"
    labels = {"label_visible": True, "sounds_normal": False, "fan_running": True, "severity": 1, "next_step": "rework"}
    data.write_text("".join(json.dumps({"state": s, "questions": INSPECTION["questions"], "images": ["unit.png"],
                                        "labels": labels}) + "\n" for s in STATES[:2]))
    out = folder / "report"
    assert omni(["eval", str(data), "--out", str(out), "--quiet"]) == 0
    return out


class Review:
    """`omni review` in a subprocess on a free port; `restart()` stops it and starts it again with the same flags."""

    def __init__(self, folder: Path, *args: str):
        self.folder, self.args, self.port = folder, args, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.start()

    def start(self) -> None:
        self.log_path = self.folder / f"review-{time.monotonic_ns()}.log"
        with open(self.log_path, "wb") as log:      # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen([sys.executable, "-c", OMNI, "review", "--port", str(self.port), *self.args],
                                         cwd=self.folder, stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        end = time.monotonic() + 180
        while time.monotonic() < end:
            assert self.proc.poll() is None, f"omni review exited:\n{self.log()}"
            try:
                if httpx.get(self.url + "/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        else:
            raise AssertionError(f"omni review not ready:\n{self.log()}")
        printed = re.search(r"omni review: open (\S+)", self.log())
        assert printed and printed.group(1) == self.url + "/ui", self.log()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)

    def restart(self) -> None:
        self.stop()
        self.start()
