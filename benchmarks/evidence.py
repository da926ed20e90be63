"""evidence: what `x_evidence` costs (issue 34 item 6) — the inspection request (examples/inspection.json with
examples/inspection/unit.png, hum.wav and fan.mp4, README's first command) decided without evidence, with
`"x_evidence": true` and with `{"options": "all"}`, in one process, on the embedded demo checkpoint, on this CPU.

Per mode, the time of `DecisionEngine.decide` plus the response body (`to_wire()` + `json.dumps`, as the HTTP edge
does), the modes interleaved request by request (the order rotating each round) after a warm-up of each; p50 and
best per mode (wall, and the process's CPU time, which the other processes of a shared machine disturb less), p50
ratios against `off` and the median of the paired ratios (each request with evidence over the `off` request of its
round); response bytes per mode and the bytes evidence adds; the bytes of the summary the decision log keeps
(omni.contract.evidence_summary). Two engines: `fresh` (media and prefix caches off: every request decodes,
encodes and prefills its media, as a new request does) and `cached` (the caches on and hit: the media's encoding and
the prompt prefix reused, only the state, questions and head run; the worst case for the ratio). Then where the added
time goes, each part timed apart on the same prepared record (medians of CPU ms): the forward with and without the
attention kept (`model.probabilities`), the mapping to the caller's input (`model.explain`), `json.dumps` of the
evidence and the log's summary (made and serialised on the log's writer thread). Goal: p50 with evidence <= 1.05x
without (`meets_goal`: per engine, by the wall and by the CPU p50 ratio of `"x_evidence": true`). Prints JSON lines
(`env`, one `mode` line per engine and mode, `parts`, `summary`). Not a test: nothing asserted. What it must not
know: how the evidence is computed (it uses the engine and the model's surface).

    .venv/bin/python benchmarks/evidence.py [--requests 30] [--warmup 3] [--parts 40] [--threads 1] [--smoke]

About a minute here. `--smoke`: the same code path at tiny sizes (2 requests per mode, one warm-up, 3 part timings);
its figures mean nothing.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from smoke import parse_with_smoke

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "inspection.json"
MEDIA = (("images", "unit.png"), ("audio", "hum.wav"), ("videos", "fan.mp4"))
MODES: dict[str, Any] = {"off": None, "on": True, "all": {"options": "all"}}
GOAL = 1.05
SMOKE = {"requests": 2, "warmup": 1, "parts": 3}


def emit(event: str, **fields: Any) -> dict:
    line = {"event": event, **fields}
    print(json.dumps(line), flush=True)
    return line


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def progress(engine: str, step: str) -> None:
    say(f"  {engine} {step}")


def requests_by_mode(config: Any) -> dict[str, Any]:
    """The inspection request, parsed once per mode (the media as named parts, as `omni decide --image` sends them)."""
    from omni.contract.request import parse_request
    from omni.contract.types import Part

    body = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    parts = [Part(slot, (EXAMPLE.parent / "inspection" / name).read_bytes()) for slot, name in MEDIA]
    return {mode: parse_request({**body, **({"x_evidence": ask} if ask is not None else {})}, config, parts)
            for mode, ask in MODES.items()}


def timed_modes(engine: Any, requests: dict[str, Any], count: int, warmup: int,
                progress: Callable[[str], None]) -> dict[str, Any]:
    """ms per request of each mode (decide + response body), wall and process CPU, interleaved; the last body of
    each."""
    def one(mode: str) -> tuple[float, float, str]:
        started, cpu = time.perf_counter(), time.process_time()
        body = json.dumps(engine.decide(requests[mode]).to_wire())
        return (time.perf_counter() - started) * 1e3, (time.process_time() - cpu) * 1e3, body

    for _ in range(warmup):
        for mode in MODES:
            one(mode)
    names = list(MODES)
    times: dict[str, list[float]] = {mode: [] for mode in names}
    cpu: dict[str, list[float]] = {mode: [] for mode in names}
    bodies: dict[str, str] = {}
    for n in range(count):
        for mode in names[n % len(names):] + names[:n % len(names)]:
            ms, cpu_ms, bodies[mode] = one(mode)
            times[mode].append(ms)
            cpu[mode].append(cpu_ms)
        progress(f"{n + 1}/{count}")
    return {"times": times, "cpu": cpu, "bodies": bodies}


def mode_figures(times: dict[str, list[float]], cpu: dict[str, list[float]],
                 bodies: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per mode: p50, best, ratios to off (p50 and paired median; wall, and process CPU, which other processes on a
    shared machine disturb less), response bytes and bytes added."""
    from omni.contract.evidence_summary import LOGGED_ASK, evidence_summary

    off_p50, off_bytes = statistics.median(times["off"]), len(bodies["off"].encode())
    out = {}
    for mode, ms in times.items():
        wire = json.loads(bodies[mode])
        size = len(bodies[mode].encode())
        figures: dict[str, Any] = {
            "p50_ms": round(statistics.median(ms), 3), "best_ms": round(min(ms), 3), "requests": len(ms),
            "p50_ratio": round(statistics.median(ms) / off_p50, 4),
            "paired_ratio_median": round(statistics.median(m / o for m, o in zip(ms, times["off"], strict=True)), 4),
            "cpu_p50_ms": round(statistics.median(cpu[mode]), 3),
            "cpu_p50_ratio": round(statistics.median(cpu[mode]) / statistics.median(cpu["off"]), 4),
            "response_bytes": size, "bytes_added": size - off_bytes}
        if "x_evidence" in wire:
            summary = evidence_summary(wire["x_evidence"], LOGGED_ASK.top)
            figures["evidence_bytes"] = len(json.dumps(wire["x_evidence"]).encode())
            figures["logged_summary_bytes"] = len(json.dumps(summary).encode())
        out[mode] = figures
    return out


def median_cpu_ms(work: Callable[[], Any], count: int) -> float:
    work()
    times = []
    for _ in range(count):
        started = time.process_time()
        work()
        times.append((time.process_time() - started) * 1e3)
    return round(statistics.median(times), 3)


def parts(engine: Any, requests: dict[str, Any], count: int) -> dict[str, float]:
    """Where the added time goes, on one prepared record per mode (the cached engine's: its media encoded); and what
    the decision log's writer thread spends on the summary it keeps (off the response's path)."""
    from omni.contract.evidence_summary import LOGGED_ASK, evidence_summary

    model = engine.model
    prepared = {mode: model.prepare(requests[mode]) for mode in ("off", "on")}
    figures: dict[str, float] = {"forward_off_cpu_ms": 0.0, "forward_on_cpu_ms": 0.0}
    for _ in range(2):                        # interleaved: off, on, off, on
        for mode, record in prepared.items():
            figures[f"forward_{mode}_cpu_ms"] += median_cpu_ms(partial(model.probabilities, [record]), count) / 2
    probabilities = model.probabilities([prepared["on"]])[0]
    figures["explain_cpu_ms"] = median_cpu_ms(lambda: model.explain(prepared["on"], probabilities), count)
    evidence = model.explain(prepared["on"], probabilities)
    figures["json_dumps_evidence_cpu_ms"] = median_cpu_ms(lambda: json.dumps(evidence), count)
    figures["log_summary_cpu_ms"] = median_cpu_ms(lambda: json.dumps(evidence_summary(evidence, LOGGED_ASK.top)),
                                                  count)
    figures["forward_added_cpu_ms"] = figures["forward_on_cpu_ms"] - figures["forward_off_cpu_ms"]
    return {key: round(value, 3) for key, value in figures.items()}


def engines(threads: int) -> dict[str, Any]:
    from omni.contract.config import EngineConfig
    from omni.serve.engine import DecisionEngine

    base = EngineConfig(torch_threads=threads)
    return {"fresh": DecisionEngine(dataclasses.replace(base, media_cache_mb=0, prefix_cache_mb=0)).load(),
            "cached": DecisionEngine(base).load()}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=30, help="timed requests per mode and engine (after warm-up)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds of every mode first")
    parser.add_argument("--parts", type=int, default=40, help="timings of each part (forward, explain)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    return parse_with_smoke(parser, SMOKE, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    emit("env", python=sys.version.split()[0], torch=torch.__version__, cpus=os.cpu_count(),
         loadavg_1m=round(os.getloadavg()[0], 2), smoke=args.smoke, requests=args.requests, warmup=args.warmup,
         threads=args.threads, request="examples/inspection.json + unit.png, hum.wav, fan.mp4")
    summary: dict[str, Any] = {}
    by_engine = engines(args.threads)
    requests = requests_by_mode(next(iter(by_engine.values())).config)
    for name, engine in by_engine.items():
        say(f"evidence: {name} engine, {args.requests} requests per mode")
        run = timed_modes(engine, requests, args.requests, args.warmup, partial(progress, name))
        for mode, figures in mode_figures(run["times"], run["cpu"], run["bodies"]).items():
            emit("mode", engine=name, mode=mode, **figures)
            if mode != "off":
                summary[f"{name}_{mode}_p50_ratio"] = figures["p50_ratio"]
                summary[f"{name}_{mode}_cpu_p50_ratio"] = figures["cpu_p50_ratio"]
                summary[f"{name}_{mode}_bytes_added"] = figures["bytes_added"]
    emit("parts", **parts(by_engine["cached"], requests, args.parts))
    meets = {name: {figure: summary[f"{name}_on_{figure}"] <= GOAL for figure in ("p50_ratio", "cpu_p50_ratio")}
             for name in by_engine}
    emit("summary", goal=GOAL, meets_goal=meets, **summary, loadavg_1m_end=round(os.getloadavg()[0], 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
