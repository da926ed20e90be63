"""audit: what an audit record and a decision log cost — a small request's time with and without its record, and
`omni serve` throughput with the decision log on vs off, measured in one run.

1. The record (in-process, the embedded demo checkpoint, one torch thread): a small text request (a two-sentence
   state, three questions) decided by `DecisionEngine.decide` and turned into its response body (`to_wire()` +
   `json.dumps`, as the HTTP edge does), without `x_audit` and with it, alternating request by request; the median
   of the paired ratios on / off (and each mode's median and best milliseconds). The goal is <= 1.05.
2. The log (HTTP): two loopback `omni serve` processes side by side — `off` as is, `on` with
   `--decision-log DIR --audit always` (every decision logged with its media, every response carrying its record) —
   each sent the same request mix (text, a JPEG photo, a WAV clip: load.py's bodies) by `--concurrency` clients, in
   rounds that alternate which server goes first; requests per second and latency per server, the ratio on / off,
   and what the log wrote (its /metrics counters).
Prints JSON lines and a summary. What it must not know: the engine's or the log's internals (it uses the public
engine, the server's flags, its responses and /metrics).

    .venv/bin/python benchmarks/audit.py [--rounds 6] [--requests 40] [--http-requests 160] [--concurrency 8]
                                         [--round-requests 40] [--smoke]

About two minutes here. `--smoke`: the same code path at tiny sizes (2 rounds of 4, 16 HTTP requests); its figures
mean nothing.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
from load import QUESTIONS, request_bodies, run_load, summarize
from serving import start_servers, stop_server
from smoke import parse_with_smoke

SMOKE = {"rounds": 2, "requests": 4, "http_requests": 16, "concurrency": 4, "round_requests": 8}
SMALL_STATE = "Ticket 1042: the unit rattles since the last service visit. The customer asks for a technician."


def emit(kind: str, **fields: object) -> None:
    print(json.dumps({"event": kind, **fields}), flush=True)


def record_cost(rounds: int, requests: int) -> dict:
    """Part 1: per-request ms of decide + response body, without and with the audit record. The two alternate request
    by request (off, on, on, off, ...), so both see the same machine; the figure is the median of the paired ratios
    (each `on` over the `off` beside it), with the medians and best times of each mode beside it."""
    import torch

    from omni.contract.config import EngineConfig
    from omni.contract.request import parse_request
    from omni.serve.engine import DecisionEngine

    torch.set_num_threads(1)
    engine = DecisionEngine(EngineConfig()).load()
    bodies = {mode: {"state": SMALL_STATE, "questions": QUESTIONS, **({"x_audit": True} if mode == "on" else {})}
              for mode in ("off", "on")}
    requests_by_mode = {mode: parse_request(body, engine.config) for mode, body in bodies.items()}

    def one(mode: str) -> float:
        started = time.perf_counter()
        body = json.dumps(engine.decide(requests_by_mode[mode]).to_wire())
        elapsed_ms = (time.perf_counter() - started) * 1e3
        assert ('"x_audit"' in body) is (mode == "on")
        return elapsed_ms

    for mode in ("off", "on", "off", "on"):              # warm-up, not counted
        one(mode)
    times: dict[str, list[float]] = {"off": [], "on": []}
    ratios = []
    for n in range(rounds * requests):
        pair = {mode: one(mode) for mode in (("off", "on") if n % 2 == 0 else ("on", "off"))}
        for mode, ms in pair.items():
            times[mode].append(ms)
        ratios.append(pair["on"] / pair["off"])
    out: dict = {mode: {"best_ms": round(min(ms), 3), "median_ms": round(statistics.median(ms), 3)}
                 for mode, ms in times.items()}
    out["pairs"] = len(ratios)
    out["ratio_on_over_off_paired_median"] = round(statistics.median(ratios), 4)
    out["ratio_on_over_off_median"] = round(out["on"]["median_ms"] / out["off"]["median_ms"], 4)
    out["ratio_on_over_off_best"] = round(out["on"]["best_ms"] / out["off"]["best_ms"], 4)
    out["added_ms_median"] = round(out["on"]["median_ms"] - out["off"]["median_ms"], 3)
    return out


def log_metrics(url: str) -> dict[str, float]:
    """The decision log's counters from /metrics."""
    text = httpx.get(url + "/metrics", timeout=30).text
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
            if line.startswith("omni_decision_log_")}


def log_cost(args: argparse.Namespace, work: Path) -> dict:
    """Part 2: the two servers under the same load, rounds alternating; per server rps and latency, and the ratio."""
    log_dir = work / "decisions"
    servers = start_servers({"off": (["--torch-threads", "1"], work / "off.log"),
                             "on": (["--torch-threads", "1", "--decision-log", str(log_dir), "--audit", "always"],
                                    work / "on.log")})
    urls = {mode: url for mode, (_, url) in servers.items()}
    bodies = request_bodies(["text", "image", "audio"], args.http_requests)
    data: dict[str, tuple[list[float], dict[int, int], float]] = {mode: ([], {}, 0.0) for mode in urls}
    try:
        for url in urls.values():
            asyncio.run(run_load(url, bodies[:2 * args.concurrency], args.concurrency))   # warm-up, not counted
        step = max(args.concurrency, args.round_requests)
        for n, start in enumerate(range(0, len(bodies), step)):
            for mode in (("off", "on") if n % 2 == 0 else ("on", "off")):
                latencies, statuses, wall = asyncio.run(run_load(urls[mode], bodies[start:start + step],
                                                                 args.concurrency))
                total = data[mode]
                counts = {code: total[1].get(code, 0) + statuses.get(code, 0) for code in {*total[1], *statuses}}
                data[mode] = (total[0] + latencies, counts, total[2] + wall)
        written = log_metrics(urls["on"])
    finally:
        for proc, _ in servers.values():
            stop_server(proc)
    out = {mode: summarize(latencies, Counter(statuses), wall, args.concurrency)
           for mode, (latencies, statuses, wall) in data.items()}
    segments = sorted((log_dir / "segments").glob("*.jsonl"))
    out["log"] = {"metrics": written, "segments": len(segments),
                  "records": sum(len(p.read_text().splitlines()) for p in segments),
                  "media_files": len(list((log_dir / "media").iterdir())),
                  "bytes": sum(p.stat().st_size for p in segments)}
    out["ratio_rps_on_over_off"] = round(out["on"]["throughput_rps"] / out["off"]["throughput_rps"], 4)
    out["ratio_p50_on_over_off"] = round(out["on"]["p50_ms"] / out["off"]["p50_ms"], 4)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="record-cost rounds (requests x rounds pairs)")
    parser.add_argument("--requests", type=int, default=40, help="request pairs (off, on) per record-cost round")
    parser.add_argument("--http-requests", type=int, default=160, help="requests per server (after a warm-up)")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent HTTP clients")
    parser.add_argument("--round-requests", type=int, default=40, help="HTTP requests per server per round")
    return parse_with_smoke(parser, SMOKE, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    emit("env", python=sys.version.split()[0], cpus=os.cpu_count(), loadavg_1m=round(os.getloadavg()[0], 2),
         smoke=args.smoke, rounds=args.rounds, requests=args.requests, http_requests=args.http_requests,
         concurrency=args.concurrency)
    record = record_cost(args.rounds, args.requests)
    emit("record_cost", **record)
    with tempfile.TemporaryDirectory(prefix="omni-audit-bench-") as tmp:
        log = log_cost(args, Path(tmp))
    emit("log_cost", **log)
    failed = any(set(log[mode]["statuses"]) - {200, "200"} for mode in ("off", "on"))
    emit("summary", record_ratio=record["ratio_on_over_off_paired_median"], record_goal=1.05,
         log_ratio_rps=log["ratio_rps_on_over_off"], log_records=log["log"]["records"],
         log_dropped=log["log"]["metrics"].get('omni_decision_log_records_total{outcome="dropped"}', 0.0),
         loadavg_1m_end=round(os.getloadavg()[0], 2), p99_on_ms=log["on"]["p99_ms"],
         p99_off_ms=log["off"]["p99_ms"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
