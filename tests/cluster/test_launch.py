"""`omni serve --ray` as a user runs it (a subprocess with its own local Ray instance): it announces the address,
answers, drains on SIGTERM (every request in flight gets its answer, then exit 0, no Ray process left), `--autoscale`
adds a replica under load, and a model that cannot load is reported with exit 1 instead of being retried forever."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.cluster.conftest import QUESTIONS, free_port, inspection_files, metric_values, require_ray, run_async

ROOT = Path(__file__).resolve().parents[2]


def omni_serve_ray(*args: str, log: Path) -> subprocess.Popen:
    require_ray()
    command = [sys.executable, "-m", "api.cli.main", "serve", "--ray", "--torch-threads", "1", *args]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=ROOT, env=env)


def wait_ready(base: str, process: subprocess.Popen, log: Path, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        try:
            if httpx.get(base + "/ready", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail("omni serve --ray never became ready:\n" + log.read_text(errors="replace")[-3000:])


def test_sigterm_drains_requests_in_flight_then_exits_0(tiny_dir, tmp_path):
    port, log = free_port(), tmp_path / "serve.log"
    process = omni_serve_ray("--model", str(tiny_dir), "--autoscale", "1:2", "--port", str(port), log=log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, process, log)
        announced = f"omni serve --ray on http://127.0.0.1:{port} with autoscaling 1:2 engine replicas"
        deadline = time.monotonic() + 60       # the line comes once `serve.run` returns, about when /ready does
        while announced not in log.read_text(errors="replace"):
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.5)

        async def burst_then_sigterm():
            async with httpx.AsyncClient(base_url=base, timeout=120) as client:
                sending = [asyncio.ensure_future(client.post("/v1/systemone", files=inspection_files()))
                           for _ in range(6)]
                await asyncio.sleep(0.5)
                process.send_signal(signal.SIGTERM)
                return await asyncio.gather(*sending, return_exceptions=True)

        replies = run_async(burst_then_sigterm())
        assert [getattr(r, "status_code", repr(r)) for r in replies] == [200] * 6
        assert all(r.json()["usage"]["input_tokens"] == 991 for r in replies)
        assert process.wait(timeout=120) == 0
        text = log.read_text(errors="replace")
        assert "draining" in text and "Traceback" not in text
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_model_that_cannot_load_is_reported_with_exit_1(tmp_path):
    port, log = free_port(), tmp_path / "serve.log"
    process = omni_serve_ray("--model", str(tmp_path / "no-such-checkpoint"), "--replica-load-retries", "1",
                             "--port", str(port), log=log)
    try:
        assert process.wait(timeout=300) == 1
        text = log.read_text(errors="replace")
        assert "the application failed to start" in text and "no-such-checkpoint" in text
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

PREFIX_BUDGET = 'omni_cache_budget_bytes{cache="prefix"}'   # summed over the replicas heard from in the last minute


def test_autoscale_adds_a_replica_under_load(tiny_dir, tmp_path):
    """`--autoscale 1:2` starts with one engine replica; load above the target (2 x max batch records in flight per
    replica) makes Ray start the second, which then answers too (the summed budget in /metrics doubles); no request
    fails meanwhile."""
    port, log = free_port(), tmp_path / "serve.log"
    process = omni_serve_ray("--model", str(tiny_dir), "--autoscale", "1:2", "--max-batch-records", "1",
                             "--port", str(port), log=log)
    base = f"http://127.0.0.1:{port}"

    async def load_until_two_replicas(deadline_s: float) -> tuple[float, float, list[int]]:
        statuses: list[int] = []
        stop = asyncio.Event()
        async with httpx.AsyncClient(base_url=base, timeout=120) as client:
            first = await client.post("/v1/systemone", json={"state": "first", "questions": QUESTIONS})
            assert first.status_code == 200, first.text
            one = metric_values((await client.get("/metrics")).text)[PREFIX_BUDGET]

            async def sender(k: int) -> None:
                i = 0
                while not stop.is_set():
                    reply = await client.post("/v1/systemone", json={"state": f"load {k}.{i}", "questions": QUESTIONS})
                    statuses.append(reply.status_code)
                    i += 1

            senders = [asyncio.ensure_future(sender(k)) for k in range(12)]
            started, seen = time.monotonic(), one
            while time.monotonic() - started < deadline_s and seen < 2 * one:
                await asyncio.sleep(2)
                seen = metric_values((await client.get("/metrics")).text)[PREFIX_BUDGET]
            stop.set()
            await asyncio.gather(*senders)
        return one, seen, statuses

    try:
        wait_ready(base, process, log)
        one, seen, statuses = run_async(load_until_two_replicas(deadline_s=150))
        assert one > 0 and seen == 2 * one, log.read_text(errors="replace")[-3000:]
        assert statuses and set(statuses) == {200}
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
