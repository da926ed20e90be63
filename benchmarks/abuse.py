"""abuse: work bounded by what the context can use, and no head-of-line blocking, against real `omni serve` processes.

1. fairness — a server with chunked prefill (the default, 1,024-token chunks) and one without
   (`--prefill-chunk-tokens 0`). Each round: a context-filling request (a state that fills the 64k-token context)
   alone; then the same long request with a small request sent 2 s into it. Reported per server: the small
   request's latency, its ratio to the long request's time, and the long request's slowdown over the unchunked
   server's alone-time. Goals: the small one waits about one chunk (<= 1/20 of the long request) and chunking slows the
   long one by <= 1.3x.
2. bounded work — a state that just fills the context vs a state at the body cap (40 MiB with the default limits),
   each on a fresh server: time, the server's peak RSS (VmHWM) and its RSS before and after (after a short pause).
   Goals: time <= 1.2x, peak RSS <= 1.5x, and RSS back to its baseline afterwards.

Loopback only, bounded in count and time. Prints JSON lines and a summary; nothing is asserted.
What it must not know: engine internals (it talks HTTP and reads /proc of the server it started).

    .venv/bin/python benchmarks/abuse.py [--rounds 2] [--threads 1] [--skip-fairness] [--skip-bounded] [--smoke]

Sizes can be scaled down (`--context-tokens`, `--long-chars`, `--fill-chars`, `--body-cap-bytes`,
`--small-after-s`); `--smoke` does so (a 4,096-token context, one round, a 1 MiB body cap) to check that the same
code path runs; its figures mean nothing.
"""
from __future__ import annotations

import argparse
import http.client
import json
import tempfile
import threading
import time
from pathlib import Path

from serving import start_servers, stop_server
from smoke import parse_with_smoke

QUESTIONS = {"urgent": {"type": "noul", "instructions": "Does the log report an urgent fault?"},
             "team": {"type": "choice", "instructions": "Who handles it?", "criteria": {"hvac": None, "power": "P"}}}
LINE = "Customer log line: the rooftop unit rattled at 14:02, technician noted loose fan blade; "


def emit(event: str, **fields) -> dict:
    line = {"event": event, **fields}
    print(json.dumps(line), flush=True)
    return line


def post(url: str, body: bytes, timeout_s: float = 300) -> tuple[int, float, dict]:
    """(status, seconds, parsed body) of one POST /v1/systemone."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
    started = time.perf_counter()
    connection.request("POST", "/v1/systemone", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    payload = response.read()
    seconds = time.perf_counter() - started
    connection.close()
    return response.status, seconds, json.loads(payload or b"{}")


def state_body(chars: int, tag: str) -> bytes:
    """A request whose state is `chars` characters of log lines (1.69 characters per token with the tiny tokenizer,
    so ~110,000 characters fill the 64k-token context)."""
    state = f"{tag} " + (LINE * (chars // len(LINE) + 1))[:chars]
    return json.dumps({"state": state, "questions": QUESTIONS}).encode()


SMALL = json.dumps({"state": "Short ticket: the fan rattles.", "questions": QUESTIONS}).encode()
# --smoke: the same code path at tiny sizes (explicit flags still win)
SMOKE = {"rounds": 1, "context_tokens": 4096, "long_chars": 10_000, "fill_chars": 7_000, "body_cap_bytes": 2**20,
         "small_after_s": 0.3}


def fairness(rounds: int, threads: int, flags: list[str], long_chars: int, small_after_s: float) -> dict:
    """Case 1: the small request's wait behind a context-filling one, with and without chunked prefill."""
    servers = {"chunked": [], "unchunked": ["--prefill-chunk-tokens", "0"]}
    results: dict[str, dict[str, list[float]]] = {name: {"long_alone_s": [], "long_with_small_s": [], "small_s": []}
                                                  for name in servers}
    with tempfile.TemporaryDirectory() as tmp:
        running = start_servers({name: ([*own, *flags, "--torch-threads", str(threads), "--prefix-cache-mb", "0"],
                                        Path(tmp) / f"{name}.log") for name, own in servers.items()})
        try:
            for r in range(rounds):
                for name, (_, url) in running.items():
                    long = state_body(long_chars, f"round {r} alone")          # well past the context: truncated
                    results[name]["long_alone_s"].append(post(url, long)[1])
                    long_s, small_s = _long_with_small(url, state_body(long_chars, f"round {r} shared"),
                                                       small_after_s)
                    results[name]["long_with_small_s"].append(long_s)
                    results[name]["small_s"].append(small_s)
                    emit("fairness_round", server=name, round=r, **{k: round(v[-1], 3) for k, v in
                                                                      results[name].items()})
        finally:
            for proc, _ in running.values():
                stop_server(proc)
    chunked, unchunked = results["chunked"], results["unchunked"]
    return emit("fairness", **{name: {k: [round(x, 3) for x in v] for k, v in values.items()}
                               for name, values in results.items()},
                small_over_long_chunked=round(max(chunked["small_s"]) / min(chunked["long_with_small_s"]), 4),
                small_over_long_unchunked=round(max(unchunked["small_s"]) / min(unchunked["long_with_small_s"]), 4),
                long_slowdown_chunked=round(min(chunked["long_with_small_s"]) / min(unchunked["long_alone_s"]), 3),
                long_alone_chunked_over_unchunked=round(min(chunked["long_alone_s"]) / min(unchunked["long_alone_s"]), 3))


def _long_with_small(url: str, long_body: bytes, small_after_s: float) -> tuple[float, float]:
    """Send the long request, then `small_after_s` later the small one; (long seconds, small seconds)."""
    box: dict[str, float] = {}
    thread = threading.Thread(target=lambda: box.setdefault("long", post(url, long_body)[1]))
    thread.start()
    time.sleep(small_after_s)
    status, small_s, _ = post(url, SMALL)
    assert status == 200
    thread.join()
    return box["long"], small_s


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(field + ":"))


def bounded(threads: int, flags: list[str], fill_chars: int, body_cap_bytes: int) -> dict:
    """Case 2: a state that fills the context vs a state at the body cap, each on a fresh server (both started
    together; each measured alone while the other one idles)."""
    cases = {"fills_context": state_body(fill_chars, "fill"), "body_cap": state_body(body_cap_bytes - 4096, "cap")}
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        servers = start_servers({name: ([*flags, "--torch-threads", str(threads), "--prefix-cache-mb", "0"],
                                        Path(tmp) / f"{name}.log") for name in cases})
        try:
            for name, body in cases.items():
                proc, url = servers[name]
                post(url, SMALL)
                time.sleep(0.5)
                before = rss_kib(proc.pid)
                status, seconds, payload = post(url, body)
                time.sleep(1.0)
                out[name] = {"status": status, "seconds": round(seconds, 3), "body_mib": round(len(body) / 2**20, 2),
                             "rss_before_mib": before // 1024, "rss_after_mib": rss_kib(proc.pid) // 1024,
                             "peak_rss_mib": rss_kib(proc.pid, "VmHWM") // 1024,
                             "input_tokens": payload.get("usage", {}).get("input_tokens"),
                             "truncated_tokens": payload.get("x_truncated_state_tokens"),
                             "truncated_chars": payload.get("x_truncated_state_chars")}
                emit("bounded_case", case=name, **out[name])
                stop_server(proc)
        finally:
            for proc, _ in servers.values():
                if proc.poll() is None:
                    stop_server(proc)
    fill, cap = out["fills_context"], out["body_cap"]
    return emit("bounded", time_ratio=round(cap["seconds"] / fill["seconds"], 3),
                peak_rss_ratio=round(cap["peak_rss_mib"] / fill["peak_rss_mib"], 3),
                rss_after_minus_before_mib=cap["rss_after_mib"] - cap["rss_before_mib"])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; with --smoke the SMOKE sizes are the defaults (flags given explicitly still win)."""
    from api.http.settings import Settings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads in each server")
    parser.add_argument("--skip-fairness", action="store_true")
    parser.add_argument("--skip-bounded", action="store_true")
    parser.add_argument("--context-tokens", type=int, default=None,
                        help="the servers' --max-context-tokens (default: theirs, 64,000)")
    parser.add_argument("--long-chars", type=int, default=150_000,
                        help="fairness: the long request's state, well past the context (truncated)")
    parser.add_argument("--fill-chars", type=int, default=110_000,
                        help="bounded: a state that just fills the context (1.69 characters per token)")
    parser.add_argument("--body-cap-bytes", type=int, default=Settings().body_cap_bytes,
                        help="bounded: the body of the capped case (default: the servers' body cap)")
    parser.add_argument("--small-after-s", type=float, default=2.0,
                        help="fairness: the small request is sent this long after the long one")
    return parse_with_smoke(parser, SMOKE, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    flags = ["--max-context-tokens", str(args.context_tokens)] if args.context_tokens else []
    results = []
    if not args.skip_fairness:
        results.append(fairness(args.rounds, args.threads, flags, args.long_chars, args.small_after_s))
    if not args.skip_bounded:
        results.append(bounded(args.threads, flags, args.fill_chars, args.body_cap_bytes))
    emit("summary", **{r["event"]: {k: v for k, v in r.items() if k != "event" and not isinstance(v, dict)}
                       for r in results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
