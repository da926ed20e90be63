"""scale: `omni serve --ray` on this machine — throughput of 2 engine replicas vs 1, and cache-aware routing.

Loopback `omni serve --ray` servers, each its own local Ray cluster (Serve's HTTP proxy, the gateway, the engine
replicas), every engine replica with one torch thread (`--torch-threads 1`), the tiny checkpoint by default:
  one     `--replicas 1`
  two     `--replicas 2` (cache-affinity routing, the default)
  two_p2c `--replicas 2 --cache-affinity false` (Ray Serve's default power-of-two-choices router)
Only one server runs at a time, and each measurement gets a freshly started one. A server counts as up once the
launcher has logged "omni serve --ray on http://..." (every replica running), not at the first /ready 200.

0. Ceiling without any serving stack (reference): each workload decided in-process (`DecisionEngine.decide`,
   one request at a time) by one engine process vs two side by side, each with one torch thread: what a second
   engine can add on this machine at all. `--ceiling-rounds` rounds alternating which goes first.
1. Throughput, `one` vs `two`, in rounds that alternate which goes first (one,two / two,one / ...) so load from
   other processes on a shared machine hits both alike. Each round starts a fresh server per setup and measures
   every workload on it in turn: a warm-up (`--clients` requests, not counted), then its own fresh `--requests`
   requests from `--clients` concurrent httpx async clients (JSON with data URLs, encoded before the clock
   starts). Workloads (`--workloads`, both by default):
     photo_audio — the inspection request of examples/inspection.json (its state, numbered per request,
       and its five questions) with a 1920x1080 JPEG photo and a 5 s WAV recording (~280 KB of JSON); every photo
       and recording has distinct bytes (a JPEG comment, a tone frequency), so nothing is found in a cache: each
       request is decoded, encoded and prefilled in full (~1,650 tokens, ~0.35 s of CPU in an engine here);
     text — the same questions, no media, a distinct 8,000-character state (~4,300 tokens).
   Printed per measurement: req/s, latency p50/p99, statuses, the CPU each kind of process spent per request
   (engine replicas, gateway, Serve's proxy, Serve's controller, the rest of Ray, the launcher, this client), and
   the cores busy (ours, and other processes on the machine). Summary, per workload: the ratio two / one (median
   round, and overall = total requests / total seconds), the bound cpus / cores busy with one replica, and the
   ceiling's ratio.
2. Cache affinity: `--photos` K distinct 640x480 photos, each asked `--repeats` R times (one state per photo,
   new questions each time, shuffled, `--clients` concurrent) — the same request list to fresh `one`, `two` and
   `two_p2c` servers, before any other traffic, caches at their default budgets (512 MB media, 1 GB prefix: far
   above what K photos need; /metrics' eviction counters are printed to show nothing was evicted). Prefix-cache
   hit rate from each answer's Server-Timing header (`prefix-cache;desc="hit"`); (R - 1) / R at best (fewer when
   repeats of one photo are in flight together). Ratios two / one (goal >= 0.90) and two_p2c / one.

Startup (~15-40 s a server) and shutdown are outside every clock; a default run takes 8-15 minutes. Prints JSON
lines and a summary, with the load average. Not a test: nothing is asserted; figures depend on the machine.
What it must not know: engine or Ray internals — it talks HTTP to `omni serve --ray` (Server-Timing, /metrics),
uses `DecisionEngine.decide` for the ceiling, and reads only the OS's CPU counters of the processes (psutil).
Starting, stopping, CPU accounting and sending are benchmarks/scale_servers.py's.

    .venv/bin/python benchmarks/scale.py [--rounds 4] [--requests 64] [--clients 16] [--workloads photo_audio,text]
                                         [--photos 24] [--repeats 8] [--ceiling-rounds 2] [--ceiling-requests 24]
                                         [--model DIR] [--server-flags "--flag V ..."] [--skip-throughput]
                                         [--skip-affinity] [--skip-p2c] [--smoke]

`--smoke`: the same code path at tiny sizes (the ceiling with 2 requests, one round of 4 requests per workload,
2 photos asked twice, no `two_p2c` server) and `--one-server`: every setup's part is run against ONE server, the
`two` setup started once (an `omni serve --ray` start and stop costs ~33 s here: the smoke run is about a minute);
a check that it runs, its figures mean nothing.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import platform
import random
import shlex
import statistics
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from scale_servers import PROCESS_KINDS, Server, measure, post_all
from serving import ROOT
from smoke import parse_with_smoke

SETUPS = {"one": ["--replicas", "1"], "two": ["--replicas", "2"],
          "two_p2c": ["--replicas", "2", "--cache-affinity", "false"]}
INSPECTION = json.loads((ROOT / "examples" / "inspection.json").read_text(encoding="utf-8"))
WORKLOADS = ("photo_audio", "text")
# --smoke: the same code path at tiny sizes (explicit flags still win)
SMOKE = {"rounds": 1, "requests": 4, "clients": 2, "photos": 2, "repeats": 2, "ceiling_rounds": 1,
         "ceiling_requests": 2, "skip_p2c": True, "one_server": True}


# ------------------------------------------------------------------------------------------------ workloads
def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def with_comment(jpeg: bytes, text: str) -> bytes:
    """The same JPEG with a COM segment after SOI: distinct bytes (no media-cache hit), the same pixels."""
    payload = text.encode()
    return jpeg[:2] + b"\xff\xfe" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]


def throughput_bodies(workload: str, tag: int, n: int) -> list[bytes]:
    """`n` JSON payloads, every state and media file distinct (and distinct from any other `tag`)."""
    from fixtures.media import image_bytes, wav_bytes

    photo = image_bytes("JPEG", "RGB", 1920, 1080) if workload == "photo_audio" else b""
    out = []
    for i in range(n):
        body = {"model": INSPECTION["model"], "questions": INSPECTION["questions"]}
        if workload == "photo_audio":
            body["state"] = f"Round {tag}, unit {i}. {INSPECTION['state']}"
            body["images"] = [data_url("image/jpeg", with_comment(photo, f"round {tag}, unit {i}"))]
            body["audio"] = [data_url("audio/wav", wav_bytes(5.0, frequency_hz=200.0 + (tag * 1000 + i) * 0.37))]
        else:
            line = f"Round {tag}, unit {i}: the unit rattles since the last service visit; the customer wrote again. "
            body["state"] = (line * (8000 // len(line) + 1))[:8000]
        out.append(json.dumps(body).encode())
    return out


def affinity_bodies(photos: int, repeats: int, first: int = 0) -> list[bytes]:
    """`photos` distinct 640x480 photos (numbered from `first`), each asked `repeats` times: one state per photo, new
    questions each time; shuffled."""
    import io

    from PIL import Image

    from fixtures.media import pattern

    bodies = []
    for k in range(first, first + photos):
        pixels = pattern(480, 640, index=k)           # the frame-index blocks make each photo really different
        pixels[:8, :8] = (k * 37 % 256, k * 91 % 256, 255 - k % 256)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "PNG")
        image = data_url("image/png", buffer.getvalue())
        state = f"Unit {k}: photo taken by the technician after the service visit. {INSPECTION['state']}"
        for r in range(repeats):
            questions = {f"{name}_{r}": {**q, "instructions": f"(ask {r}) {q['instructions']}"}
                         for name, q in list(INSPECTION["questions"].items())[:3]}
            bodies.append(json.dumps({"model": INSPECTION["model"], "state": state, "questions": questions,
                                      "images": [image]}).encode())
    random.Random(7).shuffle(bodies)
    return bodies


def cache_outcomes(server_timing: str) -> dict[str, str]:
    """{"prefix": "hit", "media": "miss"} from a Server-Timing header."""
    out = {}
    for entry in server_timing.split(","):
        name, _, desc = entry.strip().partition(";desc=")
        if name.endswith("-cache"):
            out[name.removesuffix("-cache")] = desc.strip('"')
    return out



def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ------------------------------------------------------------------------------------------------ parts
def engine_worker(model: str | None, inbox, outbox) -> None:
    """A process with one in-process engine (one torch thread): decides each list of payloads it is given, one at a
    time, and reports (monotonic start, end, CPU seconds of the process, requests); None ends it."""
    from omni.contract.config import EngineConfig
    from omni.contract.request import parse_request
    from omni.serve.engine import DecisionEngine

    engine = DecisionEngine(EngineConfig(model_path=model, torch_threads=1)).load()
    outbox.put("ready")
    while (payloads := inbox.get()) is not None:
        requests = [parse_request(json.loads(p), engine.config) for p in payloads]
        started, cpu = time.monotonic(), time.process_time()
        for request in requests:
            engine.decide(request)
        outbox.put((started, time.monotonic(), time.process_time() - cpu, len(requests)))


def ceiling(args: argparse.Namespace) -> dict[str, list[dict]]:  # noqa: C901 (a benchmark script: the measuring loop reads top to bottom)
    """No serving stack at all: each workload decided in-process by one engine process vs two side by side
    (each its own share, one request at a time) — how much a second single-threaded engine can add on this
    machine. Both processes load once; in the one-engine turns the second waits idle. -> {workload: rounds}"""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    outbox = context.Queue()
    inboxes = [context.Queue(), context.Queue()]
    workers = [context.Process(target=engine_worker, args=(args.model, inbox, outbox), daemon=True)
               for inbox in inboxes]
    rounds: dict[str, list[dict]] = {workload: [] for workload in args.workloads}
    try:
        for w in workers:
            w.start()
        for _ in workers:
            outbox.get(timeout=300)
        for i, inbox in enumerate(inboxes):       # not counted: first calls
            inbox.put([p for workload in args.workloads for p in throughput_bodies(workload, -50 - i, 4)])
        for _ in inboxes:
            outbox.get(timeout=300)
        for workload, n in ((w, n) for n in range(args.ceiling_rounds) for w in args.workloads):
            result = {}
            for engines in ((1, 2) if n % 2 == 0 else (2, 1)):
                payloads = throughput_bodies(workload, 1000 + 2 * n + engines, args.ceiling_requests)
                for i in range(engines):
                    inboxes[i].put(payloads[i::engines])
                reports = [outbox.get(timeout=600) for _ in range(engines)]
                wall = max(r[1] for r in reports) - min(r[0] for r in reports)
                result[f"engines_{engines}"] = {
                    "requests": len(payloads), "wall_s": round(wall, 3), "rps": round(len(payloads) / wall, 3),
                    "cpu_ms_per_request": round(sum(r[2] for r in reports) / len(payloads) * 1e3, 1)}
            result["ratio_two_over_one"] = round(result["engines_2"]["rps"] / result["engines_1"]["rps"], 3)
            rounds[workload].append(result)
            print(json.dumps({"part": "ceiling", "workload": workload, "round": n, "loadavg_1m": load1(), **result}),
                  flush=True)
    finally:
        for inbox in inboxes:
            inbox.put(None)
        for w in workers:
            w.join(30)
            if w.is_alive():
                w.kill()
    return rounds


def throughput_round(server: Server, payloads: list[bytes], clients: int) -> dict:
    results, wall, cpu = measure(server, payloads, clients)
    latencies = [latency for _, latency, _ in results]
    n = len(payloads)
    ours = sum(v for k, v in cpu.items() if k != "machine")
    return {"requests": n, "wall_s": round(wall, 3), "rps": round(n / wall, 3),
            "p50_ms": round(quantile(latencies, 0.5) * 1e3, 1), "p99_ms": round(quantile(latencies, 0.99) * 1e3, 1),
            "statuses": dict(Counter(str(status) for status, _, _ in results)),
            "cpu_ms_per_request": {k: round(cpu.get(k, 0.0) / n * 1e3, 1) for k in PROCESS_KINDS},
            "cpu_ms_per_request_all": round(ours / n * 1e3, 1),
            "cores_busy": {"ours": round(ours / wall, 2), "machine": round(cpu["machine"] / wall, 2),
                           "others": round(max(0.0, cpu["machine"] - ours) / wall, 2)}}


def affinity(server: Server, payloads: list[bytes], clients: int, repeats: int) -> dict:
    results, wall, _ = measure(server, payloads, clients)
    prefix = Counter(cache_outcomes(timing).get("prefix", "none") for _, _, timing in results)
    media = Counter(cache_outcomes(timing).get("media", "none") for _, _, timing in results)
    n = len(payloads)
    cache = server.metric("omni_cache_")
    return {"requests": n, "wall_s": round(wall, 3), "rps": round(n / wall, 2),
            "statuses": dict(Counter(str(status) for status, _, _ in results)),
            "prefix_hit_rate": round(prefix["hit"] / n, 3), "media_hit_rate": round(media["hit"] / n, 3),
            "best_possible": round((repeats - 1) / repeats, 3), "prefix": dict(prefix), "media": dict(media),
            "evictions": {k.split('"')[1]: v for k, v in cache.items() if k.startswith("omni_cache_evictions")}}


def load1() -> float:
    return round(os.getloadavg()[0], 2)


# ------------------------------------------------------------------------------------------------ summary
def summarize(rounds: dict[str, list[dict]], hits: dict[str, dict], reference: dict[str, list[dict]]) -> dict:
    out: dict = {}
    for workload in sorted(set(rounds) | set(reference), key=lambda w: WORKLOADS.index(w)):
        out[workload] = {**summarize_ceiling(reference.get(workload, [])),
                         **summarize_throughput(rounds.get(workload, []))}
    if "one" in hits:
        base = hits["one"]["prefix_hit_rate"]
        out["affinity"] = {f"{s}_prefix_hit_rate": h["prefix_hit_rate"] for s, h in hits.items()}
        out["affinity"]["best_possible"] = hits["one"]["best_possible"]
        for s in ("two", "two_p2c"):
            if s in hits and base:
                out["affinity"][f"ratio_{s}_over_one"] = round(hits[s]["prefix_hit_rate"] / base, 3)
        out["affinity"]["goal_two_over_one"] = 0.9
    out["loadavg_1m_end"] = load1()
    return out


def summarize_ceiling(reference: list[dict]) -> dict:
    out: dict = {}
    if reference:
        total = {e: sum(r[e]["requests"] for r in reference) / sum(r[e]["wall_s"] for r in reference)
                 for e in ("engines_1", "engines_2")}
        out["ceiling_no_serving_stack"] = {
            "one_engine_rps": round(total["engines_1"], 2), "two_engines_rps": round(total["engines_2"], 2),
            "ratio_two_over_one": round(total["engines_2"] / total["engines_1"], 3),
            "ratio_two_over_one_median_round": round(statistics.median(r["ratio_two_over_one"] for r in reference),
                                                     3),
            "cpu_ms_per_request_median": {e: round(statistics.median(r[e]["cpu_ms_per_request"] for r in reference),
                                                   1) for e in ("engines_1", "engines_2")}}
    return out


def summarize_throughput(rounds: list[dict]) -> dict:
    out: dict = {}
    if rounds:
        setups = ("one", "two")
        total = {s: sum(r[s]["requests"] for r in rounds) / sum(r[s]["wall_s"] for r in rounds) for s in setups}

        def median(field) -> dict[str, float]:
            return {s: round(statistics.median(field(r[s]) for r in rounds), 2) for s in setups}

        busy_one = median(lambda x: x["cores_busy"]["ours"])["one"]
        out["throughput"] = {
            "one_rps": round(total["one"], 2), "two_rps": round(total["two"], 2),
            "ratio_two_over_one": round(total["two"] / total["one"], 3),
            "ratio_two_over_one_median_round": round(statistics.median(r["ratio_two_over_one"] for r in rounds), 3),
            "ratio_per_round": [r["ratio_two_over_one"] for r in rounds], "goal": 1.6,
            "cores_busy_ours_median": median(lambda x: x["cores_busy"]["ours"]),
            "cores_busy_others_median": median(lambda x: x["cores_busy"]["others"]),
            # two replicas can at best use the whole machine: the ratio cannot exceed cpus / what `one` keeps busy
            "ratio_bound_cpus_over_cores_busy_one": round((os.cpu_count() or 1) / busy_one, 3) if busy_one else None,
            "cpu_ms_per_request_median": {s: {k: round(statistics.median(r[s]["cpu_ms_per_request"][k]
                                                                         for r in rounds), 1)
                                              for k in PROCESS_KINDS} for s in setups},
            "cpu_ms_per_request_all_median": median(lambda x: x["cpu_ms_per_request_all"])}
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; with --smoke the SMOKE sizes are the defaults (flags given explicitly still win)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="throughput rounds (each: one and two, alternating)")
    parser.add_argument("--requests", type=int, default=64, help="requests per server per throughput round")
    parser.add_argument("--clients", type=int, default=16, help="concurrent HTTP clients")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), metavar="LIST",
                        help=f"throughput workloads, comma-separated, each measured on every server: {WORKLOADS}")
    parser.add_argument("--photos", type=int, default=24, help="distinct photos of the affinity part")
    parser.add_argument("--repeats", type=int, default=8, help="times each photo is asked about")
    parser.add_argument("--model", default=None, help="default: the embedded tiny checkpoint")
    parser.add_argument("--ceiling-rounds", type=int, default=2,
                        help="rounds of the no-serving-stack reference (0: skip it)")
    parser.add_argument("--ceiling-requests", type=int, default=24, help="requests per ceiling measurement")
    parser.add_argument("--server-flags", default="", metavar="FLAGS",
                        help="more `omni serve` flags for every server, e.g. \"--affinity-slack-requests 16\"")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-affinity", action="store_true")
    parser.add_argument("--skip-p2c", action="store_true",
                        help="affinity without the two_p2c server (Ray's default router): one server start less")
    parser.add_argument("--one-server", action="store_true",
                        help="every setup measured on one server, `two` started once (smoke: the figures mean nothing)")
    args = parse_with_smoke(parser, SMOKE, argv)
    args.workloads = [w for w in args.workloads.split(",") if w]
    if not args.workloads or set(args.workloads) - set(WORKLOADS):
        parser.error(f"--workloads: a comma-separated list of {WORKLOADS}")
    return args


@contextlib.contextmanager
def running(name: str, flags: list[str], work: Path) -> Iterator[Server]:
    """A fresh `omni serve --ray` for `name`; stopped (and checked for leftovers) however the block ends."""
    server = Server(name, SETUPS[name] + flags, work)
    print(json.dumps({"started": name, "flags": SETUPS[name], "ready_s": round(server.ready_s, 1),
                      "all_replicas_s": round(server.start_s, 1)}), flush=True)
    try:
        yield server
    finally:
        print(json.dumps({"stopped": server.stop()}), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(json.dumps({"env": {"python": platform.python_version(), "cpus": os.cpu_count(), "workloads": args.workloads,
                              "rounds": args.rounds, "requests": args.requests, "clients": args.clients,
                              "photos": args.photos, "repeats": args.repeats, "model": args.model or "tiny default",
                              "torch_threads": 1, "server_flags": args.server_flags, "loadavg_1m": load1(),
                              "smoke": args.smoke}}),
          flush=True)
    work = Path(tempfile.mkdtemp(prefix="omni-scale-bench-"))
    flags = (["--model", args.model] if args.model else []) + ["--torch-threads", "1", *shlex.split(args.server_flags)]
    setups = ["one", "two"] + ([] if args.skip_p2c else ["two_p2c"])
    # the same request list for every setup; on one shared server each setup gets photos of its own (fresh caches)
    hit_bodies = {} if args.skip_affinity else {
        name: affinity_bodies(args.photos, args.repeats, first=k * args.photos if args.one_server else 0)
        for k, name in enumerate(setups)}
    rounds: dict[str, list[dict]] = {workload: [] for workload in args.workloads}
    hits: dict[str, dict] = {}
    reference = ceiling(args) if args.ceiling_rounds and not args.skip_throughput else {}
    schedule = [["one", "two"] if n % 2 == 0 else ["two", "one"] for n in range(args.rounds)]
    if args.skip_throughput or not schedule:
        schedule = [["one", "two"] if hit_bodies else []]
    if hit_bodies and not args.skip_p2c:
        schedule[-1].append("two_p2c")
    servers = contextlib.ExitStack()
    shared: list[Server] = []

    def server_for(name: str) -> contextlib.AbstractContextManager[Server]:
        """A fresh server per setup; with --one-server the `two` server started once, for every setup."""
        if not args.one_server:
            return running(name, flags, work)
        if not shared:
            shared.append(servers.enter_context(running("two", flags, work)))
        return contextlib.nullcontext(shared[0])

    with servers:
        run_schedule(args, schedule, server_for, hit_bodies, hits, rounds)
    failed = any(set(r[s]["statuses"]) - {"200"} for w in rounds.values() for r in w for s in ("one", "two")) or any(
        set(h["statuses"]) - {"200"} for h in hits.values())
    print(json.dumps({"summary": summarize(rounds, hits, reference)}), flush=True)
    if failed:
        print(json.dumps({"failures": "see the statuses above", "logs": str(work)}))
    return 1 if failed else 0


def run_schedule(args: argparse.Namespace, schedule: list[list[str]],
                 server_for: Callable[[str], contextlib.AbstractContextManager[Server]],
                 hit_bodies: dict[str, list[bytes]],
                 hits: dict[str, dict], rounds: dict[str, list[dict]]) -> None:
    """Each round: every setup in its order, on its server: affinity first (fresh caches), then each workload."""
    for n, order in enumerate(schedule):
        result: dict[str, dict] = {workload: {} for workload in args.workloads}
        for name in order:
            measured = not (args.skip_throughput or not args.rounds or name == "two_p2c")
            with server_for(name) as server:
                if hit_bodies and name not in hits:          # fresh caches: before any other traffic
                    hits[name] = affinity(server, hit_bodies[name], args.clients, args.repeats)
                    print(json.dumps({"part": "affinity", "setup": name, "loadavg_1m": load1(), **hits[name]}),
                          flush=True)
                for workload in args.workloads if measured else []:     # the same server for every workload
                    payloads = throughput_bodies(workload, 2 * n + order.index(name), args.requests)
                    warm = throughput_bodies(workload, -1 - n, args.clients)   # not counted: first calls
                    asyncio.run(post_all(server.url, warm, args.clients))
                    result[workload][name] = throughput_round(server, payloads, args.clients)
        for workload, by_setup in result.items():
            if {"one", "two"} <= set(by_setup):
                by_setup["ratio_two_over_one"] = round(by_setup["two"]["rps"] / by_setup["one"]["rps"], 3)
                rounds[workload].append(by_setup)
                print(json.dumps({"part": "throughput", "workload": workload, "round": n, "order": order[:2],
                                  "loadavg_1m": load1(), **by_setup}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
