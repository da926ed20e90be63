"""The checks of an adapter folder (omni.model.adapter_format) against its base checkpoint, without loading a weight:
adapter.json valid; every file it lists there, whole and unchanged; each safetensors header readable and whole; the
head's tensors against its head config and the base's hidden size; the LoRA's peft config against adapter.json, and
its tensors against the base thinker's modules (built from the base's config.json on the meta device:
`layout.lora_shapes`); and the base's checkpoint sha256 (omni.model.fingerprint) against the one adapter.json names.

One finding per check, each naming the adapter and the cause; the checks go on after a failure where they still can.
A manifest that does not read stops them (nothing else can be known). Knows nothing of argv, the environment, loading
weights, serving or how findings are printed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from omni.contract.errors import AdapterError, CheckpointError
from omni.model.adapter_format import (
    HEAD_FILE,
    LORA_CONFIG_FILE,
    LORA_WEIGHTS_FILE,
    AdapterManifest,
    base_mismatch,
    check_files,
    read_manifest,
)
from omni.model.doctor import layout
from omni.model.doctor.adapter_size import adapter_bytes
from omni.model.doctor.findings import Finding, exit_code, gib, some_names
from omni.model.doctor.headers import HeaderError, ShardHeader, read_header
from omni.model.fingerprint import checkpoint_sha256


@dataclass
class AdapterReport:
    adapter: Path
    base: Path
    findings: list[Finding] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return exit_code(self.findings)

    def to_json(self) -> dict[str, Any]:
        return {"adapter": str(self.adapter), "base": str(self.base), "exit_code": self.exit_code,
                "findings": [f.to_json() for f in self.findings]}


def said(name: str, cause: str) -> str:
    """A finding's line naming the adapter and the cause (as AdapterError words it)."""
    return str(AdapterError(name, cause))


def check_adapter(adapter: Path, base: Path, cache_dir: Path) -> AdapterReport:
    """Every check of the adapter folder `adapter` against the base checkpoint `base`, in the order printed."""
    report = AdapterReport(adapter, base)
    name = adapter.name
    try:
        manifest = read_manifest(adapter, name)
    except AdapterError as exc:
        report.findings.append(Finding("manifest", "fail", str(exc)))
        return report
    lora = f", LoRA rank {manifest.lora.rank} over {', '.join(manifest.lora.targets)}" if manifest.lora else ""
    report.findings.append(Finding("manifest", "ok", f"adapter {name!r}: mode {manifest.mode}{lora}, "
                                   f"{len(manifest.files)} file{'s' if len(manifest.files) != 1 else ''} listed", {"mode": manifest.mode}))
    report.findings.append(files_finding(adapter, manifest, name))
    headers, finding = read_headers(adapter, manifest, name)
    report.findings.append(finding)
    try:
        config = layout.read_backbone_config(base)
        thinker = layout.meta_model(config).thinker
    except CheckpointError as exc:
        report.findings.append(Finding("base", "fail", said(name, f"the base {base} has no usable config.json: {exc}")))
        config = thinker = None
    hidden = None if config is None else int(config.thinker_config.text_config.hidden_size)
    report.findings.append(head_finding(manifest, headers.get(HEAD_FILE), hidden, name))
    if manifest.mode == "lora":
        report.findings.append(lora_finding(adapter, manifest, headers.get(LORA_WEIGHTS_FILE), thinker, name))
    report.findings.append(fingerprint_finding(manifest, base, cache_dir, name))
    if config is not None and report.exit_code == 0:
        report.findings.append(size_finding(manifest, headers, config, thinker))
    return report


def files_finding(adapter: Path, manifest: AdapterManifest, name: str) -> Finding:
    try:
        check_files(adapter, manifest, name)
    except AdapterError as exc:
        return Finding("files", "fail", str(exc))
    total = sum(entry.bytes for entry in manifest.files.values())
    return Finding("files", "ok", f"{some_names(sorted(manifest.files))}: whole, sha256 as listed ({gib(total)})",
                   {"bytes": total})


def read_headers(adapter: Path, manifest: AdapterManifest, name: str) -> tuple[dict[str, ShardHeader], Finding]:
    """The listed safetensors files' headers (those that read), and a finding for them."""
    headers: dict[str, ShardHeader] = {}
    problems = []
    for file in sorted(f for f in manifest.files if f.endswith(".safetensors")):
        try:
            headers[file] = read_header(adapter / file)
        except FileNotFoundError:
            problems.append(f"{file} is missing")
        except (HeaderError, OSError) as exc:
            problems.append(str(exc))
    if problems:
        return headers, Finding("weight files", "fail", said(name, "; ".join(problems)), {"problems": problems})
    return headers, Finding("weight files", "ok", f"{len(headers)} safetensors header{'s' if len(headers) != 1 else ''} whole")


def head_finding(manifest: AdapterManifest, header: ShardHeader | None, hidden: int | None, name: str) -> Finding:
    """The head's tensors against adapter.json's head config, and its hidden size against the base's."""
    try:
        config = layout.read_head_config_values(manifest.head_config)
        expected = layout.expected_head(config)
    except CheckpointError as exc:
        return Finding("joint head", "fail", said(name, f"head_config: {exc}"))
    if header is None:
        return Finding("joint head", "fail", said(name, f"{HEAD_FILE} cannot be read (above)"))
    comparison = layout.compare(expected, header.tensors)
    if not comparison.matches:
        return mismatch("joint head", name, f"{HEAD_FILE} does not match its head_config: ", comparison)
    if hidden is not None and config.get("hidden_size") != hidden:
        return Finding("joint head", "fail", said(name, f"its head takes hidden_size {config.get('hidden_size')}, "
                                                        f"the base's hidden size is {hidden}"))
    return Finding("joint head", "ok", f"{len(expected)} tensors match head_config (width {config.get('width')})")


def lora_finding(adapter: Path, manifest: AdapterManifest, header: ShardHeader | None, thinker: Any,
                 name: str) -> Finding:
    """peft's config against adapter.json; the LoRA tensors against the base thinker's text decoder."""
    assert manifest.lora is not None           # mode lora (read_manifest)
    try:
        peft = json.loads((adapter / LORA_CONFIG_FILE).read_text())
        peft_targets = peft["target_modules"]
        peft_rank, peft_alpha = peft["r"], peft["lora_alpha"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Finding("lora", "fail", said(name, f"{LORA_CONFIG_FILE} does not read as peft's config: {exc}"))
    spec = manifest.lora
    if peft_rank != spec.rank or float(peft_alpha) != spec.alpha or sorted(peft_targets) != sorted(spec.targets):
        return Finding("lora", "fail", said(name, f"{LORA_CONFIG_FILE} (r {peft_rank}, alpha {peft_alpha}, targets "
                                                  f"{sorted(peft_targets)}) disagrees with adapter.json (rank "
                                                  f"{spec.rank}, alpha {spec.alpha}, targets {sorted(spec.targets)})"))
    if header is None or thinker is None:
        return Finding("lora", "fail", said(name, "LoRA tensors not compared: the weights or the base's config "
                                                  "cannot be read (above)"))
    expected = layout.lora_shapes(thinker, spec.targets, spec.rank)
    if not expected:
        return Finding("lora", "fail", said(name, f"no module of the base's text decoder is named "
                                                  f"{', '.join(spec.targets)}"))
    comparison = layout.compare(expected, header.tensors)
    if not comparison.matches:
        return mismatch("lora", name, f"{LORA_WEIGHTS_FILE} does not fit the base thinker: ", comparison)
    return Finding("lora", "ok", f"{len(expected)} tensors fit the base's text decoder (rank {spec.rank}, "
                   f"alpha {spec.alpha:g})")


def fingerprint_finding(manifest: AdapterManifest, base: Path, cache_dir: Path, name: str) -> Finding:
    try:
        sha256 = checkpoint_sha256(base, cache_dir)
    except OSError as exc:
        return Finding("base", "fail", said(name, f"the base {base} cannot be hashed: {exc}"))
    data = {"adapter_base_sha256": manifest.base_sha256, "base_sha256": sha256}
    mismatch = base_mismatch(manifest, sha256, str(base))
    if mismatch is not None:
        return Finding("base", "fail", said(name, mismatch), data)
    return Finding("base", "ok", f"{base} is its base (sha256 {sha256[:12]}…)", data)


def size_finding(manifest: AdapterManifest, headers: dict[str, ShardHeader], config: Any, thinker: Any) -> Finding:
    """What the adapter's weights take, as `adapter_size.adapter_bytes` counts them for its config (info)."""
    dtypes = {h.path.name: next(iter(h.tensors.values())).dtype_name for h in headers.values() if h.tensors}
    head_dtype = getattr(torch, dtypes.get(HEAD_FILE, "float32"))
    lora_dtype = getattr(torch, dtypes.get(LORA_WEIGHTS_FILE, "float32"))
    size = adapter_bytes(config, manifest.head_config, rank=manifest.lora.rank if manifest.lora else None,
                         targets=manifest.lora.targets if manifest.lora else (), head_dtype=head_dtype,
                         lora_dtype=lora_dtype, thinker=thinker)
    return Finding("size", "info", f"weights {gib(size.total_bytes)} (head {gib(size.head_bytes)}, LoRA "
                   f"{gib(size.lora_bytes)})", size.to_json())


def mismatch(check: str, name: str, what: str, comparison: layout.Comparison) -> Finding:
    """A failed comparison of tensors as a finding: `what`, then each kind of problem, the names in its data."""
    data = {"missing": comparison.missing, "mismatched": comparison.mismatched, "unexpected": comparison.unexpected}
    return Finding(check, "fail", said(name, what + problems(comparison)), data)


def problems(comparison: layout.Comparison) -> str:
    return " | ".join(f"{what} {len(names)}: {some_names(names)}" for what, names in
                      (("missing", comparison.missing), ("shape-mismatched", comparison.mismatched),
                       ("unexpected", comparison.unexpected)) if names)
