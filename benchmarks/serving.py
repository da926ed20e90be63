"""Loopback `omni serve` processes for the benchmarks: start one (or several at once) on free 127.0.0.1 ports, wait
until ready, stop.

Knows nothing of what a benchmark measures; talks to the server only through /ready.
"""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]  # the servers' working directory
OMNI = "import sys; from api.cli.main import main; sys.exit(main())"  # what the `omni` console script runs


def free_port() -> int:
    """A port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_server(args: list[str], log_path: Path) -> tuple[subprocess.Popen, str]:
    """Start `omni serve ARGS` on a free loopback port, logging to `log_path`, without waiting -> (process, url)."""
    port = free_port()
    log = open(log_path, "wb")  # noqa: SIM115 (the server process writes to it for its whole life)
    proc = subprocess.Popen([sys.executable, "-c", OMNI, "serve", "--port", str(port), "--log-level", "warning",
                             *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def wait_ready(proc: subprocess.Popen, url: str, log_path: Path, timeout_s: float = 300) -> None:
    """Until `url`/ready answers 200; SystemExit (the server killed) if it exits or is not ready in time."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"omni serve exited ({proc.returncode}); see {log_path}")
        try:
            if httpx.get(url + "/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"omni serve not ready; see {log_path}")


def start_server(args: list[str], log_path: Path) -> tuple[subprocess.Popen, str]:
    """Start `omni serve ARGS` on a free loopback port, logging to `log_path`; wait until /ready -> (process, url)."""
    proc, url = launch_server(args, log_path)
    wait_ready(proc, url, log_path)
    return proc, url


def start_servers(specs: dict[str, tuple[list[str], Path]]) -> dict[str, tuple[subprocess.Popen, str]]:
    """Several servers at once ({name: (args, log path)}), started together (their loads overlap), each waited for
    until /ready -> {name: (process, url)}. If one fails, every one of them is stopped."""
    started = {name: launch_server(args, log_path) for name, (args, log_path) in specs.items()}
    try:
        for name, (proc, url) in started.items():
            wait_ready(proc, url, specs[name][1])
    except BaseException:
        for proc, _ in started.values():
            if proc.poll() is None:
                stop_server(proc)
        raise
    return started


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM, then kill if it has not exited within 60 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
