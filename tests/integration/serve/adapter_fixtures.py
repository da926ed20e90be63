"""Adapters written for tests on the tiny checkpoint: a head-only adapter (the base head, perturbed) and a LoRA
adapter (peft, random non-zero weights on the text decoder), each in the adapter format, and the same adapter merged
into a fresh copy of the base — the reference every served answer is compared with."""
from __future__ import annotations

import copy
from pathlib import Path

import torch
from safetensors.torch import save_file

from omni.model.adapter_format import AdapterManifest, LoraSpec, write_manifest
from omni.model.clef import ClefModel
from omni.model.head import build_joint_head
from omni.model.lora import lora_config

TARGETS = ("q_proj", "v_proj", "o_proj")


def _head_state(base: ClefModel, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {k: (v + 0.2 * torch.randn(v.shape, generator=generator) * v.std().clamp(min=1e-3)
                if v.is_floating_point() and v.numel() > 1 else v).contiguous()
            for k, v in base.head.state_dict().items()}


def make_adapter(base: ClefModel, out: Path, seed: int, mode: str = "head", rank: int = 4) -> Path:
    """Write an adapter of `mode` for `base` into `out` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    save_file(_head_state(base, seed), str(out / "joint_head.safetensors"))
    lora = None
    if mode == "lora":
        from peft import get_peft_model

        torch.manual_seed(seed)
        config = lora_config(rank, 2.0 * rank, TARGETS)
        config.init_lora_weights = False            # random A and B: the adapter changes the hidden states
        peft_model = get_peft_model(copy.deepcopy(base.backbone.thinker), config)
        peft_model.save_pretrained(str(out))
        (out / "README.md").unlink(missing_ok=True)
        lora = LoraSpec(rank, 2.0 * rank, TARGETS)
    write_manifest(out, AdapterManifest(base.sha256, mode, dict(base.head.config), lora, "test-data",
                                        base_release_date=base.source.release_date))
    return out


def merged(tiny_dir: Path, adapter_dir: Path, **load) -> ClefModel:
    """A fresh base with the adapter's head and its LoRA merged into the thinker (the reference)."""
    from peft import PeftModel
    from safetensors.torch import load_file

    model = ClefModel.load(tiny_dir, **load)
    from omni.model.adapter_format import read_manifest

    manifest = read_manifest(adapter_dir)
    model.head = build_joint_head(manifest.head_config, load_file(str(adapter_dir / "joint_head.safetensors"))).eval()
    model.forward.head = model.chunks.head = model.head
    if manifest.mode == "lora":
        model.backbone.thinker = PeftModel.from_pretrained(model.backbone.thinker, str(adapter_dir)).merge_and_unload()
        model.backbone.thinker.eval()
    return model
