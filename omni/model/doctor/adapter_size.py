"""How many bytes an adapter's weights take (omni.model.adapter_format): the joint head's tensors, plus for LoRA of
rank r over some module names the lora_A / lora_B tensors of every targeted Linear in the thinker's text decoder —
counted from the modules of the thinker a config describes, built on the meta device (`layout.meta_model`), and the
head built from its config on the meta device (`layout.expected_head`). Nothing is guessed from formulas: the shapes
are those the real classes make. The files add their safetensors headers (a few KB) and the JSON files.

`real_backbone_config()`: the released Qwen3-Omni-30B-A3B thinker (`REAL_TEXT`: the text decoder's values in the
release's config.json, `thinker_config.text_config`; transformers' `Qwen3OmniMoeTextConfig` defaults are another
model's — 28 layers of 28 heads — so they are written here), and `REAL_HEAD` the presumed omni head (Clef-flash's
published head config with the omni hidden size 2048: the omni head config is not published). Knows nothing of
adapter folders, findings, training or argv.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from omni.model.doctor import layout

# Qwen/Qwen3-Omni-30B-A3B-Instruct config.json, thinker_config.text_config: what shapes the text decoder
REAL_TEXT = {"vocab_size": 152064, "hidden_size": 2048, "intermediate_size": 768, "num_hidden_layers": 48,
             "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "moe_intermediate_size": 768,
             "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
             "norm_topk_prob": True, "tie_word_embeddings": False,
             "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [24, 20, 20],
                                 "interleaved": True, "mrope_interleaved": True}}
# the towers' outputs land in the text decoder's width (their own shapes do not change an adapter's bytes)
REAL_TOWERS = {"vision_config": {"out_hidden_size": 2048}, "audio_config": {"output_dim": 2048}}
# Clef-flash's published head with hidden_size 2048 (presumed for omni): 109,175,812 parameters
REAL_HEAD = {"hidden_size": 2048, "width": 1024, "routing_layers": 2, "layers": 4, "heads": 16, "feedforward": 4096}
QKVO = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class AdapterBytes:
    """An adapter's weight bytes: the head's, the LoRA's (0 for a head-only adapter), and their parameter counts."""

    head_params: int
    head_bytes: int
    lora_params: int
    lora_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.head_bytes + self.lora_bytes

    def to_json(self) -> dict[str, int]:
        return {**asdict(self), "total_bytes": self.total_bytes}


def real_backbone_config() -> Any:
    """The released Qwen3-Omni-30B-A3B's config (thinker only, audio output off), as `layout.meta_model` takes it."""
    from transformers import Qwen3OmniMoeConfig

    return Qwen3OmniMoeConfig(thinker_config={"text_config": dict(REAL_TEXT), **REAL_TOWERS},
                              enable_audio_output=False)


def adapter_bytes(backbone_config: Any, head_config: dict[str, Any], *, rank: int | None = None,
                  targets: Sequence[str] = QKVO, head_dtype: torch.dtype = torch.float32,
                  lora_dtype: torch.dtype = torch.float32, thinker: Any = None) -> AdapterBytes:
    """The weight bytes of an adapter on the model `backbone_config` describes: its head (`head_config`, stored in
    `head_dtype`) and, when `rank` is given, a LoRA of that rank over `targets` (stored in `lora_dtype`). `thinker`:
    the meta thinker of that config when the caller has built it already."""
    head_params = sum(math.prod(shape) for shape in layout.expected_head(dict(head_config)).values())
    lora_params = 0
    if rank is not None:
        thinker = thinker if thinker is not None else layout.meta_model(backbone_config).thinker
        lora_params = sum(math.prod(shape) for shape in layout.lora_shapes(thinker, tuple(targets), rank).values())
    return AdapterBytes(head_params, head_params * head_dtype.itemsize, lora_params, lora_params * lora_dtype.itemsize)
