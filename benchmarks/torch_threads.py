"""torch_threads: `omni serve`'s default torch threads against `--torch-threads 1` and against every core (torch's own
default, what `--torch-threads 0` meant before issue 31), on an idle machine and beside one busy process.

Three `omni serve` processes on loopback, one per setting, same checkpoint (default: the embedded tiny one), loaded
together. Each condition (idle; then with one `python -c 'while True: pass'` process beside them) sends `--requests`
sequential text requests to each server in turn (A, B, C, B, C, A, C, A, B, ...: one request in flight at a time,
so load from other processes on a shared machine hits the three alike). Every request has a state of its own, so no prefix
cache answers it. The servers log at info level, and the `torch threads: N (...)` line each one writes at startup
says what the default chose here.

Prints a JSON line per (condition, setting): p50 / p95 / mean ms and the ratio of its p50 to `--torch-threads 1`'s
in the same condition, then a markdown table. Not a test: nothing is asserted; figures depend on the machine.
What it must not know: the engine's internals (it talks HTTP and reads the servers' logs).

    .venv/bin/python benchmarks/torch_threads.py [--requests 60] [--warm 5] [--model DIR] [--no-busy] [--smoke]

`--smoke`: 4 requests per server and condition after 1 warm-up, to check that it runs; its figures mean nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from serving import start_servers, stop_server
from smoke import parse_with_smoke

QUESTIONS = {"visible": {"type": "noul", "instructions": "Is the serial label visible?"},
             "team": {"type": "choice", "instructions": "Who handles it?", "criteria": {"hvac": None, "power": "P"}},
             "severity": {"type": "score", "instructions": "How severe?", "criteria": ["none", "minor", "major"]}}
BUSY = "while True: pass"
THREADS_LINE = re.compile(r"torch threads: (\d+) \((.*)\)")
SMOKE = {"requests": 4, "warm": 1}


def settings() -> dict[str, list[str]]:
    """Name -> the serve flags of each setting compared."""
    cores = os.cpu_count() or 1
    return {"default": [], "--torch-threads 1": ["--torch-threads", "1"],
            f"--torch-threads {cores} (every core)": ["--torch-threads", str(cores)]}


def body(n: int) -> bytes:
    return json.dumps({"state": f"Ticket {n}: the unit on line {n % 7} rattles since the service visit of week "
                                f"{n % 52}; the label may be worn.", "questions": QUESTIONS}).encode()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def sequential(urls: dict[str, str], requests: int, offset: int) -> dict[str, list[float]]:
    """`requests` requests to each server, in turn, one in flight at a time -> ms per request per server. The order
    rotates from round to round, so each server follows each other one alike (idle OpenMP threads of the server
    before spin for a while after its request)."""
    times: dict[str, list[float]] = {name: [] for name in urls}
    names = list(urls)
    with httpx.Client(timeout=300) as client:
        for i in range(requests):
            for name in names[i % len(names):] + names[:i % len(names)]:
                url = urls[name]
                started = time.perf_counter()
                r = client.post(url + "/v1/systemone", content=body(offset + i),
                                headers={"Content-Type": "application/json"})
                elapsed = (time.perf_counter() - started) * 1e3
                if r.status_code != 200:
                    raise SystemExit(f"{name}: HTTP {r.status_code}: {r.text[:300]}")
                times[name].append(elapsed)
    return times


def chosen_threads(log_path: Path) -> tuple[int | None, str]:
    """The `torch threads: N (why)` line a server logged at startup."""
    found = THREADS_LINE.search(log_path.read_text(encoding="utf-8", errors="replace"))
    return (int(found.group(1)), found.group(2)) if found else (None, "not logged")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="omni serve: default torch threads vs 1 vs every core")
    parser.add_argument("--requests", type=int, default=60, help="sequential requests per server and condition")
    parser.add_argument("--warm", type=int, default=5, help="warm-up requests per server (not counted)")
    parser.add_argument("--model", default=None, help="default: the embedded tiny checkpoint")
    parser.add_argument("--no-busy", action="store_true", help="skip the condition with a busy process beside")
    return parse_with_smoke(parser, SMOKE, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(json.dumps({"env": {"python": platform.python_version(), "cpus": os.cpu_count(),
                              "usable_cpus": len(os.sched_getaffinity(0)), "requests": args.requests,
                              "model": args.model or "tiny default", "loadavg_1m": round(os.getloadavg()[0], 2),
                              "smoke": args.smoke}}))
    work = Path(tempfile.mkdtemp(prefix="omni-threads-bench-"))
    model = ["--model", args.model] if args.model else []
    names = list(settings())
    specs = {name: ([*model, *flags, "--log-level", "info"], work / f"serve-{i}.log")
             for i, (name, flags) in enumerate(settings().items())}
    servers = start_servers(specs)
    rows = []
    try:
        urls = {name: url for name, (_, url) in servers.items()}
        threads = {name: chosen_threads(specs[name][1]) for name in names}
        sequential(urls, args.warm, offset=-args.warm)
        conditions = ["idle"] + ([] if args.no_busy else ["beside one busy process"])
        for c, condition in enumerate(conditions):
            busy = subprocess.Popen([sys.executable, "-c", BUSY]) if condition != "idle" else None
            try:
                times = sequential(urls, args.requests, offset=(c + 1) * 100_000)
            finally:
                if busy is not None:
                    busy.kill()
                    busy.wait()
            base = statistics.median(times["--torch-threads 1"])
            for name in names:
                ms = times[name]
                row = {"result": "torch_threads", "condition": condition, "setting": name,
                       "torch_threads": threads[name][0], "why": threads[name][1], "requests": len(ms),
                       "p50_ms": round(statistics.median(ms), 1), "p95_ms": round(percentile(ms, 0.95), 1),
                       "mean_ms": round(statistics.fmean(ms), 1),
                       "p50_over_one_thread": round(statistics.median(ms) / base, 2)}
                print(json.dumps(row))
                rows.append(row)
    finally:
        for proc, _ in servers.values():
            stop_server(proc)
    print("\n| condition | setting | torch threads | p50 ms | p95 ms | p50 / 1 thread |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['condition']} | {r['setting']} | {r['torch_threads']} | {r['p50_ms']:,.1f} | {r['p95_ms']:,.1f} "
              f"| {r['p50_over_one_thread']} |")
    print(json.dumps({"loadavg_1m_after": round(os.getloadavg()[0], 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
