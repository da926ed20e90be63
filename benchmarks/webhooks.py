"""webhooks: what signed webhooks cost the decision path — `omni serve` latency and throughput under a policy without
a webhook, with a receiver that answers at once, and with one that hangs, measured in one run.

Three loopback `omni serve` processes side by side (the embedded tiny checkpoint, `--torch-threads 1` each), all with
the same policy, which makes every decision `act` (load.py's noul question `visible` acts on either answer at
`auto_at = 0`), so every decision is sent where a webhook is set:
  none   `--policy P` alone;
  fast   `--policy P --webhook URL` to a receiver that answers 204 at once;
  slow   `--policy P --webhook URL --webhook-timeout-s 1 --webhook-tries T` to a receiver that holds every request
         `--hold-s` (3 s) before it answers: every attempt times out, is retried, and the decision ends in the
         dead-letter file (after T tries, or at the graceful stop for those still waiting).
The receivers are ThreadingHTTPServers on 127.0.0.1 in threads of this process; they keep what arrives and check
nothing while the load runs. Each server gets the same small text requests (load.py's bodies: a one-sentence state,
its three QUESTIONS) from `--concurrency` clients, after a warm-up, in rounds that go through every order of the three.
Per mode: p50 / p99 latency and throughput as the clients see them, statuses, the server's own mean time per request
over the timed rounds (its request-duration histogram: not the clients' side, where the receivers' threads share
this interpreter), and the server's /metrics at the end of the load (webhook events, queue depth, in flight,
overall outcomes); the ratios fast / none and slow / none of p50 (issue 21: no response delayed), p99, server mean and
throughput, the time each decision adds at saturation (1 / throughput), and each server's CPU ms per request over its
own rounds (Linux /proc: the sender's work without the receiver's). Then each server is stopped gracefully
(SIGTERM: what is queued or in flight is delivered or dead-lettered), and: the fast receiver must hold every decision
sent exactly once by Idempotency-Key, each with a signature that verifies (`api.http.webhooks.verify`, at the time it
arrived) and nothing dead-lettered; the slow server's dead-letter file must hold every decision it sent, once each
(none is delivered). "Sent" is every decision answered 200, warm-up included, as the server's own
`omni_outcomes_total{question="_overall",outcome="act"}` counts.
Prints JSON lines and a summary; exit 1 if a request failed or a delivery check does not hold.
What it must not know: the sender's internals (it uses the server's flags, responses, /metrics, the dead-letter file
and what the receivers get; `verify` is what any receiver runs).

    .venv/bin/python benchmarks/webhooks.py [--requests 360] [--concurrency 4] [--round-requests 20] [--hold-s 3]
                                            [--slow-tries 3] [--drain-s 5] [--smoke]

60-80 s here (2 cores shared with other work): 20-40 s of it the three servers starting (about 13 s of CPU each),
30 s the load, 7 s the stops (the slow server's drain). `--smoke`: the same code path at tiny sizes (6 requests per
server, 2 clients, a 1 s drain), 30 s here when the machine is quiet (load 2), 45-57 s at load 4-5, all but about
6 s of it the servers starting; its figures mean nothing.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from load import request_bodies, run_load, summarize
from serving import start_servers, stop_server
from smoke import parse_with_smoke

from api.http.webhooks import SIGNATURE_HEADER, verify

MODES = ("none", "fast", "slow")
SECRET = "bench-webhooks-secret-0123456789"          # >= 16 characters, as --webhook-secret requires
POLICY = """version = "bench-webhooks"
[questions.visible]             # load.py's noul question: either answer acts, at any confidence
auto_at = 0.0
act_on = [true, false]
"""
SLOW_TIMEOUT_S = 1.0                                 # --webhook-timeout-s of the slow server: below --hold-s
SMOKE = {"requests": 6, "concurrency": 2, "round_requests": 2, "slow_tries": 2, "drain_s": 1.0}
SERIES = re.compile(r"^(\w+)(?:\{(.*)\})?$")                  # a /metrics series: name{labels}


def emit(kind: str, **fields: object) -> None:
    print(json.dumps({"event": kind, **fields}), flush=True)


class Receiver:
    """A webhook receiver on a free 127.0.0.1 port, in a thread: keeps (Idempotency-Key, X-Omni-Signature, body,
    arrival time) of every POST, then answers 204 after `hold_s` (0: at once)."""

    def __init__(self, hold_s: float):
        self.hold_s = hold_s
        self.got: list[tuple[str, str, bytes, float]] = []
        self.lock = threading.Lock()
        self.release = threading.Event()            # set at close: a held request is let go
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"          # keep-alive, as the sender's client uses it

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.got.append((self.headers.get("Idempotency-Key", ""),
                                         self.headers.get(SIGNATURE_HEADER, ""), body, time.time()))
                if receiver.hold_s > 0:
                    receiver.release.wait(receiver.hold_s)
                try:
                    self.send_response(204)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:                     # the sender gave up on this attempt (its timeout)
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, name=f"receiver-{hold_s:g}s", daemon=True)
        self.thread.start()

    def close(self) -> list[tuple[str, str, bytes, float]]:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            return list(self.got)


def cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system, every thread) a process has used so far; None where /proc is not there."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape(url: str) -> dict[str, float]:
    """The webhook, outcome and request-duration (sum, count) series of a server's /metrics: {'name{labels}': value}."""
    text = httpx.get(url + "/metrics", timeout=30).text
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
            if line.startswith(("omni_webhook_", "omni_outcomes_total", "omni_request_duration_seconds_sum",
                                "omni_request_duration_seconds_count"))}


def server_mean_ms(before: dict[str, float], after: dict[str, float]) -> float:
    """The server's own mean time per decision request between two scrapes (its request-duration histogram), so the
    receiver's work in this process (beside the load's clients) is out of the figure."""
    route = {"route": "/v1/systemone"}
    count = series(after, "omni_request_duration_seconds_count", **route) - \
        series(before, "omni_request_duration_seconds_count", **route)
    total_s = series(after, "omni_request_duration_seconds_sum", **route) - \
        series(before, "omni_request_duration_seconds_sum", **route)
    return round(total_s / count * 1e3, 2) if count else float("nan")


def series(metrics: dict[str, float], name: str, **labels: str) -> float:
    """The sum of the series `name` whose labels include `labels`."""
    total = 0.0
    for key, value in metrics.items():
        match = SERIES.match(key)
        if match and match[1] == name:
            have = dict(re.findall(r'(\w+)="([^"]*)"', match[2] or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += value
    return total


def settle(url: str, sent: int, timeout_s: float = 60) -> tuple[dict[str, float], float]:
    """Poll /metrics until the sender has delivered `sent` and holds nothing -> (metrics, seconds it took)."""
    started = time.monotonic()
    while True:
        metrics = scrape(url)
        done = series(metrics, "omni_webhook_events_total", event="delivered") >= sent and \
            series(metrics, "omni_webhook_queue_depth") == 0 and series(metrics, "omni_webhook_in_flight") == 0
        if done or time.monotonic() - started > timeout_s:
            return metrics, time.monotonic() - started
        time.sleep(0.05)


def server_args(mode: str, receivers: dict[str, Receiver], args: argparse.Namespace, work: Path) -> list[str]:
    base = ["--torch-threads", "1", "--policy", str(work / "policy.toml"), "--drain-timeout-s", str(args.drain_s)]
    if mode == "none":
        return base
    hook = ["--webhook", receivers[mode].url, "--webhook-secret", SECRET,
            "--webhook-dead-letter", str(work / f"dead-letter-{mode}.jsonl")]
    if mode == "slow":
        hook += ["--webhook-timeout-s", str(SLOW_TIMEOUT_S), "--webhook-tries", str(args.slow_tries)]
    return base + hook


def measure(args: argparse.Namespace, work: Path) -> dict:
    """Start the receivers and the three servers, run the rounds, read /metrics, stop gracefully, check deliveries."""
    (work / "policy.toml").write_text(POLICY, encoding="utf-8")
    receivers = {"fast": Receiver(0.0), "slow": Receiver(args.hold_s)}
    got: dict[str, list] = {}
    phases_s: dict[str, float] = {}
    try:
        began = time.monotonic()
        servers = start_servers({mode: (server_args(mode, receivers, args, work), work / f"{mode}.log")
                                 for mode in MODES})
        urls = {mode: url for mode, (_, url) in servers.items()}
        phases_s["start"] = round(time.monotonic() - began, 2)
        began = time.monotonic()
        bodies = request_bodies(["text"], args.requests)
        data: dict[str, tuple[list[float], Counter, float]] = {mode: ([], Counter(), 0.0) for mode in MODES}
        warm: dict[str, Counter] = {}
        stop_s: dict[str, float] = {}
        try:
            for mode, url in urls.items():              # warm-up, not timed (its decisions are sent all the same)
                warm[mode] = asyncio.run(run_load(url, bodies[:2 * args.concurrency], args.concurrency))[1]
            warmed = {mode: scrape(url) for mode, url in urls.items()}
            orders = list(itertools.permutations(MODES))
            step = max(args.concurrency, args.round_requests)
            cpu = dict.fromkeys(MODES, 0.0)           # each server's CPU seconds during its own rounds
            for n, start in enumerate(range(0, len(bodies), step)):
                for mode in orders[n % len(orders)]:
                    cpu_before = cpu_s(servers[mode][0].pid)
                    latencies, statuses, wall = asyncio.run(run_load(urls[mode], bodies[start:start + step],
                                                                     args.concurrency))
                    cpu_after = cpu_s(servers[mode][0].pid)
                    if cpu_before is not None and cpu_after is not None:
                        cpu[mode] += cpu_after - cpu_before
                    total = data[mode]
                    data[mode] = (total[0] + latencies, total[1] + statuses, total[2] + wall)
            metrics = {mode: scrape(url) for mode, url in urls.items()}        # at the end of the load
            phases_s["load"] = round(time.monotonic() - began, 2)
            sent = {mode: warm[mode][200] + data[mode][1][200] for mode in MODES}
            settled, settle_s = settle(urls["fast"], sent["fast"])
        finally:
            for mode, (proc, _) in servers.items():
                started = time.monotonic()
                stop_server(proc)
                stop_s[mode] = round(time.monotonic() - started, 2)
    finally:
        for mode, receiver in receivers.items():
            got[mode] = receiver.close()
    out: dict = {"phases_s": phases_s}
    for mode in MODES:
        latencies, statuses, wall = data[mode]
        out[mode] = {**summarize(latencies, statuses, wall, args.concurrency), "sent": sent[mode],
                     "warm_up_statuses": dict(warm[mode]), "stop_s": stop_s[mode],
                     "server_mean_ms": server_mean_ms(warmed[mode], metrics[mode]),
                     "server_cpu_ms_per_request": round(cpu[mode] / len(latencies) * 1e3, 2) if cpu[mode] else None,
                     "metrics_end_of_load": metrics[mode]}
    out["fast"]["metrics_settled"] = settled
    out["fast"]["settle_s"] = round(settle_s, 3)
    out["fast"]["receiver"] = received(got["fast"])
    out["fast"]["dead_letters"] = dead_letters(work / "dead-letter-fast.jsonl")
    out["slow"]["receiver"] = received(got["slow"])
    out["slow"]["dead_letters"] = dead_letters(work / "dead-letter-slow.jsonl")
    return out


def received(got: list[tuple[str, str, bytes, float]]) -> dict:
    """What a receiver got: POSTs, distinct keys, keys seen more than once, signatures that verify, payload outcomes,
    payloads whose request_id is not their Idempotency-Key."""
    keys = Counter(key for key, _, _, _ in got)
    payloads = [json.loads(body) for _, _, body, _ in got]
    return {"posts": len(got), "distinct_keys": len(keys), "keys_seen_twice_or_more": sum(n > 1 for n in keys.values()),
            "signatures_valid": sum(verify(SECRET, signature, body, now=at) for _, signature, body, at in got),
            "outcomes": dict(Counter(p.get("outcome") for p in payloads)),
            "key_mismatches": sum(p.get("request_id") != key for p, (key, _, _, _) in zip(payloads, got, strict=True))}


def dead_letters(path: Path) -> dict:
    """The dead-letter file after the stop: lines, distinct request ids, by reason, by tries, payload outcomes."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []
    return {"lines": len(lines), "distinct_request_ids": len({line["request_id"] for line in lines}),
            "reasons": dict(Counter(line["reason"] for line in lines)),
            "tries": {str(k): v for k, v in sorted(Counter(line["tries"] for line in lines).items())},
            "outcomes": dict(Counter(line["payload"].get("outcome") for line in lines))}


def checks(out: dict) -> dict[str, bool]:
    """What must hold whatever the timings: every request answered, every decision counted as sent, the fast
    receiver got each exactly once with a valid signature, the slow server dead-lettered each, nothing dropped."""
    fast, slow = out["fast"], out["slow"]
    acts = {mode: series(out[mode]["metrics_end_of_load"], "omni_outcomes_total", question="_overall", outcome="act")
            for mode in MODES}
    return {
        "all_200": all(set(out[m]["statuses"]) == {200} and set(out[m]["warm_up_statuses"]) == {200} for m in MODES),
        "every_decision_acts": all(acts[m] == out[m]["sent"] for m in MODES),
        "fast_each_once": fast["receiver"]["posts"] == fast["receiver"]["distinct_keys"] == fast["sent"],
        "fast_signatures_valid": fast["receiver"]["signatures_valid"] == fast["receiver"]["posts"],
        "fast_keys_match_payloads": fast["receiver"]["key_mismatches"] == 0,
        "fast_delivered_metric": series(fast["metrics_settled"], "omni_webhook_events_total",
                                        event="delivered") == fast["sent"],
        "fast_no_dead_letters": fast["dead_letters"]["lines"] == 0,
        "slow_none_delivered": series(slow["metrics_end_of_load"], "omni_webhook_events_total",
                                      event="delivered") == 0,
        "slow_dead_letters_equal_sent": slow["dead_letters"]["lines"] == slow["dead_letters"]["distinct_request_ids"]
        == slow["sent"],
        "none_dropped": all(series(out[m]["metrics_end_of_load"], "omni_webhook_events_total", event="dropped") == 0
                            for m in ("fast", "slow")),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=360, help="timed requests per server (after a warm-up)")
    parser.add_argument("--concurrency", type=int, default=4, help="concurrent HTTP clients")
    parser.add_argument("--round-requests", type=int, default=20, help="requests per server per round")
    parser.add_argument("--hold-s", type=float, default=3.0,
                        help=f"how long the slow receiver holds each request (above its {SLOW_TIMEOUT_S:g} s timeout)")
    parser.add_argument("--slow-tries", type=int, default=3, help="--webhook-tries of the slow server")
    parser.add_argument("--drain-s", type=float, default=5.0, help="--drain-timeout-s of every server")
    return parse_with_smoke(parser, SMOKE, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.hold_s > SLOW_TIMEOUT_S:
        raise SystemExit(f"--hold-s must be above the slow server's {SLOW_TIMEOUT_S:g} s timeout, not {args.hold_s}")
    started = time.monotonic()
    emit("env", python=sys.version.split()[0], cpus=os.cpu_count(), loadavg_1m=round(os.getloadavg()[0], 2),
         smoke=args.smoke, requests=args.requests, concurrency=args.concurrency, round_requests=args.round_requests,
         hold_s=args.hold_s, slow_timeout_s=SLOW_TIMEOUT_S, slow_tries=args.slow_tries, drain_s=args.drain_s)
    with tempfile.TemporaryDirectory(prefix="omni-webhooks-bench-") as tmp:
        out = measure(args, Path(tmp))
    for mode in MODES:
        emit("mode", mode=mode, **out[mode])
    held = checks(out)
    none = out["none"]
    emit("summary", ratio_p50_fast_over_none=round(out["fast"]["p50_ms"] / none["p50_ms"], 4),
         ratio_p50_slow_over_none=round(out["slow"]["p50_ms"] / none["p50_ms"], 4),
         ratio_p99_fast_over_none=round(out["fast"]["p99_ms"] / none["p99_ms"], 4),
         ratio_p99_slow_over_none=round(out["slow"]["p99_ms"] / none["p99_ms"], 4),
         ratio_server_mean_fast_over_none=round(out["fast"]["server_mean_ms"] / none["server_mean_ms"], 4),
         ratio_server_mean_slow_over_none=round(out["slow"]["server_mean_ms"] / none["server_mean_ms"], 4),
         added_ms_per_decision_fast=round(1e3 / out["fast"]["throughput_rps"] - 1e3 / none["throughput_rps"], 2),
         added_ms_per_decision_slow=round(1e3 / out["slow"]["throughput_rps"] - 1e3 / none["throughput_rps"], 2),
         server_cpu_ms_per_request={mode: out[mode]["server_cpu_ms_per_request"] for mode in MODES},
         ratio_rps_fast_over_none=round(out["fast"]["throughput_rps"] / none["throughput_rps"], 4),
         ratio_rps_slow_over_none=round(out["slow"]["throughput_rps"] / none["throughput_rps"], 4),
         sent={mode: out[mode]["sent"] for mode in MODES},
         fast_received_distinct=out["fast"]["receiver"]["distinct_keys"],
         fast_signatures_valid=out["fast"]["receiver"]["signatures_valid"],
         slow_dead_letters=out["slow"]["dead_letters"]["lines"], slow_attempts_received=out["slow"]["receiver"]["posts"],
         checks=held, phases_s={**out["phases_s"], "stop": round(sum(out[m]["stop_s"] for m in MODES), 2)},
         loadavg_1m_end=round(os.getloadavg()[0], 2), seconds=round(time.monotonic() - started, 1))
    return 0 if all(held.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
