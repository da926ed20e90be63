"""`omni doctor` as one call: the machine's findings, and with a checkpoint its own and the memory it needs on the
device an `EngineConfig` would load it on (device, dtype, head dtype, context limit and prefix cache from the config).

`locate` turns `--model` into a directory without downloading anything: a local directory, or a hub id already in
the Hugging Face cache. Knows nothing of argv, the environment or how findings are printed.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from omni.contract.config import EngineConfig
from omni.contract.errors import CheckpointError
from omni.model.backbone import resolve_device, resolve_dtype
from omni.model.doctor.directory import check_directory
from omni.model.doctor.findings import Finding, exit_code
from omni.model.doctor.memory import available_bytes, estimate_memory, memory_findings
from omni.model.doctor.system import system_findings

MiB = 1024 ** 2


@dataclass(frozen=True)
class DoctorReport:
    device: str
    dtype: str
    system: list[Finding]
    directory: Path | None = None
    checkpoint: tuple[Finding, ...] = ()

    @property
    def findings(self) -> list[Finding]:
        return [*self.system, *self.checkpoint]

    @property
    def exit_code(self) -> int:
        return exit_code(self.findings)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.exit_code == 0, "exit_code": self.exit_code, "device": self.device, "dtype": self.dtype,
                "system": [f.to_json() for f in self.system],
                "checkpoint": None if self.directory is None else {
                    "directory": str(self.directory), "findings": [f.to_json() for f in self.checkpoint]}}


def locate(model: str) -> Path:
    """The directory `model` names: a local directory, or a hub id's snapshot already in the HF cache (CheckpointError
    otherwise; the doctor never downloads)."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise CheckpointError(f"{model} is a file, not a checkpoint directory")
    if model.startswith((".", "/", "~")) or model.count("/") != 1:
        raise CheckpointError(f"{model}: no such directory")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, local_files_only=True))
    except Exception as exc:  # not cached, or no huggingface_hub: either way there is nothing to check
        raise CheckpointError(f"{model} is neither a directory nor a hub id in the local cache (the doctor never "
                              f"downloads: fetch it first, e.g. `hf download {model}`): {type(exc).__name__}") from exc


def examine(config: EngineConfig, directory: Path | None = None) -> DoctorReport:
    """Every finding for this machine and, when given, the checkpoint `directory` loaded as `config` would."""
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    system = system_findings(device, dtype)
    dtype_name = str(dtype).removeprefix("torch.")
    if directory is None:
        return DoctorReport(device, dtype_name, system)
    report = check_directory(directory)
    checkpoint = list(report.findings)
    if report.shape is not None:
        estimate = estimate_memory(report.shape, device, dtype, getattr(torch, config.head_dtype),
                                   config.max_context_tokens, int(config.prefix_cache_mb * MiB))
        available, source = available_bytes(device)
        checkpoint += memory_findings(estimate, available, source)
    return DoctorReport(device, dtype_name, system, directory, tuple(checkpoint))
