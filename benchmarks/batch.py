"""batch: `omni batch` in-process vs the same backlog through `omni serve`, measured in one run on this machine.

Each round answers a backlog of the same shape three ways (default 120 lines cycling text / image / audio; media as
files next to the backlog, as an operator's backlog has them), in an order that rotates from round to round so load
from other processes on a shared machine hits all alike. Each way gets its own fresh lines (states and media bytes
distinct per line, per way and per round): the two HTTP ways share one server, and the second to send a line would
otherwise find it in the server's prefix and media caches.

- in_process: `omni batch IN --out OUT` — the command's own runner and in-process backend (`api.cli.batch`: an
  engine started once in this process, `--concurrency` lines in flight, default 2 x max_batch_records);
- batch_url: `omni batch IN --out OUT --url` against one `omni serve` process (same runner, HTTP backend,
  multipart uploads of the files);
- server_load: `--clients` concurrent HTTP clients (httpx, asyncio) posting the same requests as JSON with data
  URLs (encoded before the clock starts) to the same server: what the server answers under load.

Both sides run the same checkpoint with the same torch threads (`--torch-threads`, default 1) and the shipped
batching defaults. The model loads are outside the clocks. Prints JSON lines per round and a summary with the
throughput ratios in_process / batch_url and in_process / server_load (the goal: >= 0.8), per round and over all
rounds. Not a test: nothing is asserted; figures depend on the machine.
What it must not know: engine internals (it uses the CLI's public backends, `run_backlog`, the server's error table
`error_payload` and HTTP).

    .venv/bin/python benchmarks/batch.py [--rounds 4] [--lines 120] [--mix text,image,audio] [--clients 16]
                                         [--model DIR] [--torch-threads 1] [--concurrency N] [--warm-lines 24]
                                         [--smoke]

`--smoke`: the same code path at tiny sizes (one round of 6 lines, 3 warm-up lines per way, 2 clients), to check that
it runs; its figures mean nothing.
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
from collections import Counter
from pathlib import Path

import httpx
from serving import launch_server, stop_server, wait_ready
from smoke import parse_with_smoke

QUESTIONS = {"visible": {"type": "noul", "instructions": "Is the serial label visible?"},
             "team": {"type": "choice", "instructions": "Who handles it?", "criteria": {"hvac": None, "power": "P"}},
             "severity": {"type": "score", "instructions": "How severe?", "criteria": ["none", "minor", "major"]}}
MIMES = {"png": "image/png", "wav": "audio/wav"}
WAYS = ("in_process", "batch_url", "server_load")
# --smoke: the same code path at tiny sizes (explicit flags still win)
SMOKE = {"rounds": 1, "lines": 6, "clients": 2, "warm_lines": 3}


def write_backlog(folder: Path, tag: int, lines: int, mix: list[str]) -> tuple[Path, list[dict]]:
    """A backlog of `lines` requests in `folder` (media files beside it) -> (its path, the same bodies with data
    URLs for the HTTP clients). Every state and every media file is distinct, and differs from those of any other
    `tag`, so that no cache holds a line a way has not sent before."""
    from PIL.PngImagePlugin import PngInfo

    from fixtures.media import image_bytes, wav_bytes

    (folder / "media").mkdir(parents=True)
    backlog, inline = [], []
    for i in range(lines):
        body = {"state": f"Backlog {tag}, ticket {i}: the unit rattles since the last service visit.",
                "questions": QUESTIONS}
        kind = mix[i % len(mix)]
        media = {}
        if kind == "image":
            info = PngInfo()
            info.add_text("ticket", f"{tag}-{i}")   # distinct bytes, same pixels: no media-cache hit
            media = {"images": ("png", image_bytes("PNG", pnginfo=info))}
        elif kind == "audio":
            media = {"audio": ("wav", wav_bytes(1.0, frequency_hz=300.0 + i + 1000.0 * tag))}
        line, wire = dict(body), dict(body)
        for field, (ext, data) in media.items():
            name = f"media/{field}-{i}.{ext}"
            (folder / name).write_bytes(data)
            line[field] = [name]
            wire[field] = [f"data:{MIMES[ext]};base64,{base64.b64encode(data).decode()}"]
        backlog.append(json.dumps(line))
        inline.append(wire)
    path = folder / "in.jsonl"
    path.write_text("\n".join(backlog) + "\n", encoding="utf-8")
    return path, inline


async def post_all(url: str, bodies: list[dict], clients: int) -> tuple[Counter, float]:
    """Send every body with `clients` in flight -> (status counts, wall seconds)."""
    import time

    payloads = [json.dumps(body).encode() for body in bodies]
    statuses: Counter = Counter()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        async def worker() -> None:
            while payloads:
                payload = payloads.pop()
                r = await client.post("/v1/systemone", content=payload, headers={"Content-Type": "application/json"})
                statuses[r.status_code] += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return statuses, time.perf_counter() - started


def describe(exc: BaseException, request_id: str) -> tuple[int, dict]:
    """(exception, request id) -> (status, body) by the server's one error table, as `omni batch` writes them."""
    from api.http.errors import error_payload

    status, body, _headers = error_payload(exc, request_id)
    return status, body


def run_way(way: str, engine, url: str, backlog: Path, inline: list[dict], args: argparse.Namespace) -> dict:
    """One way over one backlog -> {lines, wall_s, rps, outcome counts}."""
    from api.cli.batch import engine_backend
    from api.cli.remote import RemoteBackend
    from omni.serve.backlog import read_batch_output, run_backlog

    if way == "server_load":
        statuses, wall = asyncio.run(post_all(url, inline, args.clients))
        outcome = {str(k): v for k, v in statuses.items()}
    else:
        out = backlog.parent / f"{way}.jsonl"
        concurrency = args.concurrency or 2 * engine.config.max_batch_records
        if way == "in_process":
            backend, close = engine_backend(engine, backlog), (lambda: None)
        else:
            backend = RemoteBackend(url, backlog.parent, concurrency=concurrency)
            close = backend.close
        try:
            wall = run_backlog(backlog, out, backend, describe, concurrency, progress=False).wall_s
        finally:
            close()
        outcome = dict(Counter("answered" if "response" in r else f"error {r['error']['status']}"
                               for r in read_batch_output(out).values()))
    return {"lines": len(inline), "wall_s": round(wall, 3), "rps": round(len(inline) / wall, 2), "outcome": outcome}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; with --smoke the SMOKE sizes are the defaults (flags given explicitly still win)."""
    parser = argparse.ArgumentParser(description="omni batch in-process vs omni serve under load, one run")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--lines", type=int, default=120, help="backlog lines per round")
    parser.add_argument("--mix", default="text,image,audio", help="line kinds, cycled: text, image, audio")
    parser.add_argument("--clients", type=int, default=16, help="concurrent HTTP clients of server_load")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="omni batch lines in flight (default 2 x max_batch_records, both batch ways)")
    parser.add_argument("--model", default=None, help="default: the embedded tiny checkpoint")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch threads of both engines")
    parser.add_argument("--warm-lines", type=int, default=24, help="warm-up lines per way (not counted)")
    return parse_with_smoke(parser, SMOKE, argv)


def summarize(rounds: list[dict[str, dict]]) -> dict:
    """Throughput ratios in-process / each HTTP way: per round (median) and over all rounds (total lines / time)."""
    total = {way: sum(r[way]["lines"] for r in rounds) / sum(r[way]["wall_s"] for r in rounds) for way in WAYS}
    out = {f"{way}_rps": round(rps, 2) for way, rps in total.items()}
    for way in ("batch_url", "server_load"):
        out[f"ratio_in_process_over_{way}"] = round(total["in_process"] / total[way], 3)
        out[f"ratio_in_process_over_{way}_median_round"] = round(statistics.median(
            r["in_process"]["rps"] / r[way]["rps"] for r in rounds), 3)
    out["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from api.cli.batch import start_engine
    from omni.contract.config import EngineConfig

    mix = [m.strip() for m in args.mix.split(",") if m.strip()]
    print(json.dumps({"env": {"python": platform.python_version(), "cpus": os.cpu_count(), "mix": mix,
                              "lines_per_round": args.lines, "rounds": args.rounds, "clients": args.clients,
                              "model": args.model or "tiny default", "torch_threads": args.torch_threads,
                              "loadavg_1m": round(os.getloadavg()[0], 2), "smoke": args.smoke}}))
    work = Path(tempfile.mkdtemp(prefix="omni-batch-bench-"))
    model_args = (["--model", args.model] if args.model else []) + ["--torch-threads", str(args.torch_threads)]
    proc, url = launch_server(model_args, work / "serve.log")     # it loads while the engine here loads
    engine = None
    rounds, failed = [], False
    try:
        engine = start_engine(EngineConfig(model_path=args.model, torch_threads=args.torch_threads))
        wait_ready(proc, url, work / "serve.log")
        for i, way in enumerate(WAYS):     # not counted: first calls, lazy imports
            warm, warm_inline = write_backlog(work / f"warm-up-{way}", -1 - i, args.warm_lines, mix)
            run_way(way, engine, url, warm, warm_inline, args)
        for n in range(args.rounds):
            order = WAYS[n % len(WAYS):] + WAYS[:n % len(WAYS)]
            result = {}
            for way in order:     # each way its own lines: the two HTTP ways share the server's caches
                tag = n * len(WAYS) + WAYS.index(way)
                backlog, inline = write_backlog(work / f"round-{n}-{way}", tag, args.lines, mix)
                result[way] = run_way(way, engine, url, backlog, inline, args)
            failed |= any(set(r["outcome"]) - {"answered", "200"} for r in result.values())
            rounds.append(result)
            print(json.dumps({"round": n, "order": list(order), **result}))
    finally:
        if engine is not None:
            engine.stop()
        if proc.poll() is None:
            stop_server(proc)
    print(json.dumps({"summary": summarize(rounds)}))
    if failed:
        print(json.dumps({"failures": "see the outcomes above", "work": str(work)}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
