"""soak: a bounded loopback soak of `omni serve` under a mix of good and bad clients: 0 lost, 0 x 5xx, RSS bounded.

One server (the shipped defaults, tiny model, `--body-timeout-s 3` so stalled uploads resolve within the run) and
`--clients` threads for `--seconds` (default 300). Each client draws, again and again:
    text 35% · image 15% · audio 10% · corrupt upload 10% · unreadable JSON 5% · context-filling state 5%
    · stalled upload 10% (announces 500 bytes, sends 2: must get its 408) · disconnect mid-upload 10%
Every request that should be answered is: a valid one with 200 (a context-filling one with 200, or 429 when the long
work ahead of it would not let it finish before its deadline), a bad one with its 4xx, a stalled one with 408.
"Lost" = no answer, a connection error or a timeout where an answer was due; a disconnecting client expects none.
The server's RSS is sampled every 5 s, with the bytes its caches hold (`omni_cache_bytes` in /metrics): RSS less
the caches is what the traffic itself leaves behind, and must stay flat; the caches are bounded by their budgets
(`--media-cache-mb 64 --prefix-cache-mb 128` here, small enough to fill within the run). Prints JSON lines and a
summary; nothing is asserted.
Loopback only, bounded in time and in count (`--max-requests`).
What it must not know: engine internals (HTTP and /proc of the server it started).

    .venv/bin/python benchmarks/soak.py [--seconds 300] [--clients 4] [--threads 1] [--max-requests 20000]
                                        [--media-cache-mb 64] [--prefix-cache-mb 128] [--keep-log PATH]
                                        [--long-lines 1300] [--sample-s 5] [--smoke]

`--smoke`: the same code path at tiny sizes (6 s, 2 clients, a ~6,000-character "long" state, RSS sampled every
second), to check that it runs; its figures mean nothing.
"""
from __future__ import annotations

import argparse
import base64
import http.client
import json
import random
import socket
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
from serving import start_server, stop_server
from smoke import parse_with_smoke

from fixtures.media import image_bytes, wav_bytes

QUESTIONS = {"ok": {"type": "noul", "instructions": "Is the unit fine?"},
             "team": {"type": "choice", "instructions": "Who handles it?", "criteria": {"hvac": None, "power": "P"}},
             "severity": {"type": "score", "instructions": "How severe?", "criteria": ["none", "minor", "major"]}}
MIX = [("text", 35), ("image", 15), ("audio", 10), ("corrupt", 10), ("bad_json", 5), ("long", 5), ("stalled", 10),
       ("disconnect", 10)]
EXPECTED = {"text": {200}, "image": {200}, "audio": {200}, "long": {200, 429}, "corrupt": {415, 422}, "bad_json": {422},
            "stalled": {408}}
LINE = "Customer log line: the rooftop unit rattled at 14:02, technician noted loose fan blade; "
# --smoke: the same code path at tiny sizes (explicit flags still win)
SMOKE = {"seconds": 6.0, "clients": 2, "long_lines": 70, "sample_s": 1.0}


def url_of(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


class Bodies:
    """The request bodies the clients draw from (photos and clips repeat, so the media cache sees hits)."""

    def __init__(self, rng: random.Random, long_lines: int = 1300):
        self.rng = rng
        self.long_lines = long_lines
        self.images = [url_of("image/png", image_bytes("PNG", "RGB", 64 + 8 * i, 48)) for i in range(6)]
        self.clips = [url_of("audio/wav", wav_bytes(0.5 + 0.25 * i, 16000, 1)) for i in range(3)]
        self.broken = [url_of("image/png", image_bytes("PNG")[:60]), url_of("image/png", b"\x89PNG\r\n\x1a\n" * 4),
                       url_of("image/jpeg", b"\xff\xd8\xff" + bytes(50))]

    def make(self, kind: str, n: int) -> bytes:
        state = f"Ticket {n}: the unit rattles since the last service visit."
        extra = {"image": {"images": [self.rng.choice(self.images)]}, "audio": {"audio": [self.rng.choice(self.clips)]},
                 "corrupt": {"images": [self.rng.choice(self.broken)]}}.get(kind, {})
        if kind == "long":
            state = f"{n} " + LINE * self.long_lines                # 1,300: ~115,000 characters, fills the context
        if kind == "bad_json":
            return b'{"state": "unterminated'
        return json.dumps({"state": state, "questions": QUESTIONS, **extra}).encode()


def send(port: int, body: bytes) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=180)
    try:
        connection.request("POST", "/v1/systemone", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def stalled(port: int) -> int:
    """Announce 500 bytes, send 2, wait for the server's answer (its status, or 0 if none came)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 500\r\n\r\n{\"")
        head = sock.recv(64)
        return int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else 0


def disconnect(port: int, body: bytes) -> None:
    """Send the headers and part of the body, then hang up."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body[:len(body) // 3])
        time.sleep(0.05)


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_kind: dict[str, Counter] = {kind: Counter() for kind, _ in MIX}
        self.lost = 0
        self.unexpected: Counter = Counter()
        self.requests = 0

    def add(self, kind: str, status: int | str) -> None:
        with self.lock:
            self.requests += 1
            self.by_kind[kind][str(status)] += 1
            if kind in EXPECTED and status not in EXPECTED[kind]:
                self.unexpected[f"{kind}:{status}"] += 1
                if not isinstance(status, int) or status == 0:
                    self.lost += 1


def client(port: int, seed: int, until: float, max_requests: int, tally: Tally, long_lines: int = 1300) -> None:
    rng = random.Random(seed)
    bodies = Bodies(rng, long_lines)
    kinds, weights = zip(*MIX, strict=True)
    n = 0
    while time.monotonic() < until and tally.requests < max_requests:
        kind = rng.choices(kinds, weights)[0]
        n += 1
        try:
            if kind == "stalled":
                tally.add(kind, stalled(port))
            elif kind == "disconnect":
                disconnect(port, bodies.make("text", n))
                tally.add(kind, "hung up")
            else:
                tally.add(kind, send(port, bodies.make(kind, seed * 1_000_000 + n)))
        except (OSError, http.client.HTTPException) as exc:
            tally.add(kind, f"no answer: {type(exc).__name__}")


def rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("VmRSS:")) // 1024


def cache_mib(url: str) -> int:
    """The bytes the server's caches hold now (sum of `omni_cache_bytes` over caches), in MiB."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return int(sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("omni_cache_bytes{")) // 2**20)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; with --smoke the SMOKE sizes are the defaults (flags given explicitly still win)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="torch threads in the server")
    parser.add_argument("--max-requests", type=int, default=20_000)
    parser.add_argument("--media-cache-mb", type=int, default=64)
    parser.add_argument("--prefix-cache-mb", type=int, default=128)
    parser.add_argument("--keep-log", type=Path, help="copy the server's log (at info) here")
    parser.add_argument("--long-lines", type=int, default=1300,
                        help="log lines in the context-filling state (1,300: ~115,000 characters)")
    parser.add_argument("--sample-s", type=float, default=5.0, help="RSS and cache bytes sampled this often")
    return parse_with_smoke(parser, SMOKE, argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tally, samples, caches = Tally(), [], []
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "soak.log"
        proc, url = start_server(["--torch-threads", str(args.threads), "--body-timeout-s", "3", "--log-level", "info",
                                  "--media-cache-mb", str(args.media_cache_mb),
                                  "--prefix-cache-mb", str(args.prefix_cache_mb)], log_path)
        port = int(url.rsplit(":", 1)[1])
        samples.append(rss_mib(proc.pid))
        caches.append(cache_mib(url))
        until = time.monotonic() + args.seconds
        threads = [threading.Thread(target=client, args=(port, seed, until, args.max_requests, tally, args.long_lines))
                   for seed in range(args.clients)]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            time.sleep(args.sample_s)
            samples.append(rss_mib(proc.pid))
            caches.append(cache_mib(url))
            print(json.dumps({"event": "progress", "requests": tally.requests, "rss_mib": samples[-1],
                              "cache_mib": caches[-1]}), flush=True)
        server_log = log_path.read_text(errors="replace")
        if args.keep_log:
            args.keep_log.write_text(server_log)
        stop_server(proc)
    statuses = Counter(s for counter in tally.by_kind.values() for s in counter.elements())
    print(json.dumps({"event": "summary", "smoke": args.smoke, "seconds": args.seconds, "clients": args.clients,
                      "requests": tally.requests,
                      "lost": tally.lost, "5xx": sum(n for s, n in statuses.items() if s.startswith("5")),
                      "unexpected": dict(tally.unexpected), "by_kind": {k: dict(v) for k, v in tally.by_kind.items()},
                      "rss_mib_start": samples[0], "rss_mib_max": max(samples), "rss_mib_end": samples[-1],
                      "rss_mib_samples": samples, "cache_mib_samples": caches,
                      "rss_less_caches_mib": [r - c for r, c in zip(samples, caches, strict=True)],
                      "server_log_errors": server_log.count(" ERROR "),
                      "server_log_tracebacks": server_log.count("Traceback")}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
