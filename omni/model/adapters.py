"""An adapter loaded beside a base model: its own joint-schema head, optional LoRA weights resident in the base's
thinker, optional calibration and decision policy (policy.toml, bound to it) — and what one request asks of adapters (`Selection`).

`load_adapter` reads an adapter folder (`omni.model.adapter_format`), refuses one made for another base (naming both
fingerprints), checks its files whole, builds its head strictly and, for a LoRA adapter, injects its weights into the
base thinker's `LoraSlots` under a key of its own (a reload gets a new key, so requests admitted with the old
version keep it to their end). `unload_adapter` takes the LoRA weights out again. Which adapters are served under
which names, how many are resident and when one may go is the serving layer's business (omni/serve/adapters.py).
Knows nothing of requests' wire shape, queues, HTTP or the environment.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from omni.contract.errors import AdapterError
from omni.contract.policy import Policy, PolicyError, read_policy
from omni.model.adapter_format import (
    HEAD_FILE,
    MANIFEST_FILE,
    POLICY_FILE,
    AdapterManifest,
    adapter_sha256,
    base_mismatch,
    check_files,
    read_manifest,
)
from omni.model.cache import resident_bytes
from omni.model.calibration import Calibration, CalibrationError, load_calibration
from omni.model.head import JointSchemaHead, build_joint_head
from omni.model.lora import LoraSlots
from omni.model.qlora import check_servable


@dataclass(eq=False)
class Adapter:
    """One loaded version of an adapter (identity, not value, tells two apart)."""

    name: str
    directory: Path
    manifest: AdapterManifest
    sha256: str                        # over adapter.json and its files (audit records name it)
    head: JointSchemaHead
    calibration: Calibration | None
    lora_key: str | None               # its weights' key in the base thinker's LoraSlots; None: head-only
    head_bytes: int
    lora_bytes: int = 0
    manifest_mtime_ns: int = 0         # adapter.json's when loaded (a rescan reloads it when it changed)
    policy: Policy | None = None       # its folder's policy.toml: its decisions are taken under it

    @property
    def mode(self) -> str:
        return self.manifest.mode

    @property
    def nbytes(self) -> int:
        return self.head_bytes + self.lora_bytes

    def audit(self) -> dict[str, Any]:
        """What an audit record names of it."""
        return {"name": self.name, "sha256": self.sha256, "mode": self.mode, "source": str(self.directory),
                "base_sha256": self.manifest.base_sha256}


@dataclass(frozen=True)
class Selection:
    """What one request is answered with: `adapter` (None: the base) and, when shadow scoring is on, a head-only
    `shadow` candidate scored from the same forward."""

    adapter: Adapter | None = None
    shadow: Adapter | None = None


def load_adapter(directory: str | Path, name: str, *, base_sha256: str, hidden_size: int, device: str | torch.device,
                 head_dtype: torch.dtype, slots: LoraSlots, base: str = "the loaded backbone",
                 quantization: str = "none") -> Adapter:
    """The adapter in `directory`, called `name` (a served name is checked by the registry that serves it), checked
    against the base (`base`: how to name it; `quantization`: its text layers' scheme, whatever the scheme the
    adapter was trained over; AdapterError naming the cause)."""
    from safetensors.torch import load_file

    directory = Path(directory)
    if not directory.is_dir():
        raise AdapterError(name, f"{directory} is not a directory")
    manifest = read_manifest(directory, name)
    mismatch = base_mismatch(manifest, base_sha256, base)
    if mismatch is not None:
        raise AdapterError(name, mismatch)
    check_files(directory, manifest, name)
    sha256 = adapter_sha256(directory, manifest)
    try:
        head = build_joint_head(manifest.head_config, load_file(str(directory / HEAD_FILE)), HEAD_FILE)
    except (OSError, ValueError, RuntimeError) as exc:
        raise AdapterError(name, str(exc)) from None
    if head.hidden_size != hidden_size:
        raise AdapterError(name, f"its head reads hidden size {head.hidden_size}, the base's is {hidden_size}")
    head = head.to(device=device, dtype=head_dtype).eval().requires_grad_(False)
    try:
        calibration = load_calibration(directory)
    except CalibrationError as exc:
        raise AdapterError(name, f"calibration.json: {exc}") from None
    policy = _bound_policy(directory, name)
    lora_key, lora_bytes = None, 0
    if manifest.mode == "lora":
        check_servable(quantization, name)
        # a key of this version alone (a reload loads a new one beside it); torch module names may not hold "."
        lora_key = f"{re.sub(r'[^A-Za-z0-9_]', '_', name)}_{uuid.uuid4().hex[:12]}"
        lora_bytes = slots.add(lora_key, directory, name)
    return Adapter(name, directory, manifest, sha256, head, calibration, lora_key,
                   resident_bytes(*head.state_dict().values()), lora_bytes,
                   (directory / MANIFEST_FILE).stat().st_mtime_ns, policy)


def _bound_policy(directory: Path, name: str) -> Policy | None:
    """The adapter folder's policy.toml, read and checked (bound to this adapter, or unbound); None without one."""
    path = directory / POLICY_FILE
    if not path.is_file():
        return None
    try:
        policy = read_policy(path)
    except PolicyError as exc:
        raise AdapterError(name, str(exc)) from None
    if policy.model is not None and policy.model != name:
        raise AdapterError(name, f"its {POLICY_FILE} is bound to model {policy.model!r}, not to this adapter")
    return policy


def unload_adapter(adapter: Adapter, slots: LoraSlots) -> None:
    """Free what the adapter holds in the base (its LoRA weights); its head goes with the last reference to it."""
    if adapter.lora_key is not None:
        slots.remove(adapter.lora_key)
