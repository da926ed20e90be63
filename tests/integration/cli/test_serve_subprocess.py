"""A real `omni serve` process on a free loopback port with the tiny checkpoint: JSON and multipart uploads,
32 concurrent requests with 2 corrupt uploads, a full queue, the tiny-default notice, SIGTERM drain."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from fixtures.media import image_bytes, mp3_bytes, video_bytes

ROOT = Path(__file__).resolve().parents[3]
OMNI = "import sys; from api.cli.main import main; sys.exit(main())"  # exactly what the `omni` console script runs
QUESTIONS = {"label_visible": {"type": "noul", "instructions": "Is the model and serial number label visible?"},
             "sounds_normal": {"type": "noul", "instructions": "Does the unit sound like it is running smoothly?"},
             "severity": {"type": "score", "instructions": "How severe is the fault?",
                          "criteria": ["none", "minor", "major"]}}
BODY = {"model": "clef-omni", "state": "Review the installation: photo, recording, video of the fan.",
        "questions": QUESTIONS}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`omni serve` in a subprocess; stderr goes to a file so a failing test can show it."""

    def __init__(self, tmp_path: Path, *args: str, env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp_path / f"serve-{self.port}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (open for the server's life; closed in stop())
        self.proc = subprocess.Popen([sys.executable, "-c", OMNI, "serve", "--port", str(self.port), *args],
                                     cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def wait_ready(self, seconds: float = 120) -> Server:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"omni serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if self.client.get("/ready").status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"omni serve not ready after {seconds} s:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.client.close()
        self._log.close()
        return self.proc.returncode


@pytest.fixture(scope="module")
def server(tiny_dir, tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("serve"), "--model", str(tiny_dir), "--max-batch-records", "8").wait_ready()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def media_files():
    return {"unit.jpg": image_bytes("JPEG"), "run.mp3": mp3_bytes(1.0), "fan.mp4": video_bytes()}


def check_answers(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    payload = response.json()
    assert payload["model"] == "clef-omni" and list(payload["answers"]) == list(QUESTIONS)
    assert 0 <= payload["answers"]["label_visible"]["noul"] <= 1
    assert isinstance(payload["usage"]["input_tokens"], int) and payload["usage"]["input_tokens"] > 0
    assert "x-request-id" in response.headers and "server-timing" in response.headers
    return payload


def test_json_request(server):
    check_answers(server.client.post("/v1/systemone", json=BODY))


def test_multipart_upload_like_curl(server, media_files):
    files = [("request", ("req.json", json.dumps(BODY), "application/json")),
             ("images", ("unit.jpg", media_files["unit.jpg"], "image/jpeg")),
             ("audio", ("run.mp3", media_files["run.mp3"], "audio/mpeg")),
             ("videos", ("fan.mp4", media_files["fan.mp4"], "video/mp4"))]
    payload = check_answers(server.client.post("/v1/systemone", files=files))
    assert {"image", "audio", "video"} <= set(payload.get("x_usage", {}))


def test_32_concurrent_requests_with_2_corrupt_uploads(server, media_files):
    good, corrupt = media_files["unit.jpg"], media_files["unit.jpg"][: len(media_files["unit.jpg"]) // 3]

    def send(i: int) -> httpx.Response:
        upload = corrupt if i in (5, 21) else good
        files = [("request", ("req.json", json.dumps({**BODY, "state": f"unit {i}"}), "application/json")),
                 ("images", (f"unit{i}.jpg", upload, "image/jpeg"))]
        return server.client.post("/v1/systemone", files=files)

    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(send, range(32)))
    for i, r in enumerate(results):
        if i in (5, 21):
            assert 400 <= r.status_code < 500, r.text
            assert r.json()["detail"][0]["loc"] == ["body", "images", 0]
        else:
            check_answers(r)
    assert server.client.get("/health").status_code == 200 and server.client.get("/ready").status_code == 200
    check_answers(server.client.post("/v1/systemone", json=BODY))


def test_a_full_queue_gives_429_with_retry_after(tiny_dir, tmp_path):
    srv = Server(tmp_path, "--model", str(tiny_dir), "--max-queue", "2", "--max-batch-records", "1").wait_ready()
    try:
        heavy = {**BODY, "state": "long state " * 400}
        with ThreadPoolExecutor(24) as pool:
            results = list(pool.map(lambda _: srv.client.post("/v1/systemone", json=heavy), range(24)))
        statuses = {r.status_code for r in results}
        assert statuses <= {200, 429} and 429 in statuses and 200 in statuses
        refused = next(r for r in results if r.status_code == 429)
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["detail"]["error_type"] == "rate_limit_error"
    finally:
        assert srv.stop() == 0


def test_tiny_default_is_announced_in_the_log_and_in_models(tmp_path):
    srv = Server(tmp_path, env={"OMNI_CACHE_DIR": str(tmp_path / "cache")}).wait_ready()
    try:
        card = srv.client.get("/v1/models").json()["models"][0]
        assert card["tiny_default"] is True and "demo" in card["description"]
        check_answers(srv.client.post("/v1/systemone", json=BODY))
        assert "tiny" in srv.log().lower()
    finally:
        assert srv.stop() == 0


def metric(srv: Server, line_prefix: str) -> float:
    lines = [line for line in srv.client.get("/metrics").text.splitlines() if line.startswith(line_prefix + " ")]
    return float(lines[0].split()[-1]) if lines else 0.0


def admitted(srv: Server) -> float:
    done = metric(srv, 'omni_requests_total{route="/v1/systemone",status="200"}')
    return done + metric(srv, "omni_requests_in_flight")


def test_sigterm_drains_requests_in_flight(tiny_dir, tmp_path):
    srv = Server(tmp_path, "--model", str(tiny_dir), "--max-batch-records", "2").wait_ready()
    heavy = {**BODY, "state": "long state " * 400,
             "questions": {f"q{i}": {"type": "noul", "instructions": f"Question {i}?"} for i in range(32)}}
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(srv.client.post, "/v1/systemone", json=heavy) for _ in range(8)]
        end = time.monotonic() + 60
        while admitted(srv) < 8 and time.monotonic() < end:
            time.sleep(0.002)  # every request has reached the engine...
        in_flight = metric(srv, "omni_requests_in_flight")
        srv.proc.send_signal(signal.SIGTERM)  # ...and some are still being computed
        results = [f.result(120) for f in futures]
    assert in_flight > 0
    assert srv.proc.wait(120) == 0
    assert [r.status_code for r in results] == [200] * 8
    assert "draining" in srv.log()
    srv.stop()
