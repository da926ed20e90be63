"""Writes a pre-quantized checkpoint: an unquantized checkpoint directory loaded with a scheme and saved as its
library saves it (`omni export checkpoint MODEL --quantize SCHEME --out DIR`), beside the joint head, processor and
tokenizer files, so `--model DIR` loads it quantized with no `--quantize` (the scheme is in its config.json).

What lands on disk is what transformers' `save_pretrained` writes for the library:
- torchao (int8, fp8, int4): every quantized weight as its tensor subclass's parts (`_weight_qdata`, `_weight_scale`,
  the experts' `_gate_up_proj_qdata` ...) with torchao's metadata in the safetensors header;
- bitsandbytes (nf4): the Linear layers packed with their quant states; the fused experts in the source dtype.
  transformers' bitsandbytes serialization cannot hold bitsandbytes' parametrized expert weights (save_pretrained
  fails with "Undefined Operation encountered!"), so they are quantized again, by the same library call, when the
  checkpoint loads (`quantize.finish`). On disk an nf4 checkpoint therefore saves little; in memory it is 4-bit.
The checkpoint's calibration and training notes are not carried over: they are bound to the unquantized weights.
Knows nothing of requests, serving or argv; loads with `omni.model.backbone`'s class, writes into a fresh directory
renamed into place only when whole.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from omni.model import quantize
from omni.model.backbone import loadable_class, resolve_device
from omni.model.checkpoint import check_checkpoint_files
from omni.model.export import NOT_CARRIED, fresh_target, staged

ARCHITECTURE = "Qwen3OmniMoeForConditionalGeneration"


def export_quantized(source_dir: str | Path, out_dir: str | Path, scheme_name: str, device: str = "auto") -> Path:
    """The checkpoint in `source_dir` quantized with `scheme_name` on `device`, written into the new `out_dir`."""
    from transformers import AutoConfig

    source, out = Path(source_dir), Path(out_dir)
    fresh_target(source, out)
    check_checkpoint_files(source)
    device = resolve_device(device)
    if scheme_name == "none":
        raise quantize.QuantizationError("--quantize none writes nothing new: leave --quantize out to export the "
                                         "checkpoint as it is")
    quantize.check_usable(scheme_name, device)
    config = AutoConfig.from_pretrained(source)
    stored = quantize.stored_scheme(config)
    if stored is not None:
        raise quantize.QuantizationError(f"{source} is already quantized ({stored}); export from the unquantized "
                                         f"checkpoint")
    config.enable_audio_output = False
    model = loadable_class().from_pretrained(source, config=config, dtype="auto", device_map={"": device},
                                             **quantize.loading_arguments(scheme_name, _source_dtype(config)))
    with staged(out) as staging:
        model.save_pretrained(staging)
        _released_config(staging / "config.json")
        for path in sorted(source.iterdir()):
            if path.is_file() and path.suffix != ".safetensors" and path.name not in _WRITTEN:
                shutil.copy2(path, staging / path.name)
        shutil.copy2(source / "joint_head.safetensors", staging / "joint_head.safetensors")
    return out


_WRITTEN = ("config.json", "generation_config.json", "model.safetensors.index.json", *NOT_CARRIED)


def _source_dtype(config: Any) -> Any:
    """The dtype the source's weights are stored in (the compute dtype of nf4's dequantized weights)."""
    import torch

    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "float32"
    return dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype))


def _released_config(path: Path) -> None:
    """The saved config.json names the released architecture (not the loader's subclass) and no audio output."""
    config = json.loads(path.read_text())
    config["architectures"] = [ARCHITECTURE]
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
