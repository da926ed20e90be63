"""adapters: what serving many adapters beside one base costs (issue 32), on this CPU with the tiny checkpoint, through
the real engine's serving path (`DecisionEngine.start()` / `submit`), each figure against a baseline of the same run.

Adapters are written on the loaded base (`fixtures.adapters.make_adapter`): four head-only (h1..h4, the base head
perturbed) and four LoRA (l1..l4, rank 16 on q/k/v/o of the text decoder, random non-zero weights), registered with
`engine.adapters.register`. Every request has a new state (and the prefix cache is off), so each is a full prefill.
Rounds alternate the compared ways, so load from other processes hits both alike; headlines are medians.

1. head_mixed: a stream of N requests submitted at once, spread over h1..h4, vs the same stream all to h1
   (and all to the base): throughput ratio mixed / one (issue 32's target >= 0.9), the median of each round's
   ratio (paired: both streams of a round see the same load); the ratio of the median throughputs is shown too.
   Text-only requests (the worst case: each head pass is a fixed cost beside a short prefill), then the same with
   the inspection example's photo in every request (head_mixed_photo: an inspection line's request).
2. shadow: one request at a time to the base, with `h2` scoring it as a head-only shadow candidate
   (`adapters.set_shadow("clef-omni", "h2")`, the same forward) vs without: live p50 ratio (target <= 1.05).
3. hot_load: client threads keep requests to the base and h1 in flight while another thread calls
   `engine.adapters.register(name, path)` for a new head-only adapter; failures (must be 0), the stream's p50 vs the
   same stream without a load, the register call's time, and the time to the first answer from the new adapter
   after `register` returns (the adapter is unloaded again after each round).
4. lora_mixed: LoRA l1..l4 registered; the same streams mixed vs all to l1 (target >= 0.7), and what the gathered
   LoRA costs per token: `engine.decide_batch` on equal batches (same states, one forward each) for the base, all
   rows l1, and rows spread over l1..l4, in ms per input token (the base also before any LoRA was injected).
5. memory: resident bytes per adapter (`engine.adapters.cards()` / `stats()`) on the tiny checkpoint, and at real
   size computed on the meta device by benchmarks/device/realsize_adapters.py (run in a subprocess from that folder):
   the joint head of the real shapes and a rank-16 LoRA on q/k/v/o of the real Qwen3-Omni-30B-A3B thinker.

Prints JSON lines, then a table of figures and ratios (with each target and whether it held); `--out FILE` writes
the whole result as JSON. Not a test: nothing is asserted; figures depend on the machine.
What it must not know: engine internals (it uses `submit`, `decide_batch`, `selector`, `adapters`).

    .venv/bin/python benchmarks/adapters.py [--rounds 5] [--requests 64] [--threads 1] [--out FILE] [--smoke]

`--smoke` runs the same code at tiny sizes (8 requests a stream, one round) to check it runs; its figures mean nothing.
"""
from __future__ import annotations

import argparse
import base64
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from functools import partial
from pathlib import Path
from typing import Any

import torch
from smoke import parse_with_smoke
from tqdm import tqdm

from fixtures.adapters import make_adapter
from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.contract.types import Decision
from omni.serve.engine import DecisionEngine

DEVICE = Path(__file__).resolve().parent / "device"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "inspection"
HEADS = ("h1", "h2", "h3", "h4")
LORAS = ("l1", "l2", "l3", "l4")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
TARGETS = {"head_mixed": (">=", 0.9), "lora_mixed": (">=", 0.7), "shadow": ("<=", 1.05)}
SMOKE = {"rounds": 1, "requests": 8, "sequential": 4, "clients": 2, "client_requests": 4, "batch": 4}
QUESTIONS = {"visible": {"type": "noul", "instructions": "Is the serial label visible and legible?"},
             "next": {"type": "choice", "instructions": "What should happen to the unit next?",
                      "criteria": {"ship": None, "rework": "Send it back to the line.", "scrap": None}},
             "severity": {"type": "score", "instructions": "How bad is the damage?",
                          "criteria": ["none", "minor", "major", "critical"]}}


def emit(event: str, **fields: Any) -> dict:
    line = {"event": event, **fields}
    tqdm.write(json.dumps(line), file=sys.stdout)
    return line


PHOTO = "data:image/png;base64," + base64.b64encode((EXAMPLES / "unit.png").read_bytes()).decode()


def body(tag: str, i: int, model: str | None = None, photo: bool = False) -> dict:
    """A text request with a state of its own (`tag`, `i`): a new prefix, a full prefill; `photo`: with the
    inspection example's photo (an inspection unit's request: the photo's tokens make most of the prefill)."""
    state = (f"Ticket {tag}-{i}. Unit {i % 97} came off line {i % 6} with a scratched casing; the label is "
             f"partly torn and the fan hums at {40 + i % 50} dB. Operator note {tag}{i}.")
    return {"state": state, "questions": QUESTIONS, **({"model": model} if model else {}),
            **({"images": [PHOTO]} if photo else {})}


def requests_of(engine: DecisionEngine, bodies: list[dict]) -> list:
    names = engine.selector.model_names()
    return [parse_request(b, engine.config, adapters=names) for b in bodies]


def _ended(ends: dict[int, float], done: threading.Condition, i: int, _future: Future[Decision]) -> None:
    with done:
        ends[i] = time.perf_counter()
        done.notify_all()


def stream(engine: DecisionEngine, bodies: list[dict]) -> tuple[float, list[float]]:
    """Submit every body at once; (seconds until the last answer, each request's latency). A failure raises."""
    requests = requests_of(engine, bodies)
    ends: dict[int, float] = {}
    done = threading.Condition()
    futures: list[Future[Decision]] = []
    started = time.perf_counter()
    for i, request in enumerate(requests):
        future = engine.submit(request)
        future.add_done_callback(partial(_ended, ends, done, i))
        futures.append(future)
    wait(futures)
    for future in futures:
        future.result()
    with done:      # `wait` returns once the futures are done, which can be before their callbacks have run
        done.wait_for(lambda: len(ends) == len(futures), timeout=60)
    return max(ends.values()) - started, [ends[i] - started for i in range(len(futures))]


def compare_streams(engine: DecisionEngine, ways: dict[str, Callable[[int], str | None]], tag: str, n: int,
                    rounds: int, photo: bool = False) -> dict:
    """Alternating rounds of each way's stream (`ways[name](i)`: request i's model); throughput and p50 per way."""
    walls: dict[str, list[float]] = {way: [] for way in ways}
    p50s: dict[str, list[float]] = {way: [] for way in ways}
    for r in tqdm(range(rounds), desc=tag, unit="round", file=sys.stderr, leave=False):
        for way, model_of in ways.items():
            wall, latencies = stream(engine, [body(f"{tag}{r}{way}", i, model_of(i), photo) for i in range(n)])
            walls[way].append(wall)
            p50s[way].append(statistics.median(latencies))
    return {"requests": n, "rounds": rounds,
            **{f"rps_{way}": round(n / statistics.median(w), 2) for way, w in walls.items()},
            **{f"p50_ms_{way}": round(statistics.median(p) * 1e3, 1) for way, p in p50s.items()},
            "wall_s": {way: [round(v, 3) for v in w] for way, w in walls.items()}}


def mixed_vs_one(engine: DecisionEngine, names: tuple[str, ...], tag: str, args: argparse.Namespace,
                 with_base: bool = False, photo: bool = False) -> dict:
    ways: dict[str, Callable[[int], str | None]] = {"mixed": lambda i: names[i % len(names)],
                                                     "one": lambda _i: names[0]}
    if with_base:
        ways["base"] = lambda _i: None
    result = compare_streams(engine, ways, tag, args.requests, args.rounds, photo)
    walls = result["wall_s"]
    result["ratio_rps_mixed_over_one"] = round(statistics.median(
        one / mixed for one, mixed in zip(walls["one"], walls["mixed"], strict=True)), 3)   # paired by round
    result["ratio_of_median_rps"] = round(result["rps_mixed"] / result["rps_one"], 3)
    return result


# ------------------------------------------------------------------------------------------------------ shadow
def one_at_a_time(engine: DecisionEngine, tag: str, n: int) -> tuple[list[float], int]:
    """`n` base requests, each answered before the next; (latencies, how many carried a shadow score)."""
    latencies, shadows = [], []
    for request in requests_of(engine, [body(tag, i) for i in range(n)]):
        started = time.perf_counter()
        decision = engine.submit(request).result()
        latencies.append(time.perf_counter() - started)
        if decision.shadow is not None:
            shadows.append(decision.shadow)     # read after the stream: waiting here would idle the server
    return latencies, sum(1 for scored in shadows if scored.result() is not None)


def shadow(engine: DecisionEngine, args: argparse.Namespace) -> dict:
    """Live p50 with a head-only shadow candidate (h2) vs without, alternating rounds."""
    registry = engine.adapters
    assert registry is not None
    live = engine.config.served_name
    on: list[float] = []
    off: list[float] = []
    scored = 0
    for r in tqdm(range(args.rounds), desc="shadow", unit="round", file=sys.stderr, leave=False):
        registry.set_shadow(live, "h2")
        latencies, count = one_at_a_time(engine, f"shadow-on{r}", args.sequential)
        on += latencies
        scored += count
        registry.clear_shadow(live)
        off += one_at_a_time(engine, f"shadow-off{r}", args.sequential)[0]
    p50_on, p50_off = statistics.median(on), statistics.median(off)
    return {"live": live, "candidate": "h2", "requests_each": len(on), "shadow_scored": scored,
            "same_forward": engine.selector.stats().get("same_forward", 0),
            "p50_ms_with_shadow": round(p50_on * 1e3, 2), "p50_ms_without": round(p50_off * 1e3, 2),
            "ratio_p50_with_over_without": round(p50_on / p50_off, 3)}


# ---------------------------------------------------------------------------------------------------- hot load
def clients(engine: DecisionEngine, tag: str, args: argparse.Namespace, latencies: list[float], failures: list[str],
            submitted: threading.Event | None = None) -> list[threading.Thread]:
    """`args.clients` threads, each sending `args.client_requests` requests one after another (base and h1);
    `submitted` is set once a first request is on its way."""
    def client(c: int) -> None:
        bodies = [body(f"{tag}c{c}", i, "h1" if i % 2 else None) for i in range(args.client_requests)]
        for request in requests_of(engine, bodies):
            started = time.perf_counter()
            try:
                future = engine.submit(request)
                if submitted is not None:
                    submitted.set()
                future.result()
            except Exception as exc:   # noqa: BLE001 - counted: the figure is how many fail
                failures.append(f"{type(exc).__name__}: {exc}")
                continue
            latencies.append(time.perf_counter() - started)

    return [threading.Thread(target=client, args=(c,), name=f"client{c}") for c in range(args.clients)]


def load_while_serving(engine: DecisionEngine, folder: Path, name: str, tag: str, args: argparse.Namespace, load: bool) -> dict:
    """One run of the client stream; with `load`, `register(name, folder)` from another thread once it runs."""
    registry = engine.adapters
    assert registry is not None
    latencies: list[float] = []
    failures: list[str] = []
    submitted = threading.Event()
    threads = clients(engine, tag, args, latencies, failures, submitted)
    for thread in threads:
        thread.start()
    out: dict = {}
    if load:
        submitted.wait(30)                             # the clients have requests in flight
        out["in_flight_during_load"] = sum(thread.is_alive() for thread in threads)
        started = time.perf_counter()
        registry.register(name, str(folder))
        out["register_ms"] = (time.perf_counter() - started) * 1e3
        request = requests_of(engine, [body(f"{tag}-first", 0, name)])[0]
        first = time.perf_counter()
        engine.submit(request).result()
        out["first_answer_ms"] = (time.perf_counter() - first) * 1e3
    for thread in threads:
        thread.join()
    if load:
        registry.unload(name)
    return {**out, "latencies": latencies, "failures": failures}


def hot_load(engine: DecisionEngine, folder: Path, args: argparse.Namespace) -> dict:
    runs: dict[bool, list[dict]] = {True: [], False: []}
    for r in tqdm(range(args.rounds), desc="hot load", unit="round", file=sys.stderr, leave=False):
        for load in (False, True):
            runs[load].append(load_while_serving(engine, folder, f"hot{r}", f"hot{r}{load}", args, load))
    with_load = [v for run in runs[True] for v in run["latencies"]]
    without = [v for run in runs[False] for v in run["latencies"]]
    p50_with, p50_without = statistics.median(with_load), statistics.median(without)
    return {"clients": args.clients, "requests_per_run": args.clients * args.client_requests,
            "failures": sum(len(run["failures"]) for run in runs[True] + runs[False]),
            "failure_kinds": sorted({f for run in runs[True] + runs[False] for f in run["failures"]})[:3],
            "p50_ms_with_load": round(p50_with * 1e3, 1), "p50_ms_without": round(p50_without * 1e3, 1),
            "ratio_p50_with_over_without": round(p50_with / p50_without, 3),
            "register_ms_median": round(statistics.median(run["register_ms"] for run in runs[True]), 2),
            "first_answer_ms_median": round(statistics.median(run["first_answer_ms"] for run in runs[True]), 1),
            "clients_in_flight_at_load_min": min(run["in_flight_during_load"] for run in runs[True])}


# ------------------------------------------------------------------------------------------------- LoRA forward
def forward_per_token(engine: DecisionEngine, ways: dict[str, Callable[[int], str | None]], tag: str, batch: int,
                      rounds: int) -> dict:
    """ms per input token of one `decide_batch` of `batch` requests (the same states for every way)."""
    per_token: dict[str, list[float]] = {way: [] for way in ways}
    for r in tqdm(range(rounds), desc=tag, unit="round", file=sys.stderr, leave=False):
        for way, model_of in ways.items():
            requests = requests_of(engine, [body(f"{tag}{r}", i, model_of(i)) for i in range(batch)])
            started = time.perf_counter()
            decisions = engine.decide_batch(requests)
            seconds = time.perf_counter() - started
            per_token[way].append(seconds * 1e3 / sum(d.usage.input_tokens for d in decisions))
    return {f"ms_per_token_{way}": round(statistics.median(v), 4) for way, v in per_token.items()}


def lora_cost(engine: DecisionEngine, args: argparse.Namespace, base_before: dict) -> dict:
    ways: dict[str, Callable[[int], str | None]] = {"base": lambda _i: None, "one_lora": lambda _i: LORAS[0],
                                                     "mixed_4_lora": lambda i: LORAS[i % len(LORAS)]}
    cost = forward_per_token(engine, ways, "forward", args.batch, args.rounds)
    base = cost["ms_per_token_base"]
    return {"batch": args.batch, **cost, "ms_per_token_base_before_lora": base_before["ms_per_token_base"],
            "ratio_one_lora_over_base": round(cost["ms_per_token_one_lora"] / base, 3),
            "ratio_mixed_over_base": round(cost["ms_per_token_mixed_4_lora"] / base, 3),
            "ratio_mixed_over_one_lora": round(cost["ms_per_token_mixed_4_lora"] / cost["ms_per_token_one_lora"], 3),
            "gathered_lora_ms_per_token": round(cost["ms_per_token_mixed_4_lora"] - base, 4)}


# -------------------------------------------------------------------------------------------------------- memory
def memory(engine: DecisionEngine) -> dict:
    """Resident bytes per adapter here, and at real size (computed on the meta device in a subprocess)."""
    registry = engine.adapters
    assert registry is not None
    cards = {card["name"]: card for card in registry.cards() if card.get("resident")}
    tiny = {"head_only_bytes": cards["h1"]["bytes"], "lora_r16_bytes": cards["l1"]["bytes"],
            "lora_r16_lora_part_bytes": cards["l1"]["bytes"] - cards["h1"]["bytes"], "stats": registry.stats()}
    code = "import json, realsize_adapters; print(json.dumps(realsize_adapters.real_adapter_bytes()))"
    done = subprocess.run([sys.executable, "-c", code], cwd=DEVICE, capture_output=True, text=True, check=True,
                          timeout=600)
    return {"tiny": tiny, "real_size": json.loads(done.stdout.strip().splitlines()[-1])}


# --------------------------------------------------------------------------------------------------- the run
def write_adapters(engine: DecisionEngine, root: Path, rank: int) -> dict[str, Path]:
    """Every adapter's folder, written before any LoRA is injected into the engine's thinker (make_adapter copies the
    thinker for peft): h1..h4 and `hot` head-only, l1..l4 LoRA of `rank`."""
    model = engine.model
    specs = [*((name, "head") for name in HEADS), ("hot", "head"), *((name, "lora") for name in LORAS)]
    return {name: make_adapter(model, root / name, seed, mode, rank, LORA_TARGETS)  # type: ignore[arg-type]
            for seed, (name, mode) in enumerate(specs, start=1)}


def register(engine: DecisionEngine, folders: dict[str, Path], names: tuple[str, ...]) -> None:
    assert engine.adapters is not None
    for name in names:
        engine.adapters.register(name, str(folders[name]))


def held(kind: str, value: float) -> bool:
    op, target = TARGETS[kind]
    return value >= target if op == ">=" else value <= target


def table(results: dict) -> str:
    """The figures and ratios, with each target and whether it held."""
    head, lora, sh, hot = results["head_mixed"], results["lora_mixed"], results["shadow"], results["hot_load"]
    cost, mem = results["lora_cost"], results["memory"]
    photo = results["head_mixed_photo"]
    rows = [("4 head-only mixed vs one (rps)", f"{head['rps_mixed']} vs {head['rps_one']} (base {head['rps_base']})",
             head["ratio_rps_mixed_over_one"], "head_mixed"),
            ("the same, with the inspection photo (rps)", (f"{photo['rps_mixed']} vs {photo['rps_one']} (base "
             f"{photo['rps_base']})"), photo["ratio_rps_mixed_over_one"], "head_mixed"),
            ("4 LoRA r16 mixed vs one (rps)", f"{lora['rps_mixed']} vs {lora['rps_one']}",
             lora["ratio_rps_mixed_over_one"], "lora_mixed"),
            ("shadow h2 on base: live p50 (ms)", f"{sh['p50_ms_with_shadow']} vs {sh['p50_ms_without']}",
             sh["ratio_p50_with_over_without"], "shadow"),
            ("hot load: stream p50 (ms)", (f"{hot['p50_ms_with_load']} vs {hot['p50_ms_without']}, "
             f"{hot['failures']} failed"), hot["ratio_p50_with_over_without"], None),
            ("hot load: register / first answer (ms)", f"{hot['register_ms_median']} / {hot['first_answer_ms_median']}",
             None, None),
            ("ms/token base / 1 LoRA / 4 mixed", (f"{cost['ms_per_token_base']} / {cost['ms_per_token_one_lora']} / "
             f"{cost['ms_per_token_mixed_4_lora']}"), cost["ratio_mixed_over_base"], None),
            ("bytes/adapter tiny: head / LoRA r16", (f"{mem['tiny']['head_only_bytes']} / "
             f"{mem['tiny']['lora_r16_bytes']}"), None, None),
            ("MiB/adapter real: head / LoRA r16 part", (f"{mem['real_size']['head']['mib']} "
             f"({mem['real_size']['head']['dtype']}) / {mem['real_size']['lora']['mib']} "
             f"({mem['real_size']['lora']['dtype']})"), None, None)]
    lines = ["| figure | measured | ratio | target | held |", "|---|---|---|---|---|"]
    for label, figure, ratio, kind in rows:
        target = f"{TARGETS[kind][0]} {TARGETS[kind][1]}" if kind else ""
        verdict = ("yes" if held(kind, ratio) else "NO") if kind and ratio is not None else ""
        lines.append(f"| {label} | {figure} | {'' if ratio is None else ratio} | {target} | {verdict} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of every comparison")
    parser.add_argument("--requests", type=int, default=64, help="requests per stream (submitted at once)")
    parser.add_argument("--sequential", type=int, default=16, help="shadow: one-at-a-time requests per round and way")
    parser.add_argument("--clients", type=int, default=4, help="hot load: client threads")
    parser.add_argument("--client-requests", type=int, default=12, help="hot load: requests per client and run")
    parser.add_argument("--batch", type=int, default=8, help="LoRA cost: rows of each decide_batch")
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", type=Path, default=None, help="write the result here as JSON")
    return parse_with_smoke(parser, SMOKE, argv)


def run(engine: DecisionEngine, root: Path, args: argparse.Namespace) -> dict:
    folders = write_adapters(engine, root, args.lora_rank)
    register(engine, folders, HEADS)
    results = {"head_mixed": emit("head_mixed", **mixed_vs_one(engine, HEADS, "heads", args, with_base=True)),
               "head_mixed_photo": emit("head_mixed_photo", **mixed_vs_one(engine, HEADS, "photos", args,
                                                                          with_base=True, photo=True)),
               "shadow": emit("shadow", **shadow(engine, args)),
               "hot_load": emit("hot_load", **hot_load(engine, folders["hot"], args))}
    base_before = forward_per_token(engine, {"base": lambda _i: None}, "forward", args.batch, args.rounds)
    register(engine, folders, LORAS)
    results["lora_mixed"] = emit("lora_mixed", rank=args.lora_rank, **mixed_vs_one(engine, LORAS, "loras", args))
    results["lora_cost"] = emit("lora_cost", **lora_cost(engine, args, base_before))
    results["memory"] = emit("memory", **memory(engine))
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    emit("env", threads=args.threads, rounds=args.rounds, requests=args.requests, smoke=args.smoke)
    config = EngineConfig(torch_threads=args.threads, prefix_cache_mb=0, max_adapters=16)
    engine = DecisionEngine(config).start()
    try:
        with tempfile.TemporaryDirectory(prefix="adapters-bench-") as tmp:
            results = run(engine, Path(tmp), args)
    finally:
        engine.stop()
    verdicts = {kind: held(kind, results[kind]["ratio_rps_mixed_over_one" if kind != "shadow" else
                                              "ratio_p50_with_over_without"]) for kind in TARGETS}
    summary = emit("summary", head_mixed_ratio=results["head_mixed"]["ratio_rps_mixed_over_one"],
                   head_mixed_photo_ratio=results["head_mixed_photo"]["ratio_rps_mixed_over_one"],
                   lora_mixed_ratio=results["lora_mixed"]["ratio_rps_mixed_over_one"],
                   shadow_p50_ratio=results["shadow"]["ratio_p50_with_over_without"],
                   hot_load_failures=results["hot_load"]["failures"],
                   hot_load_p50_ratio=results["hot_load"]["ratio_p50_with_over_without"],
                   targets_held=verdicts, smoke=args.smoke)
    print(table(results), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps({**results, "summary": summary, "args": {k: str(v) for k, v in
                                                                                vars(args).items()}}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
