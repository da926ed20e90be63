"""An adapter folder made whole again: its base checkpoint with the adapter's head, and its LoRA merged into the
thinker, written in the released layout (`omni export --merge ADAPTER --base DIR --out DIR`).

`merge_adapter` loads the base with `ClefModel.load` and the adapter onto it exactly as a server does
(`omni.model.adapters.load_adapter`: adapter.json and every file it lists checked, the base's sha256 against the one
the adapter was trained on, both named when they differ, the head built strictly, the LoRA injected strictly into the
text decoder), folds the LoRA into the thinker's weights (`LoraSlots.merge`), then writes the result with
`omni.model.export.save_released` into a new (or empty) directory. Every refusal is an AdapterError naming the
adapter and the cause. Knows nothing of training, serving, argv or HTTP.
"""
from __future__ import annotations

import json
from pathlib import Path

from omni.contract.errors import AdapterError
from omni.model.adapters import load_adapter
from omni.model.clef import ClefModel
from omni.model.export import released_head_config, save_released


def merge_adapter(adapter_dir: str | Path, base_dir: str | Path, out_dir: str | Path, *,
                  cache_dir: str | None = None, device: str = "auto", dtype: str = "auto",
                  replace: bool = False) -> Path:
    """Write base + adapter as one checkpoint into `out_dir` (new or empty; with `replace`, an existing directory
    whose checkpoint files are replaced: a fine-tune's own output); the directory written. The base is loaded
    unquantized, on `device` in `dtype`, whatever quantization the adapter was trained over."""
    adapter_path, base, out = Path(adapter_dir), Path(base_dir), Path(out_dir)
    name = adapter_path.name
    if not replace and out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise AdapterError(name, f"{out} already exists and is not an empty directory: merge into a new one")
    if out.resolve() in (base.resolve(), adapter_path.resolve()):
        raise AdapterError(name, "the output directory must differ from the base and the adapter")
    model = ClefModel.load(base, cache_dir=cache_dir, device=device, dtype=dtype, quantization="none")
    adapter = load_adapter(adapter_path, name, base_sha256=model.sha256, hidden_size=model.backbone.hidden_size,
                           device=model.forward.head_device, head_dtype=model.head.hidden_norm.weight.dtype,
                           slots=model.backbone.lora, base=str(base))
    model.head = adapter.head
    if adapter.lora_key is not None:
        model.backbone.lora.merge(adapter.lora_key)
    save_released(model, base, out, backbone_trained=adapter.lora_key is not None)
    own = released_head_config(adapter.manifest.head_config)
    if released_head_config(json.loads((base / "joint_head_config.json").read_text())) != own:
        (out / "joint_head_config.json").write_text(json.dumps(own, indent=2) + "\n")
    return out
