"""Adapters for tests on the tiny checkpoint: `make_adapter` (fixtures/adapters.py, shared with benchmarks/adapters.py:
a head-only adapter, the base head perturbed, or a LoRA adapter with random non-zero weights on the text decoder) and
the same adapter merged into a fresh copy of the base — the reference every served answer is compared with."""
from __future__ import annotations

from pathlib import Path

from fixtures.adapters import make_adapter
from omni.model.clef import ClefModel
from omni.model.head import build_joint_head

__all__ = ["make_adapter", "merged"]


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
