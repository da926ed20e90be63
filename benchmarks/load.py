"""load: a bounded loopback load against `omni serve` (tiny model), micro-batching on vs off, and HTTP overhead.

Two `omni serve` processes run side by side in this run, on free 127.0.0.1 ports, with the same model: batching
ON (the shipped defaults: up to 8 records / 16k tokens, 5 ms max wait) and OFF (`--no-batching`). Both get the
same request list (default 400 requests, 16 in flight, a mix of text / image / audio System One requests in Clef
JSON form; `--mix` adds video; `--no-caches` turns the media and prefix caches off, so that every repeated photo,
clip and video is decoded again) after a warm-up, in rounds that alternate ON and OFF so load from other processes
on a shared machine hits both alike; printed per mode: p50 / p99 latency, throughput, status counts, and the ratios
on/off.
Then HTTP overhead for small requests: sequential small text requests to the OFF server from httpx and from the
standard library's http.client, and to the ON server from http.client, taking turns one by one with in-process
`DecisionEngine.decide` on the same checkpoint (median latency ratio per way, plus the server's own stages).

Last, the micro-batcher alone (no HTTP, no model): a simulated launch-bound device whose batch costs
`--sim-batch-ms` + `--sim-record-ms` per record (GPU-like: a batch of 8 costs little more than 1), same
load shape, batching on vs off — what the batching machinery buys where the forward is not compute-bound.

Prints JSON lines, then a summary. Not a test: nothing is asserted, figures depend on the machine.
What it must not know: engine internals (it talks HTTP and the public `decide`), the answers' meaning (random model).

    .venv/bin/python benchmarks/load.py [--requests 400] [--concurrency 16] [--mix text,image,audio[,video]]
                                        [--no-caches]
                                        [--model DIR|HUB_ID] [--overhead-requests 200] [--round-requests 100]
                                        [--sim-batch-ms 8] [--sim-record-ms 0.5] [--smoke]

About 40 s here. `--smoke`: the same code path at tiny sizes (24 requests, 4 in flight, 10 overhead rounds), to
check that it runs; its figures mean nothing.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
from serving import start_servers, stop_server
from smoke import parse_with_smoke

QUESTIONS = {"visible": {"type": "noul", "instructions": "Is the serial label visible?"},
             "team": {"type": "choice", "instructions": "Who handles it?", "criteria": {"hvac": None, "power": "P"}},
             "severity": {"type": "score", "instructions": "How severe?", "criteria": ["none", "minor", "major"]}}
MODES = {"batching_on": [], "batching_off": ["--no-batching"]}
SMALL = {"state": "Short ticket.", "questions": {"ok": {"type": "noul", "instructions": "Fine?"}}}
# --smoke: the same code path at tiny sizes (explicit flags still win)
SMOKE = {"requests": 24, "concurrency": 4, "overhead_requests": 10, "round_requests": 12}


def request_bodies(mix: list[str], n: int) -> list[dict]:
    """`n` System One bodies with QUESTIONS, cycling through the `mix` kinds (text; image, audio, video as data URLs)."""
    from fixtures.media import image_bytes, video_bytes, wav_bytes

    def url(mime: str, data: bytes) -> str:
        return f"data:{mime};base64,{base64.b64encode(data).decode()}"

    media = {"text": {}, "image": {"images": [url("image/jpeg", image_bytes("JPEG"))]},
             "audio": {"audio": [url("audio/wav", wav_bytes(1.0))]},
             "video": {"videos": [url("video/mp4", video_bytes(seconds=4.0, width=640, height=360))]}}
    return [{"model": "clef-omni", "state": f"Ticket {i}: the unit rattles since the last service visit.",
             "questions": QUESTIONS, **media[mix[i % len(mix)]]} for i in range(n)]


async def run_load(url: str, bodies: list[dict], concurrency: int) -> tuple[list[float], Counter, float]:
    """Send every body with at most `concurrency` in flight -> (latencies, status counts, wall seconds)."""
    latencies: list[float] = []
    statuses: Counter = Counter()
    queue: asyncio.Queue = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(json.dumps(body).encode())
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        async def worker():
            while not queue.empty():
                payload = queue.get_nowait()
                t0 = time.perf_counter()
                r = await client.post("/v1/systemone", content=payload, headers={"Content-Type": "application/json"})
                latencies.append(time.perf_counter() - t0)
                statuses[r.status_code] += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return latencies, statuses, time.perf_counter() - started


def summarize(latencies: list[float], statuses: Counter, wall_s: float, concurrency: int) -> dict:
    """One mode's JSON line: request count, wall time, throughput, p50 / p99 latency, status counts."""
    return {"requests": len(latencies), "concurrency": concurrency, "wall_s": round(wall_s, 3),
            "throughput_rps": round(len(latencies) / wall_s, 2), "p50_ms": round(quantile(latencies, 0.5) * 1e3, 2),
            "p99_ms": round(quantile(latencies, 0.99) * 1e3, 2), "statuses": dict(statuses)}


def quantile(values: list[float], q: float) -> float:
    """The `q` quantile of `values` (nearest rank, no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def overhead(urls: dict[str, str], model: str | None, body: dict, n: int, torch_threads: int = 1) -> dict:
    """Median latency of one small request over HTTP vs in-process decide, the ways taking turns one by one.

    To the batching OFF server, two clients, each on one keep-alive connection: httpx (what the load above uses;
    about 1.5 ms of its own per request here) and the standard library's http.client (a lean client, closer to what
    the service itself adds). Also http.client to the batching ON server (the shipped default), where a lone
    request must not wait for company. Each gets its own ratio against the same in-process runs.
    """
    import http.client

    from omni.contract.config import EngineConfig
    from omni.contract.request import parse_request
    from omni.serve.engine import DecisionEngine

    engine = DecisionEngine(EngineConfig(model_path=model, torch_threads=torch_threads)).load()
    payload = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    lean = {mode: http.client.HTTPConnection(url.removeprefix("http://"), timeout=60) for mode, url in urls.items()}

    def stdlib_post(mode: str) -> tuple[int, str, str]:
        lean[mode].request("POST", "/v1/systemone", body=payload, headers=headers)
        response = lean[mode].getresponse()
        return response.status, response.read().decode(), response.getheader("server-timing", "")

    stages: dict[str, list[dict[str, float]]] = {"stdlib": [], "stdlib_batching_on": []}
    with httpx.Client(base_url=urls["batching_off"], timeout=60) as client:
        def httpx_post() -> tuple[int, str, str]:
            r = client.post("/v1/systemone", content=payload, headers=headers)
            return r.status_code, r.text, r.headers.get("server-timing", "")

        calls = {"httpx": httpx_post, "stdlib": lambda: stdlib_post("batching_off"),
                 "stdlib_batching_on": lambda: stdlib_post("batching_on"),
                 "in_process": lambda: (200, "", engine.decide(parse_request(body, engine.config)))}
        times = take_turns(calls, n, stages)
    for connection in lean.values():
        connection.close()
    p50 = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    out = {"requests": n, **{f"{name}_p50_ms": round(ms, 2) for name, ms in p50.items()},
           **{f"server_stages_p50_ms_{name}": {k: round(statistics.median(s[k] for s in rows), 2) for k in rows[0]}
              for name, rows in stages.items()}}
    for name in ("httpx", "stdlib", "stdlib_batching_on"):
        out[f"ratio_{name}"] = round(p50[name] / p50["in_process"], 2)
    return out


def take_turns(calls: dict, n: int, stages: dict[str, list[dict[str, float]]]) -> dict[str, list[float]]:
    """Call every way in turn, `n` + 5 rounds (the first 5 uncounted) -> seconds per call, by way.

    Each call returns (status, text, Server-Timing header); the header's stages go into `stages[name]` for the ways
    named there.
    """
    times: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for i in range(n + 5):  # the first rounds warm caches on both sides
        # rotate the order, so that each way follows each other way equally often
        for name in names[i % len(names):] + names[:i % len(names)]:
            t0 = time.perf_counter()
            status, text, timing = calls[name]()
            elapsed = time.perf_counter() - t0
            if status != 200:
                raise SystemExit(f"overhead request failed: {status} {text}")
            if i >= 5:
                times[name].append(elapsed)
                if name in stages:
                    stages[name].append(server_timing(timing))
    return times


def server_timing(header: str) -> dict[str, float]:
    """`Server-Timing: parse;dur=0.08, forward;dur=5.2, …` → {"parse": 0.08, "forward": 5.2, …} (entries without a
    duration, such as `prefix-cache;desc="hit"`, are left out)."""
    parts = (item.strip().split(";dur=") for item in header.split(",") if ";dur=" in item)
    return {name: float(ms) for name, ms in parts}


def simulated_batcher(requests: int, concurrency: int, batch_ms: float, record_ms: float) -> dict:
    """MicroBatcher throughput with a sleep() 'device': `concurrency` submitters, each waiting for its answer."""
    from concurrent.futures import ThreadPoolExecutor

    from omni.serve.batcher import MicroBatcher

    def device(items: list) -> list:
        time.sleep((batch_ms + record_ms * len(items)) / 1000)
        return items

    out = {}
    for mode, records in (("batching_on", 8), ("batching_off", 1)):
        batcher = MicroBatcher(device, lambda item: 1, max_batch_records=records, max_batch_tokens=10**6,
                               max_wait_ms=5, max_queue=requests, wait_only_while_expecting=True)  # as served
        batcher.start()
        latencies: list[float] = []

        def client(n: int, batcher: MicroBatcher = batcher, latencies: list[float] = latencies) -> None:
            for i in range(n):
                t0 = time.perf_counter()
                batcher.submit(i).result()
                latencies.append(time.perf_counter() - t0)

        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(client, [requests // concurrency] * concurrency))
        wall = time.perf_counter() - started
        batcher.stop()
        out[mode] = {"throughput_rps": round(len(latencies) / wall, 1),
                     "p50_ms": round(quantile(latencies, .5) * 1e3, 2),
                     "p99_ms": round(quantile(latencies, .99) * 1e3, 2)}
    out["throughput_ratio_on_off"] = round(out["batching_on"]["throughput_rps"]
                                           / out["batching_off"]["throughput_rps"], 2)
    return {"device_ms": f"{batch_ms} + {record_ms} per record", **out}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; with --smoke the SMOKE sizes are the defaults."""
    parser = argparse.ArgumentParser(description="loopback load against omni serve: batching on/off, HTTP overhead")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--mix", default="text,image,audio",
                        help="request kinds, cycled: text, image, audio, video (a 4 s 640x360 H.264 + AAC clip)")
    parser.add_argument("--no-caches", action="store_true", help="serve with the media and prefix caches off")
    parser.add_argument("--model", default=None, help="default: the embedded tiny checkpoint")
    parser.add_argument("--overhead-requests", type=int, default=200)
    parser.add_argument("--round-requests", type=int, default=100, help="requests per alternating on/off round")
    parser.add_argument("--sim-batch-ms", type=float, default=8.0)
    parser.add_argument("--sim-record-ms", type=float, default=0.5)
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch intra-op threads per server (two servers + the client share this machine)")
    return parse_with_smoke(parser, SMOKE, argv)


def run_rounds(urls: dict[str, str], bodies: list[dict], concurrency: int,
               round_requests: int) -> dict[str, tuple[list[float], Counter, float]]:
    """Warm each server up, then send `bodies` in rounds whose ON / OFF order alternates.

    Returns per mode (latencies, status counts, wall seconds), summed over the rounds.
    """
    data = {mode: ([], Counter(), 0.0) for mode in MODES}
    for url in urls.values():
        asyncio.run(run_load(url, bodies[: 2 * concurrency], concurrency))  # warm-up, not counted
    step = max(concurrency, round_requests)
    for n, start in enumerate(range(0, len(bodies), step)):
        order = list(MODES) if n % 2 == 0 else list(reversed(MODES))
        for mode in order:
            latencies, statuses, wall = asyncio.run(run_load(urls[mode], bodies[start:start + step], concurrency))
            total = data[mode]
            data[mode] = (total[0] + latencies, total[1] + statuses, total[2] + wall)
    return data


def measure_servers(args: argparse.Namespace, bodies: list[dict], logs: Path) -> tuple[dict[str, dict], dict]:
    """Start both servers, run the load rounds and the small-request overhead, stop them -> (per mode, overhead)."""
    model_args = (["--model", args.model] if args.model else []) + ["--torch-threads", str(args.torch_threads)]
    if args.no_caches:
        model_args += ["--media-cache-mb", "0", "--prefix-cache-mb", "0"]
    servers = start_servers({mode: (model_args + mode_args, logs / f"{mode}.log") for mode, mode_args in MODES.items()})
    urls = {mode: url for mode, (_, url) in servers.items()}
    try:
        data = run_rounds(urls, bodies, args.concurrency, args.round_requests)
        over = overhead(urls, args.model, SMALL, args.overhead_requests, args.torch_threads)
    finally:
        for proc, _ in servers.values():
            stop_server(proc)
    return {mode: summarize(*data[mode], args.concurrency) for mode in MODES}, over


def summary(results: dict[str, dict], over: dict, simulated: dict) -> dict:
    """The ratios on / off (load), HTTP / in-process (overhead) and on / off (batcher alone)."""
    on, off = results["batching_on"], results["batching_off"]
    return {"throughput_ratio_on_off": round(on["throughput_rps"] / off["throughput_rps"], 2),
            "p50_ratio_on_off": round(on["p50_ms"] / off["p50_ms"], 2),
            "p99_ratio_on_off": round(on["p99_ms"] / off["p99_ms"], 2),
            "http_overhead_ratio_httpx": over["ratio_httpx"], "http_overhead_ratio_stdlib": over["ratio_stdlib"],
            "http_overhead_ratio_stdlib_batching_on": over["ratio_stdlib_batching_on"],
            "batcher_only_throughput_ratio_on_off": simulated["throughput_ratio_on_off"],
            "loadavg_1m_after": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    """Run the load, the overhead and the simulated batcher; print their JSON lines; 1 if any request failed."""
    args = parse_args(argv)
    mix = [m.strip() for m in args.mix.split(",") if m.strip()]
    bodies = request_bodies(mix, args.requests)
    env = {"python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine(),
           "mix": mix, "model": args.model or "tiny default", "loadavg_1m": round(os.getloadavg()[0], 2),
           "smoke": args.smoke}
    print(json.dumps({"env": env}))
    logs = Path(tempfile.mkdtemp(prefix="omni-load-"))
    results, over = measure_servers(args, bodies, logs)
    for mode, result in results.items():
        print(json.dumps({"mode": mode, **result}))
    print(json.dumps({"overhead_small_requests": over}))
    simulated = simulated_batcher(args.requests, args.concurrency, args.sim_batch_ms, args.sim_record_ms)
    print(json.dumps({"batcher_simulated_device": simulated}))
    print(json.dumps({"summary": summary(results, over, simulated)}))
    errors = {m: {s: c for s, c in r["statuses"].items() if s != 200} for m, r in results.items()}
    if any(errors.values()):
        print(json.dumps({"non_200": errors, "server_logs": str(logs)}))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
