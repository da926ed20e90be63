"""line: `omni line` on the inspection demo (issue 35) — trigger → result on the sink against the same request sent
straight over HTTP, and the units per minute it sustains within its deadline; on this CPU, one run.

Set-up: a real MQTT broker (Debian's mosquitto, `fixtures.mosquitto`), a pool of distinct demo units (photo + hum +
fan clip, `fixtures.inspection`, written as `examples/line/make_units.py` writes them), one `omni serve` and one
`omni line` (MQTT source and sink, the model in its process), both on the embedded demo checkpoint with one torch
thread and the media and prefix caches off (a line never sees the same media twice; the pool is reused).

1. **Latency**, one unit at a time, the two paths interleaved unit by unit (the order alternating): `http` — a
   multipart `POST /v1/systemone` of the unit's three files with the template, timed from the request's first byte to
   the parsed answer; `line` — an MQTT trigger `{"unit_id", "files"}` published (QoS 1) and timed until the unit's
   result arrives on the result topic (QoS 1). p50 / p99 of each, and the ratio of the p50s (goal: <= 1.1).
2. **Throughput**: triggers at a steady rate (units per minute) for `--step-s` seconds per step, the rate raised
   step by step; per step the share of units whose result is `timeout` (deadline `--deadline-ms`); the sustained
   rate is the last step whose miss rate is at most 1 %.

Prints JSON lines (`env`, `latency` per path, `ratio`, `step` per rate, `summary`). Not a test: nothing asserted.
Knows nothing of the line's internals: it talks MQTT and HTTP to the two processes.

    .venv/bin/python benchmarks/line.py [--units 30] [--pool 12] [--deadline-ms 2000] [--rates 60,240,...] [--step-s 20] [--smoke]

A few minutes here. `--smoke`: 2 units per path, 2 short steps; its figures mean nothing.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import paho.mqtt.client as mqtt
from serving import OMNI, start_server, stop_server
from smoke import parse_with_smoke
from tqdm import tqdm

from fixtures.inspection import inspection_sample
from fixtures.mosquitto import Mosquitto

ROOT = Path(__file__).resolve().parents[1]
FILES = (("images", "unit.png"), ("audio", "hum.wav"), ("videos", "fan.mp4"))
SMOKE = {"units": 2, "pool": 2, "rates": "60,120", "step_s": 2.0, "warmup": 1}


def emit(event: str, **fields: Any) -> dict:
    line = {"event": event, **fields}
    print(json.dumps(line), flush=True)
    return line


def write_pool(root: Path, count: int) -> list[str]:
    """`count` distinct demo units as folders under `root`; their folder names."""
    names = []
    for i in range(count):
        body, media = inspection_sample(35, i)
        folder = root / f"pool{i:03d}"
        folder.mkdir(parents=True)
        for slot, name in FILES:
            (folder / name).write_bytes(media[Path(body[slot][0]).name])
        names.append(folder.name)
    return names


def write_config(work: Path, broker_port: int, deadline_ms: int) -> Path:
    config = work / "line.toml"
    config.write_text(f"""
[line]
name = "bench"
root = "units"
ledger = "ledger.jsonl"
deadline_ms = {deadline_ms}
max_queued_units = 256
max_in_flight = 8

[request]
template = "{ROOT / 'examples' / 'inspection.json'}"

[model]
torch_threads = 1
media_cache_mb = 0
prefix_cache_mb = 0

[status]
listen = ""

[[source]]
type = "mqtt"
port = {broker_port}
topic = "bench/ready"

[[sink]]
type = "mqtt"
port = {broker_port}
topic_prefix = "bench/results"
""")
    return config


class Results:
    """The result topic: unit id -> (arrival perf_counter, payload)."""

    def __init__(self, port: int):
        self.arrived: dict[str, tuple[float, dict]] = {}
        self.events: queue.Queue[str] = queue.Queue()
        self.lock = threading.Lock()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-results")
        self.client.on_connect = lambda c, *_: c.subscribe("bench/results/#", qos=1)
        self.client.on_message = self._message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _message(self, _client: Any, _userdata: Any, message: Any) -> None:
        payload = json.loads(message.payload)
        with self.lock:
            self.arrived.setdefault(payload["unit_id"], (time.perf_counter(), payload))
        self.events.put(payload["unit_id"])

    def wait(self, unit_id: str, timeout_s: float = 120) -> tuple[float, dict]:
        ends = time.monotonic() + timeout_s
        while time.monotonic() < ends:
            with self.lock:
                if unit_id in self.arrived:
                    return self.arrived[unit_id]
            with contextlib.suppress(queue.Empty):
                self.events.get(timeout=0.5)
        raise TimeoutError(f"no result for {unit_id} within {timeout_s} s")


def trigger(plc: mqtt.Client, unit_id: str, folder: str) -> float:
    started = time.perf_counter()
    body = {"unit_id": unit_id, "files": [f"{folder}/{name}" for _, name in FILES]}
    plc.publish("bench/ready", json.dumps(body), qos=1)
    return started


def http_once(client: httpx.Client, template: bytes, units: Path, folder: str) -> float:
    files: list[tuple[str, tuple[str | None, bytes, str]]] = [("request", (None, template, "application/json"))]
    files += [(slot, (name, (units / folder / name).read_bytes(), "application/octet-stream")) for slot, name in FILES]
    started = time.perf_counter()
    response = client.post("/v1/systemone", files=files)
    response.raise_for_status()
    response.json()
    return time.perf_counter() - started


def wait_until_up(plc: mqtt.Client, results: Results, line: subprocess.Popen, folder: str, log: Path) -> None:
    """The line is up once it answers a unit (its model loaded and warm). The broker keeps triggers for the line only
    from its first subscription on: the first one is published again until it is answered (the line decides a unit
    id once, however often it is triggered)."""
    ends = time.monotonic() + 300
    while "up" not in results.arrived:
        if time.monotonic() > ends or line.poll() is not None:
            raise RuntimeError(f"omni line did not answer: {log.read_text()[-3000:]}")
        trigger(plc, "up", folder)
        with contextlib.suppress(TimeoutError):
            results.wait("up", timeout_s=2)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="omni line: trigger to result vs HTTP; units per minute")
    parser.add_argument("--units", type=int, default=30, help="units per path for the latency comparison")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--pool", type=int, default=12, help="distinct demo units written (reused)")
    parser.add_argument("--deadline-ms", type=int, default=2000)
    parser.add_argument("--rates", default="60,240,480,720,960,1200,1500,1800,2400,3000,3600,4800",
                        help="units per minute, one step each, until the miss rate passes 1 %%")
    parser.add_argument("--step-s", type=float, default=20.0,
                        help="seconds per step: long enough that the queue cannot absorb a rate the model cannot hold")
    args = parse_with_smoke(parser, SMOKE, argv)
    work = Path(tempfile.mkdtemp(prefix="omni-line-bench-"))
    broker = Mosquitto(work / "broker").start()
    pool = write_pool(work / "units", args.pool)
    template = (ROOT / "examples" / "inspection.json").read_bytes()
    emit("env", smoke=args.smoke, units=args.units, pool=args.pool, deadline_ms=args.deadline_ms,
         cpus=os.cpu_count(), load_avg=os.getloadavg()[0])
    common = ["--torch-threads", "1", "--media-cache-mb", "0", "--prefix-cache-mb", "0"]
    server, url = start_server(common, work / "serve.log")
    line_log = (work / "line.log").open("wb")
    line = subprocess.Popen([sys.executable, "-c", OMNI, "line", str(write_config(work, broker.port,
                                                                                  args.deadline_ms)), "--quiet"],
                            cwd=ROOT, stdout=line_log, stderr=subprocess.STDOUT)
    results = Results(broker.port)
    plc = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-plc")
    plc.connect("127.0.0.1", broker.port)
    plc.loop_start()
    client = httpx.Client(base_url=url, timeout=120, trust_env=False)
    try:
        wait_until_up(plc, results, line, pool[0], work / "line.log")
        for i in range(args.warmup):
            folder = pool[i % len(pool)]
            trigger(plc, f"warm{i}", folder)
            results.wait(f"warm{i}", timeout_s=300)
            http_once(client, template, work / "units", folder)
        latencies: dict[str, list[float]] = {"http": [], "line": []}
        for i in tqdm(range(args.units), desc="latency", file=sys.stderr, disable=args.smoke):
            folder = pool[i % len(pool)]
            for way in (("http", "line") if i % 2 == 0 else ("line", "http")):
                if way == "http":
                    latencies["http"].append(http_once(client, template, work / "units", folder))
                else:
                    started = trigger(plc, f"lat{i}", folder)
                    arrived, payload = results.wait(f"lat{i}")
                    if payload["outcome"] in ("error", "timeout", "overload"):
                        raise RuntimeError(f"unit lat{i}: {payload['outcome']} {payload.get('error')}")
                    latencies["line"].append(arrived - started)
        for way, values in latencies.items():
            emit("latency", path=way, n=len(values), p50_ms=round(1000 * statistics.median(values), 2),
                 p99_ms=round(1000 * pct(values, 0.99), 2), mean_ms=round(1000 * statistics.fmean(values), 2))
        ratio = statistics.median(latencies["line"]) / statistics.median(latencies["http"])
        emit("ratio", line_over_http_p50=round(ratio, 3), goal=1.1, meets_goal=ratio <= 1.1)
        sustained = None
        for rate in (int(r) for r in args.rates.split(",")):
            interval_s = 60.0 / rate
            ids = [f"r{rate}-{i}" for i in range(max(2, round(rate * args.step_s / 60)))]
            start = time.perf_counter()
            for i, unit_id in enumerate(ids):
                time.sleep(max(0.0, start + i * interval_s - time.perf_counter()))
                trigger(plc, unit_id, pool[i % len(pool)])
            outcomes = [results.wait(unit_id, timeout_s=120 + args.deadline_ms / 1000)[1]["outcome"]
                        for unit_id in ids]
            misses = sum(outcome in ("timeout", "overload") for outcome in outcomes)
            emit("step", units_per_minute=rate, units=len(ids), deadline_misses=misses,
                 miss_rate=round(misses / len(ids), 4), errors=outcomes.count("error"))
            if misses / len(ids) > 0.01:
                break
            sustained = rate
        emit("summary", line_over_http_p50=round(ratio, 3), sustained_units_per_minute=sustained,
             deadline_ms=args.deadline_ms, smoke=args.smoke)
    finally:
        client.close()
        plc.loop_stop()
        results.client.loop_stop()
        line.terminate()
        line.wait(60)
        stop_server(server)
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
