"""Issue 31, fast by default: torch threads sized from the CPUs this process may use (affinity, cgroup v2 / v1 quota)
less the media decoders', never torch's every-core default; an explicit count wins. The sizing and the quota files'
parsing are pure (fed fake affinities and file texts here); the reader runs on a fake /sys and /proc tree in tmp_path,
and the engine sets what was sized and names it in its log."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch

from omni.contract.config import EngineConfig
from omni.serve.cpus import CpuBudget, cpus_of_quota, torch_threads_for, usable_cpus
from omni.serve.engine import DecisionEngine
from tests.unit.fake_model import FakeModel


@pytest.mark.parametrize(("usable", "decode_threads", "threads"), [
    (1, 2, 1), (2, 2, 1),          # 2 cores beside the decoders: 1 thread, never the pathological 2
    (3, 2, 1), (4, 2, 2), (8, 2, 6), (64, 2, 62), (8, 1, 7), (4, 8, 1), (2, 0, 2)])
def test_torch_threads_are_the_usable_cpus_less_the_decoders_at_least_one(usable, decode_threads, threads):
    assert torch_threads_for(usable, decode_threads) == threads


@pytest.mark.parametrize(("affinity", "quota", "usable"), [
    (2, None, 2), (16, None, 16), (16, 4.0, 4), (16, 1.5, 1), (16, 0.5, 1), (2, 8.0, 2), (1, None, 1)])
def test_usable_cpus_are_the_affinity_capped_by_the_quota_rounded_down(affinity, quota, usable):
    assert CpuBudget(affinity, quota).usable == usable


@pytest.mark.parametrize(("files", "cpus"), [
    ({"cpu_max": "200000 100000\n"}, 2.0), ({"cpu_max": "150000 100000"}, 1.5), ({"cpu_max": "max 100000\n"}, None),
    ({"cpu_max": "50000"}, 0.5), ({"cpu_max": ""}, None), ({"cpu_max": "garbage here"}, None),
    ({"cfs_quota_us": "400000\n", "cfs_period_us": "100000\n"}, 4.0),
    ({"cfs_quota_us": "-1\n", "cfs_period_us": "100000\n"}, None), ({"cfs_quota_us": "100000"}, None), ({}, None)])
def test_quota_files_in_cpus(files, cpus):
    assert cpus_of_quota(**files) == cpus


def fake_sys(tmp_path: Path, self_cgroup: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    proc = tmp_path / "self_cgroup"
    proc.write_text(self_cgroup, encoding="utf-8")
    return root, proc


AFFINITY = len(os.sched_getaffinity(0))


@pytest.mark.parametrize(("self_cgroup", "files", "quota"), [
    ("0::/\n", {"cpu.max": "100000 100000\n"}, 1.0),                                # v2 container: its own root
    ("0::/app.slice/omni.service\n", {"app.slice/omni.service/cpu.max": "max 100000\n",
                                      "app.slice/cpu.max": "250000 100000\n"}, 2.5),  # v2: a parent's quota binds
    ("4:cpu,cpuacct:/docker/abc\n0::/\n", {"cpu,cpuacct/cpu.cfs_quota_us": "300000\n",
                                           "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, 3.0),   # v1, mount root
    ("3:cpu:/a\n", {"cpu/a/cpu.cfs_quota_us": "200000\n", "cpu/a/cpu.cfs_period_us": "100000\n",
                    "cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2.0),
    ("0::/\n", {"cpu.max": "max 100000\n", "cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},
     None),                                                                         # this machine's kind: no quota
    ("", {}, None)])                                                                # nothing readable
def test_the_reader_takes_the_smallest_quota_along_its_cgroups(tmp_path, self_cgroup, files, quota):
    root, proc = fake_sys(tmp_path, self_cgroup, files)
    budget = usable_cpus(root, proc)
    assert budget == CpuBudget(AFFINITY, quota)


def test_the_engine_sets_the_sized_threads_or_the_ones_asked_and_logs_them(caplog):
    before = torch.get_num_threads()
    sized = torch_threads_for(usable_cpus().usable, EngineConfig().decode_threads)
    try:
        with caplog.at_level(logging.INFO, logger="omni.serve.engine"):
            DecisionEngine(EngineConfig(), FakeModel()).load()
            assert torch.get_num_threads() == sized
            assert f"torch threads: {sized} (sized: " in caplog.text
            DecisionEngine(EngineConfig(torch_threads=3), FakeModel()).load()
            assert torch.get_num_threads() == 3
            assert "torch threads: 3 (as asked)" in caplog.text
    finally:
        torch.set_num_threads(before)
