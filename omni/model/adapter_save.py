"""Writes a fine-tuned model as an adapter folder beside its base checkpoint (omni.model.adapter_format), not as a
whole new checkpoint.

`save_adapter`: the head's state dict (the names and shapes `omni.model.head.build_joint_head` loads strictly, in the
head's dtype) to `joint_head.safetensors`; for mode lora, the trained LoRA weights in peft's own format
(`PeftModel.save_pretrained`: adapter_config.json + adapter_model.safetensors, nothing else — peft's model card is
dropped); then adapter.json listing them with their bytes and sha256. Files of an earlier adapter in the folder that
this one would not list (LoRA files for a head adapter, a calibration fitted for other weights) are removed first, so
adapter.json always describes exactly what is there. Knows nothing of training loops, datasets, serving or argv.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from omni.contract.errors import AdapterError
from omni.model.adapter_format import (
    CALIBRATION_FILE,
    HEAD_FILE,
    LORA_CONFIG_FILE,
    LORA_WEIGHTS_FILE,
    MANIFEST_FILE,
    AdapterManifest,
    LoraSpec,
    write_manifest,
)
from omni.model.export import released_head_config
from omni.model.surface import RecordT, TrainableModel

PEFT_FILES = (LORA_CONFIG_FILE, LORA_WEIGHTS_FILE)
STALE = (MANIFEST_FILE, HEAD_FILE, CALIBRATION_FILE, *PEFT_FILES)


def save_adapter(model: TrainableModel[RecordT], out_dir: str | Path, *, mode: str, lora: LoraSpec | None,
                 base_sha256: str, base_release_date: str | None, training_data_sha256: str | None,
                 base_quantization: str | None = None) -> AdapterManifest:
    """Write `model`'s head (and, for mode lora, its peft LoRA weights) into `out_dir` as an adapter; its manifest.
    `base_quantization`: the scheme the base was quantized as while it was trained (adapter.json records it)."""
    out = Path(out_dir)
    if mode == "lora" and (lora is None or model.backbone.peft_model is None):
        raise AdapterError(out.name, "a lora adapter needs its LoRA spec and the model's peft adapters")
    out.mkdir(parents=True, exist_ok=True)
    for name in STALE:
        (out / name).unlink(missing_ok=True)
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.head.state_dict().items()}
    save_file(state, str(out / HEAD_FILE), metadata={"format": "pt"})
    if mode == "lora":
        save_peft_weights(model.backbone.peft_model, out)
    manifest = AdapterManifest(base_sha256, mode, released_head_config(dict(model.head.config)),
                               lora if mode == "lora" else None, training_data_sha256,
                               base_release_date=base_release_date, base_quantization=base_quantization)
    return write_manifest(out, manifest)


def save_peft_weights(peft_model: Any, out: Path) -> None:
    """peft's adapter_config.json + adapter_model.safetensors of the trained adapter, moved into `out`."""
    with tempfile.TemporaryDirectory(dir=out, prefix=".peft.") as staging:
        peft_model.save_pretrained(staging, safe_serialization=True)
        for name in PEFT_FILES:
            shutil.move(str(Path(staging) / name), str(out / name))
