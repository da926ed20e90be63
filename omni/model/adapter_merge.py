"""An adapter folder made whole again: its base checkpoint with the adapter's head, and its LoRA merged into the
thinker, written in the released layout (`omni export --merge ADAPTER --base DIR --out DIR`).

`merge_adapter` reads and checks adapter.json and every file it lists (`omni.model.adapter_format`), loads the base
with `ClefModel.load` and refuses it when its sha256 is not the one the adapter was trained on (both named), builds
the adapter's head with the loader's strict rules (`omni.model.head.build_joint_head`), injects its peft LoRA weights
into the thinker strictly (every weight present and of the base's shape, nothing else, the text decoder only) and
merges them (`merge_and_unload`), then writes the result with `omni.model.export.save_released` into a new (or empty)
directory. Every refusal is an AdapterError naming the adapter and the cause. Knows nothing of training, serving,
argv or HTTP.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors.torch import load_file

from omni.contract.errors import AdapterError
from omni.model.adapter_format import (
    HEAD_FILE,
    LORA_CONFIG_FILE,
    LORA_WEIGHTS_FILE,
    AdapterManifest,
    check_files,
    read_manifest,
)
from omni.model.clef import ClefModel
from omni.model.export import released_head_config, save_released
from omni.model.head import JointSchemaHead, build_joint_head
from omni.model.lora import TEXT_DECODER


def merge_adapter(adapter_dir: str | Path, base_dir: str | Path, out_dir: str | Path, *,
                  cache_dir: str | None = None) -> Path:
    """Write base + adapter as one checkpoint into `out_dir` (new or empty); the directory written."""
    adapter, base, out = Path(adapter_dir), Path(base_dir), Path(out_dir)
    name = adapter.name
    manifest = read_manifest(adapter, name)
    check_files(adapter, manifest, name)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise AdapterError(name, f"{out} already exists and is not an empty directory: merge into a new one")
    if out.resolve() in (base.resolve(), adapter.resolve()):
        raise AdapterError(name, "the output directory must differ from the base and the adapter")
    model = ClefModel.load(base, cache_dir=cache_dir)
    check_base(manifest, model.sha256, name, base)
    head = adapter_head(adapter, manifest, name)
    model.head = head.to(model.head.hidden_norm.weight.device, model.head.hidden_norm.weight.dtype).eval()
    if manifest.mode == "lora":
        model.backbone.thinker = merged_thinker(model.backbone.thinker, adapter, name)
    save_released(model, base, out, backbone_trained=manifest.mode == "lora")
    own = released_head_config(manifest.head_config)
    if released_head_config(json.loads((base / "joint_head_config.json").read_text())) != own:
        (out / "joint_head_config.json").write_text(json.dumps(own, indent=2) + "\n")
    return out


def check_base(manifest: AdapterManifest, base_sha256: str, name: str, base: Path) -> None:
    """AdapterError naming both fingerprints when the adapter was trained on another checkpoint."""
    if manifest.base_sha256 != base_sha256:
        raise AdapterError(name, f"it was trained on the base checkpoint with sha256 {manifest.base_sha256}, but "
                           f"{base} has sha256 {base_sha256}: not its base")


def adapter_head(adapter: Path, manifest: AdapterManifest, name: str) -> JointSchemaHead:
    """The adapter's joint head, built from its manifest's head config and loaded strictly."""
    try:
        state = load_file(str(adapter / HEAD_FILE))
    except (OSError, ValueError) as exc:       # unreadable safetensors (check_files passed: not truncated)
        raise AdapterError(name, f"{HEAD_FILE} does not read: {exc}") from None
    try:
        return build_joint_head(dict(manifest.head_config), state).eval()
    except ValueError as exc:
        raise AdapterError(name, f"its head does not load: {exc}") from None


def merged_thinker(thinker: Any, adapter: Path, name: str) -> Any:
    """`thinker` with the adapter's peft LoRA weights injected strictly and merged into its own weights."""
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

    try:
        config = LoraConfig.from_pretrained(str(adapter))
        state = load_file(str(adapter / LORA_WEIGHTS_FILE))
    except (OSError, ValueError, TypeError) as exc:
        raise AdapterError(name, f"{LORA_CONFIG_FILE} / {LORA_WEIGHTS_FILE} do not read: {exc}") from None
    try:
        peft_model = get_peft_model(thinker, config)
    except (ValueError, RuntimeError) as exc:
        raise AdapterError(name, f"its LoRA does not fit the base thinker: {exc}") from None
    outside = [n for n, m in thinker.named_modules() if hasattr(m, "lora_A") and not n.startswith(TEXT_DECODER)]
    if outside:
        raise AdapterError(name, f"its LoRA must sit in the thinker's text decoder only, not in {outside[0]}")
    try:
        result: Any = set_peft_model_state_dict(peft_model, state)      # torch's (missing, unexpected) keys
    except RuntimeError as exc:                 # a tensor of another shape
        raise AdapterError(name, f"{LORA_WEIGHTS_FILE} does not fit the base thinker: {exc}") from None
    missing = sorted(k for k in result.missing_keys if "lora_" in k)
    unexpected = sorted(result.unexpected_keys)
    if missing or unexpected:
        raise AdapterError(name, f"{LORA_WEIGHTS_FILE} does not match its config: missing {len(missing)} "
                           f"({', '.join(missing[:2])}), unexpected {len(unexpected)} ({', '.join(unexpected[:2])})")
    return peft_model.merge_and_unload()
