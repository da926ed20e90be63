"""The CPUs this process may actually use, and the torch threads sized from them when none are asked for.

torch's own default is every core the machine has. Beside one other busy process on 2 cores that is the worst
choice there is: its threads wait for each other at every operation while one of them is descheduled (sequential
text requests: 1,490 ms p50 against 41 ms with 1 thread, issue 31). So `torch_threads = 0` means sized here:

    usable CPUs    the scheduler affinity (`os.sched_getaffinity`), capped by the smallest cgroup CPU quota of this
                   process's cgroup and its parents (v2 `cpu.max`, v1 `cpu.cfs_quota_us / cpu.cfs_period_us`),
                   rounded down, at least 1
    torch threads  the usable CPUs less the threads that decode media (`decode_threads`), at least 1

`torch_threads_for` and `cpus_of_quota` are pure (tests feed them fake affinities and quota files); `usable_cpus`
reads the machine, and is called where the engine or a CLI command starts, never at import. Knows nothing of
torch, argv, HTTP or the environment variables.
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
SELF_CGROUP = Path("/proc/self/cgroup")


@dataclass(frozen=True)
class CpuBudget:
    """What this process may use: CPUs in its affinity and its cgroup quota in CPUs (None: no quota)."""

    affinity: int
    quota: float | None = None

    @property
    def usable(self) -> int:
        """The affinity capped by the quota rounded down (a 1.5-CPU quota is 1 CPU's worth of threads), >= 1."""
        cap = self.affinity if self.quota is None else min(self.affinity, math.floor(self.quota))
        return max(1, cap)

    def describe(self) -> str:
        quota = "no cgroup CPU quota" if self.quota is None else f"cgroup quota {self.quota:g} CPUs"
        return f"{self.usable} usable CPUs (affinity {self.affinity}, {quota})"


def torch_threads_for(usable: int, decode_threads: int) -> int:
    """torch's intra-op threads for `usable` CPUs: what the media decoders (`decode_threads`) leave, at least 1."""
    return max(1, usable - max(0, decode_threads))


def cpus_of_quota(cpu_max: str | None = None, cfs_quota_us: str | None = None,
                  cfs_period_us: str | None = None) -> float | None:
    """A cgroup's CPU quota in CPUs from its files' text: v2 `cpu.max` ("200000 100000", "max 100000") or v1
    `cpu.cfs_quota_us` ("-1": none) over `cpu.cfs_period_us`. None for no quota, or text that does not parse."""
    if cpu_max is not None:
        parts = cpu_max.split()
        quota, period = (parts + ["100000"])[:2] if parts else ("max", "100000")
    elif cfs_quota_us is not None and cfs_period_us is not None:
        quota, period = cfs_quota_us.strip(), cfs_period_us.strip()
    else:
        return None
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:        # "max": no quota
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def usable_cpus(root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP) -> CpuBudget:
    """This process's CPUs, read from the machine: the affinity and the smallest quota along its cgroup paths."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:         # no affinity call on this platform (macOS): every CPU counts
        affinity = os.cpu_count() or 1
    quotas = [q for q in _quotas(root, _own_cgroups(self_cgroup)) if q is not None]
    return CpuBudget(affinity, min(quotas) if quotas else None)


def _own_cgroups(self_cgroup: Path) -> list[tuple[str, str]]:
    """(controllers, path) of each line of /proc/self/cgroup ("0::/a/b" for v2, "4:cpu,cpuacct:/a" for v1)."""
    try:
        lines = self_cgroup.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return [(parts[1], parts[2]) for parts in (line.split(":", 2) for line in lines) if len(parts) == 3]


def _quotas(root: Path, cgroups: list[tuple[str, str]]) -> Iterator[float | None]:
    """The quota of every cgroup directory that limits this process: its own and each parent, v2 and v1 (the
    mount root included: inside a container it is the container's own cgroup whatever /proc/self/cgroup says)."""
    v2 = [path for controllers, path in cgroups if controllers == ""] or ["/"]
    v1 = [path for controllers, path in cgroups if "cpu" in controllers.split(",")]
    for directory in _up_from(root, v2):
        yield cpus_of_quota(cpu_max=_read(directory / "cpu.max"))
    for mount in (root / "cpu", root / "cpu,cpuacct", root / "cpuacct,cpu"):
        for directory in _up_from(mount, v1 or ["/"]):
            yield cpus_of_quota(cfs_quota_us=_read(directory / "cpu.cfs_quota_us"),
                                cfs_period_us=_read(directory / "cpu.cfs_period_us"))


def _up_from(mount: Path, paths: Iterable[str]) -> Iterator[Path]:
    """mount/PATH and each of its parents up to `mount` itself, once each."""
    seen: set[Path] = set()
    for path in paths:
        directory = mount / path.strip("/")
        for one in (directory, *directory.parents):
            if one in seen or not one.is_relative_to(mount):
                continue
            seen.add(one)
            yield one


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None
