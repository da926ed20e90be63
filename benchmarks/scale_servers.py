"""`omni serve --ray` servers for benchmarks/scale.py: start one (its own local Ray cluster) and wait until every
replica runs, stop it and make sure its whole process tree ended, the CPU each kind of process spent (engine
replicas, gateway, Serve's proxy and controller, the rest of Ray, the launcher), and sending payloads with N clients
in flight while those are counted.
Knows nothing of the workloads or of what the benchmark concludes; reads only HTTP answers, /ready, /metrics, the
launcher's log and the OS's CPU counters (psutil).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import psutil
from serving import OMNI, ROOT, free_port, stop_server

PROCESS_KINDS = ("engine", "gateway", "proxy", "controller", "ray_other", "driver", "client")


async def post_all(url: str, payloads: list[bytes], clients: int) -> tuple[list[tuple], float]:
    """Send every payload with `clients` in flight -> ([(status, latency s, Server-Timing)] in send order, wall s)."""
    results: list[tuple | None] = [None] * len(payloads)
    queue = list(enumerate(payloads))[::-1]
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        async def worker() -> None:
            while queue:
                i, payload = queue.pop()
                sent = time.perf_counter()
                r = await client.post("/v1/systemone", content=payload, headers={"Content-Type": "application/json"})
                results[i] = (r.status_code, time.perf_counter() - sent, r.headers.get("server-timing", ""))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return results, time.perf_counter() - started


class Server:
    """One `omni serve --ray` process and its process tree (for CPU accounting and for making sure it all ends)."""

    def __init__(self, name: str, flags: list[str], work: Path):
        self.name = name
        self.log = work / f"{name}-{len(list(work.glob(name + '-*.log')))}.log"
        self.seen: dict[int, psutil.Process] = {}
        self.url = f"http://127.0.0.1:{free_port()}"
        started = time.monotonic()
        with open(self.log, "wb") as log:      # its own session: a Ctrl-C here reaches only this script,
            self.proc = subprocess.Popen(        # which then stops the server the regular way
                [sys.executable, "-c", OMNI, "serve", "--ray", "--port", self.url.rsplit(":", 1)[1],
                 "--log-level", "info", *flags], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        try:
            self.ready_s = self._wait(started)
        except BaseException:
            print(json.dumps({"stopped": self.stop()}), flush=True)
            raise
        self.start_s = time.monotonic() - started

    def _wait(self, started: float) -> float:
        """Until the launcher logs its "on http://" line -> seconds until /ready first said 200. Both wait for
        every engine replica to run (/ready since 0be78b2; the line once `serve.run` returns): before that the
        router knows only some of them."""
        ready_s = None
        while time.monotonic() - started < 300:
            self.tree()                          # remember every process, to be sure they all end
            if self.proc.poll() is not None:
                raise SystemExit(f"omni serve --ray exited ({self.proc.returncode}); see {self.log}")
            if ready_s is None:
                try:
                    if httpx.get(self.url + "/ready", timeout=2).status_code == 200:
                        ready_s = time.monotonic() - started
                except httpx.TransportError:
                    pass
            elif b"omni serve --ray on http://" in self.log.read_bytes():
                return ready_s
            time.sleep(0.2)
        raise SystemExit(f"omni serve --ray not up after 300 s; see {self.log}")

    def tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        for p in procs:
            self.seen.setdefault(p.pid, p)
        return procs

    def cpu(self) -> dict[int, tuple[str, float]]:
        """pid -> (kind, user + system CPU seconds) for every live process of the tree."""
        out = {}
        for p in self.tree():
            try:
                times = p.cpu_times()
                out[p.pid] = (self._kind(p), times.user + times.system)
            except psutil.NoSuchProcess:
                continue
        return out

    def _kind(self, p: psutil.Process) -> str:
        if p.pid == self.proc.pid:
            return "driver"
        line = " ".join(p.cmdline()) or p.name()
        for needle, kind in (("OmniEngine", "engine"), ("OmniGateway", "gateway"), ("ProxyActor", "proxy"),
                             ("ServeController", "controller")):
            if needle in line:
                return kind
        return "ray_other"

    def metric(self, prefix: str) -> dict[str, float]:
        text = httpx.get(self.url + "/metrics", timeout=30).text
        return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
                if line.startswith(prefix) and "_created" not in line}

    def stop(self) -> dict:
        """SIGTERM to the `omni serve` process, wait; then whatever of its tree is still alive is reported (and
        terminated: these are processes this script started)."""
        self.tree()
        started = time.monotonic()
        stop_server(self.proc)
        stop_s = time.monotonic() - started
        _, left = psutil.wait_procs(list(self.seen.values()), timeout=5)
        names = []
        for p in left:
            with contextlib.suppress(psutil.Error):
                names.append(f"{p.pid} {p.name()}")
                p.terminate()
        _, stubborn = psutil.wait_procs(left, timeout=10)
        for p in stubborn:
            with contextlib.suppress(psutil.Error):
                p.kill()
        return {"server": self.name, "exit_code": self.proc.returncode, "stop_s": round(stop_s, 1),
                "left_running": names}


def cpu_by_kind(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds per process kind between two `Server.cpu()` samples (a process that ended in between is lost;
    one that started counts from zero)."""
    out: Counter = Counter()
    for pid, (kind, seconds) in after.items():
        out[kind] += seconds - before.get(pid, (kind, 0.0))[1]
    return dict(out)


def busy(t) -> float:
    """CPU seconds the whole machine spent busy, from `psutil.cpu_times()`."""
    return t.user + t.system + t.nice + t.irq + t.softirq + getattr(t, "steal", 0.0)


def own_cpu() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system


def measure(server: Server, payloads: list[bytes], clients: int) -> tuple[list[tuple], float, dict]:
    """Send the payloads; -> (results, wall s, CPU seconds by process kind, plus this client and the machine)."""
    before, client_before, machine_before = server.cpu(), own_cpu(), psutil.cpu_times()
    results, wall = asyncio.run(post_all(server.url, payloads, clients))
    after, client_after, machine_after = server.cpu(), own_cpu(), psutil.cpu_times()
    cpu = cpu_by_kind(before, after)
    cpu["client"] = client_after - client_before
    cpu["machine"] = busy(machine_after) - busy(machine_before)
    return results, wall, cpu
