"""`omni doctor [--model DIR] [--adapter DIR]`: is this machine (and this checkpoint, and this adapter) ready? One
screen of plain lines, or `--json`.

Device, dtype, the context limit and the prefix cache come from the same `OMNI_*` settings `omni serve` reads
(`api.http.settings`), overridden by the flags, so the memory estimate is for the configuration that will serve.
Exit 0 when no check failed (warnings and info included), 1 when one did (the failing lines say why), 2 for a usage
error: a bad flag or setting, or a `--model` that names no directory (nor a hub id already in the local cache).
The checks are `omni.model.doctor`'s, plus the torch threads a server here would run with (`omni.serve.cpus`: the
CPUs this process may use); this module reads argv and prints. `--adapter DIR` adds the checks of an adapter folder
against its base (`omni.model.doctor.adapter`): `--model`, or the embedded default when none is given. `--plan`
prints the memory plan instead (`api.cli.doctor_plan`). Knows nothing of torch or model internals.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from omni.contract.config import DTYPES

if TYPE_CHECKING:   # at run time imported lazily: they pull in torch
    from omni.contract.config import EngineConfig
    from omni.model.doctor.adapter import AdapterReport
    from omni.model.doctor.examine import DoctorReport
    from omni.model.doctor.findings import Finding
    from omni.serve.cpus import CpuBudget

DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
STATUS_WIDTH, CHECK_WIDTH = 5, 14


def device_spec(value: str) -> str:
    if not DEVICE.match(value):
        raise argparse.ArgumentTypeError(f"{value!r}: expected auto, cpu, cuda or cuda:N")
    return value


def add_doctor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", metavar="DIR",
                        help="a checkpoint directory (or a hub id already downloaded) to check without loading it")
    parser.add_argument("--device", type=device_spec, default=None,
                        help="where the model would load: cpu, cuda, cuda:1 … (default: cuda if available)")
    parser.add_argument("--dtype", default=None, choices=DTYPES,
                        help="the dtype the weights would load in (default auto: bfloat16 on CUDA, float32 on CPU)")
    parser.add_argument("--max-context-tokens", type=int, default=None,
                        help="the request size the memory estimate is for (default: the configured limit, 64000)")
    parser.add_argument("--adapter", metavar="DIR", default=None,
                        help="an adapter folder to check (without loading it) against its base: --model, or the "
                             "embedded default")
    parser.add_argument("--plan", action="store_true",
                        help="a memory plan instead of the checks: weight bytes per --quantize scheme, one request's "
                             "peak at the configured limits, the caches, and which GPUs it fits (docs/memory-plan.md)")
    parser.add_argument("--json", action="store_true", help="print the findings (or the plan) as JSON")


def run_doctor(args: argparse.Namespace) -> int:
    from api.http.settings import Settings, SettingsError
    from omni.model.doctor.examine import examine, locate

    try:
        base = Settings.from_env().engine
    except SettingsError as exc:
        print(f"omni doctor: {exc}", file=sys.stderr)
        return 2
    overrides = {"device": args.device, "dtype": args.dtype, "max_context_tokens": args.max_context_tokens}
    config = replace(base, **{k: v for k, v in overrides.items() if v is not None})   # ConfigError: exit 2
    directory = locate(args.model) if args.model else None                           # CheckpointError: exit 2
    if args.plan:
        return print_plan(config, directory, args.json)
    from omni.serve.cpus import usable_cpus

    report = examine(config, directory)
    report = replace(report, system=[*report.system, torch_threads(config, usable_cpus())])
    adapter = check_adapter_flag(args.adapter, directory, config.cache_dir)
    if args.json:
        body = report.to_json()
        if adapter is not None:
            body["adapter"] = adapter.to_json()
            body["exit_code"] = max(report.exit_code, adapter.exit_code)
            body["ok"] = body["exit_code"] == 0
        print(json.dumps(body, indent=2, ensure_ascii=False))
    else:
        print("\n".join(screen(report, adapter)))
    return max(report.exit_code, adapter.exit_code if adapter is not None else 0)


def print_plan(config: EngineConfig, directory: Path | None, as_json: bool) -> int:
    """`--plan`: the memory plan of `directory` (or the embedded default) at `config`'s limits; exit 0."""
    from api.cli.doctor_plan import checkpoint_plan, plan_json, plan_screen
    from omni.model.checkpoint import embedded_default

    directory = directory or embedded_default(config.cache_dir)
    plan = checkpoint_plan(config, directory)                                        # CheckpointError: exit 2
    print(json.dumps(plan_json(plan, directory), indent=2) if as_json else "\n".join(plan_screen(plan, directory)))
    return 0


def check_adapter_flag(adapter: str | None, directory: Path | None, cache_dir: str | None) -> AdapterReport | None:
    """The adapter's report against `directory` (or the embedded default); None without --adapter."""
    if adapter is None:
        return None
    from omni.contract.errors import AdapterError
    from omni.model.checkpoint import default_cache_dir, embedded_default
    from omni.model.doctor.adapter import check_adapter

    path = Path(adapter).expanduser()
    if not path.is_dir():
        raise AdapterError(path.name or adapter, f"{adapter}: no such directory")
    return check_adapter(path, directory or embedded_default(cache_dir), default_cache_dir(cache_dir))


def torch_threads(config: EngineConfig, budget: CpuBudget) -> Finding:
    """The torch threads `config` runs with on `budget`: set (a warning when more than the usable CPUs) or sized."""
    from omni.model.doctor.findings import Finding
    from omni.serve.cpus import torch_threads_for

    sized = torch_threads_for(budget.usable, config.decode_threads)
    basis = f"{budget.describe()} less {config.decode_threads} decode threads"
    data = {"threads": config.torch_threads or sized, "sized": sized, "usable_cpus": budget.usable,
            "affinity_cpus": budget.affinity, "quota_cpus": budget.quota, "decode_threads": config.decode_threads}
    if not config.torch_threads:
        return Finding("torch threads", "info", f"{sized}, sized: {basis}", data)
    if config.torch_threads > budget.usable:
        return Finding("torch threads", "warn", f"{config.torch_threads} as set, more than the {budget.usable} usable "
                       f"CPUs: oversubscribed threads wait for each other (0 sizes them: {sized})", data)
    return Finding("torch threads", "info", f"{config.torch_threads} as set (sized would be {sized}: {basis})", data)


def screen(report: DoctorReport, adapter: AdapterReport | None = None) -> list[str]:
    """The report as plain lines: a title, one line per check, a verdict."""
    lines = [f"omni doctor: the model would load on {report.device} as {report.dtype}"]
    lines += [line(f) for f in report.system]
    if report.directory is not None:
        lines.append(f"checkpoint {report.directory}")
        lines += [line(f) for f in report.checkpoint]
    findings = list(report.findings)
    if adapter is not None:
        lines.append(f"adapter {adapter.adapter} (base {adapter.base})")
        lines += [line(f) for f in adapter.findings]
        findings += adapter.findings
    failed = [f.check for f in findings if f.status == "fail"]
    warned = [f.check for f in findings if f.status == "warn"]
    warnings = f"{len(warned)} warning{'s' if len(warned) != 1 else ''} ({', '.join(warned)})" if warned else ""
    if failed:
        lines.append(f"{len(failed)} check{'s' if len(failed) != 1 else ''} failed: {', '.join(failed)}"
                     + (f"; {warnings}" if warnings else "") + " (exit 1)")
    else:
        lines.append("ready: nothing failed" + (f"; {warnings}" if warnings else "") + " (exit 0)")
    return lines


def line(finding: Finding) -> str:
    return f"  {finding.status:<{STATUS_WIDTH}} {finding.check:<{CHECK_WIDTH}} {finding.detail}"
