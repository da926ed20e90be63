"""cache: what remembering media and prompt prefixes buys, measured in one run on this CPU with the tiny checkpoint.

Four measurements, each against a baseline measured in the same run (rounds alternate, so load from other
processes on a shared machine hits both alike; the headline is the median round):

1. repeat media with new questions — a 21 s 1280x720 clip with its soundtrack plus a 1024x768 photo; every round
   asks five new questions about them. Cold = an engine with both caches off (every request starts from nothing,
   as before the caches); warm = the same request to an engine that has seen the media and the state before
   (media cache and prefix cache hit). Ratio cold / warm.
2. 64 questions in ONE isolated call (`x_isolation: "isolated"`: the prefix once, 64 blocks) vs 64 one-question
   calls, on the same media (a 5 s 720p clip and the photo), both cold (caches off for the 64 calls; the
   isolated call's prefix is not cached beforehand). Also: the 64 calls with the caches on (prefix hits).
3. the same photo with a different state each time: media cache only (the prefix differs) vs caches off.
4. memory: two `omni serve` processes (caches on with `--media-cache-mb` / `--prefix-cache-mb` budgets, and caches
   off) each get 1,000 requests whose images are all distinct; their RSS is sampled every 50 requests, after a
   0.2 s pause. The caches may hold at most their budgets, so RSS(on) - RSS(off) must stay under the sum of the
   budgets and stop growing once the caches are full.

Prints JSON lines and a summary. Not a test: nothing is asserted; figures depend on the machine.
What it must not know: engine internals (it uses `DecisionEngine.decide`, the model's `forget_prefixes`, HTTP, and
the caches' public counters).

    .venv/bin/python benchmarks/cache.py [--rounds 5] [--threads 1] [--requests 1000] [--budget-mb 32] [--smoke]

Sizes can be scaled down (`--long-clip-s`, `--short-clip-s`, `--clip-size`, `--isolated-questions`,
`--sample-every`); `--smoke` does so (1-2 s clips at 320x240, 4 isolated questions, 20 requests per server, one
round) to check that the same code path runs; its figures mean nothing.
"""
from __future__ import annotations

import argparse
import base64
import http.client
import io
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from serving import start_servers, stop_server
from smoke import parse_with_smoke

from fixtures.media import image_bytes, video_bytes
from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.serve.engine import DecisionEngine

# --smoke: the same code path at tiny sizes (explicit flags still win)
SMOKE = {"rounds": 1, "isolated_rounds": 1, "requests": 20, "budget_mb": 1.0, "long_clip_s": 2.0, "short_clip_s": 1.0,
         "clip_size": "320x240", "isolated_questions": 4, "sample_every": 10}


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def questions(tag: str, n: int) -> dict:
    """`n` noul questions whose text (and so whose tokens) depend on `tag`."""
    return {f"{tag}_{k}": {"type": "noul", "instructions": f"{tag}: is defect {k} visible or audible?"}
            for k in range(n)}


def body(media: dict, state: str, qs: dict, **extra) -> dict:
    return {"state": state, "questions": qs, **media, **extra}


def timed(engine: DecisionEngine, request: dict) -> tuple[float, dict]:
    """Seconds for one in-process `decide`, and the decision's cache outcomes."""
    started = time.perf_counter()
    decision = engine.decide(parse_request(request, engine.config))
    return time.perf_counter() - started, decision.cache


def emit(event: str, **fields) -> dict:
    line = {"event": event, **fields}
    print(json.dumps(line), flush=True)
    return line


def repeat_media(on: DecisionEngine, off: DecisionEngine, media: dict, rounds: int) -> dict:
    """Case 1: five new questions per round about the same clip + photo; warm (caches on) vs cold (caches off)."""
    state = "Inspection of unit 7 after the service visit."
    timed(on, body(media, state, questions("warmup", 5)))                   # the media and prefix, seen once
    cold, warm, outcomes = [], [], []
    for r in range(rounds):
        request = body(media, state, questions(f"round{r}", 5))
        cold.append(timed(off, request)[0])
        seconds, cache = timed(on, request)
        warm.append(seconds)
        outcomes.append(cache)
    return emit("repeat_media", cold_s=_round(cold), warm_s=_round(warm), cache=outcomes[-1],
                ratio_median=_ratio(cold, warm))


def isolated_64(on: DecisionEngine, off: DecisionEngine, media: dict, rounds: int, n_questions: int = 64) -> dict:
    """Case 2: 64 questions in one isolated call vs 64 one-question calls (cold), and vs 64 calls with caches on."""
    singles_cold, singles_warm, isolated = [], [], []
    for r in range(rounds):
        state = f"Bench test {r}: the fan and the nameplate of unit 9."
        qs = questions(f"q{r}", n_questions)
        on.model.forget_prefixes()                                          # the isolated call computes its prefix
        isolated.append(timed(on, body(media, state, qs, x_isolation="isolated"))[0])
        on.model.forget_prefixes()
        singles_cold.append(sum(timed(off, body(media, state, {k: v}))[0] for k, v in qs.items()))
        singles_warm.append(sum(timed(on, body(media, state, {k: v}))[0] for k, v in qs.items()))
    return emit("isolated_64", questions=n_questions, isolated_s=_round(isolated), singles_cold_s=_round(singles_cold),
                singles_caches_on_s=_round(singles_warm), ratio_vs_cold_median=_ratio(singles_cold, isolated),
                ratio_vs_caches_on_median=_ratio(singles_warm, isolated))


def same_photo(on: DecisionEngine, off: DecisionEngine, photo: dict, rounds: int) -> dict:
    """Case 3: the same photo, a new state each time: the media cache alone saves the decode and the encode."""
    timed(on, body(photo, "warm-up state", questions("p", 3)))
    cold, warm = [], []
    for r in range(rounds * 4):
        request = body(photo, f"Ticket {r}: customer photo of the unit, state {r}.", questions("p", 3))
        cold.append(timed(off, request)[0])
        warm.append(timed(on, request)[0])
    return emit("same_photo", caches_off_s=_round(cold), media_cache_s=_round(warm), ratio_median=_ratio(cold, warm),
                saved_ms_median=round((statistics.median(cold) - statistics.median(warm)) * 1e3, 1))


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("VmRSS:"))


def distinct_images(n: int) -> list[bytes]:
    """`n` different 256x192 PNGs (the same picture with one pixel changed)."""
    base = np.asarray(Image.open(io.BytesIO(image_bytes("PNG", "RGB", 256, 192))).convert("RGB"))
    out = []
    for i in range(n):
        pixels = base.copy()
        pixels[i % 192, (i // 192) % 256] = (i * 37 % 256, i * 91 % 256, 255 - i % 256)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "PNG")
        out.append(buffer.getvalue())
    return out


def memory(requests: int, budget_mb: float, threads: int, sample_every: int = 50) -> dict:
    """Case 4: RSS of a caches-on and a caches-off server over `requests` requests with distinct images (both
    servers started together; each driven alone while the other one idles)."""
    images = distinct_images(requests)
    budgets = ["--media-cache-mb", str(budget_mb), "--prefix-cache-mb", str(budget_mb)]
    modes = {"caches_on": budgets, "caches_off": ["--media-cache-mb", "0", "--prefix-cache-mb", "0"]}
    samples: dict[str, list[int]] = {}
    stats: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        servers = start_servers({mode: ([*flags, "--torch-threads", str(threads)], Path(tmp) / f"{mode}.log")
                                 for mode, flags in modes.items()})
        try:
            for mode, (proc, url) in servers.items():
                samples[mode] = _drive(proc.pid, url, images, sample_every)
                stats[mode] = _cache_lines(url)
                stop_server(proc)
        finally:
            for proc, _ in servers.values():
                if proc.poll() is None:
                    stop_server(proc)
    on, off = samples["caches_on"], samples["caches_off"]
    half = len(on) // 2
    return emit("memory", requests=requests, budget_mb_each=budget_mb, rss_mib_on=[k // 1024 for k in on],
                rss_mib_off=[k // 1024 for k in off], peak_over_off_mib=round((max(on) - max(off)) / 1024, 1),
                budget_total_mib=2 * budget_mb, growth_second_half_on_mib=round((max(on[half:]) - on[half]) / 1024, 1),
                cache_metrics_on=stats["caches_on"])


def _drive(pid: int, url: str, images: list[bytes], sample_every: int = 50) -> list[int]:
    """One request per image (sequential, http.client); RSS in KiB after every `sample_every`, sampled after a 0.2 s
    pause (the server settles: its heap trimmer runs after evictions, off the model thread)."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    samples = [rss_kib(pid)]
    for i, image in enumerate(images):
        payload = json.dumps(body({"images": [data_url("image/png", image)]}, f"Photo {i} from the field.",
                                  questions("m", 2))).encode()
        connection.request("POST", "/v1/systemone", payload, {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise SystemExit(f"request {i}: HTTP {response.status}")
        if (i + 1) % sample_every == 0:
            time.sleep(0.2)
            samples.append(rss_kib(pid))
    connection.close()
    return samples


def _cache_lines(url: str) -> str:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    return "; ".join(line for line in text.splitlines() if line.startswith("omni_cache_") and "_created" not in line)


def _round(values: list[float]) -> list[float]:
    return [round(v, 4) for v in values]


def _ratio(slow: list[float], fast: list[float]) -> float:
    return round(statistics.median(slow) / statistics.median(fast), 2)


def make_media(long_s: float = 21.0, short_s: float = 5.0, width: int = 1280, height: int = 720) -> dict:
    """The clips and photo of the cases, as data URLs (the 21 s 720p clip takes a few seconds to encode)."""
    photo = [data_url("image/jpeg", image_bytes("JPEG", "RGB", 1024, 768))]
    long_clip = [data_url("video/mp4", video_bytes(seconds=long_s, width=width, height=height, fps=25))]
    short_clip = [data_url("video/mp4", video_bytes(seconds=short_s, width=width, height=height, fps=25))]
    return {"long": {"images": photo, "videos": long_clip}, "short": {"images": photo, "videos": short_clip},
            "photo": {"images": photo}}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; with --smoke the SMOKE sizes are the defaults (flags given explicitly still win)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--isolated-rounds", type=int, default=2, help="rounds of case 2 (each is 64+64+1 calls)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (in-process and in each server)")
    parser.add_argument("--requests", type=int, default=1000, help="requests per server in case 4")
    parser.add_argument("--budget-mb", type=float, default=32.0, help="each cache's budget in case 4")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--long-clip-s", type=float, default=21.0, help="case 1's clip")
    parser.add_argument("--short-clip-s", type=float, default=5.0, help="case 2's clip")
    parser.add_argument("--clip-size", default="1280x720", help="both clips' WIDTHxHEIGHT")
    parser.add_argument("--isolated-questions", type=int, default=64, help="case 2's questions")
    parser.add_argument("--sample-every", type=int, default=50, help="case 4: RSS sampled after every N requests")
    return parse_with_smoke(parser, SMOKE, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    emit("env", threads=args.threads, rounds=args.rounds, smoke=args.smoke)
    width, height = (int(x) for x in args.clip_size.split("x"))
    media = make_media(args.long_clip_s, args.short_clip_s, width, height)
    on = DecisionEngine(EngineConfig()).load()
    off = DecisionEngine(EngineConfig(media_cache_mb=0, prefix_cache_mb=0)).load()
    results = [repeat_media(on, off, media["long"], args.rounds),
               isolated_64(on, off, media["short"], args.isolated_rounds, args.isolated_questions),
               same_photo(on, off, media["photo"], args.rounds)]
    if not args.skip_memory:
        results.append(memory(args.requests, args.budget_mb, args.threads, args.sample_every))
    emit("summary", **{r["event"]: {k: v for k, v in r.items() if "ratio" in k or "mib" in k and "rss" not in k}
                       for r in results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
