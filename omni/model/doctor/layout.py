"""The released layout a checkpoint's configs promise: every tensor name and shape the loader will ask for, built from
`config.json` and `joint_head_config.json` with the real classes on torch's meta device (shapes, no memory, no data),
and how a set of safetensors headers compares with it.

The backbone is transformers' `Qwen3OmniMoeForConditionalGeneration` with audio output off, as `omni.model.backbone`
loads it; its runtime names (fused experts, nested language model) are turned back into the checkpoint's names by
transformers' own `revert_weight_conversion`, the step `save_pretrained` takes. Besides `backbone` (which loads it) and
`tiny` (which builds a random one), the one module that names the class: it only builds it empty. The head is
`omni.model.head.JointSchemaHead`. `ModelShape` carries the figures a memory estimate needs. `lora_shapes`: the
tensors a peft LoRA adapter of a rank over some module names holds for the thinker (text decoder only, as
`omni.model.lora.lora_config` targets it), by peft's saved names. Knows nothing of directories, findings, devices'
memory or argv.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from omni.contract.errors import CheckpointError
from omni.model.backbone import ALLOWED_UNEXPECTED_PREFIXES
from omni.model.doctor.headers import TensorInfo
from omni.model.head import HEAD_CONFIG_KEYS, JointSchemaHead

MODEL_TYPE = "qwen3_omni_moe"
Shapes = dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class ModelShape:
    """What memory estimation needs of a model, from its configs alone."""

    backbone_params: int            # the thinker's parameters the loader keeps (talker / code2wav aside)
    head_params: int
    hidden_size: int
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    experts: int
    experts_per_token: int
    expert_width: int               # an expert's intermediate size
    head_width: int


@dataclass(frozen=True)
class Comparison:
    """Expected tensors against the ones the files hold (names as in the files)."""

    missing: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)          # "name (file [a, b] vs config [c, d])"
    unexpected: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)             # talker.* / code2wav.*: on disk, never loaded

    @property
    def matches(self) -> bool:
        return not (self.missing or self.mismatched or self.unexpected)


def read_backbone_config(directory: Path) -> Any:
    """config.json as transformers reads it, audio output off (CheckpointError naming the problem)."""
    from transformers import AutoConfig

    if not (directory / "config.json").is_file():
        raise CheckpointError("config.json missing: the backbone's shapes are unknown")
    try:
        config = AutoConfig.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"config.json cannot be read: {exc}") from exc
    if config.model_type != MODEL_TYPE:
        raise CheckpointError(f"config.json describes a {config.model_type!r} model, not {MODEL_TYPE!r} "
                              "(a Qwen3-Omni thinker)")
    config.enable_audio_output = False
    return config


def meta_model(config: Any) -> Any:
    """The whole model config.json describes, built on the meta device (shapes only; CheckpointError if it does not
    build). Its `.thinker` has the module names a loaded thinker has."""
    from transformers import Qwen3OmniMoeForConditionalGeneration

    try:
        with torch.device("meta"):
            return Qwen3OmniMoeForConditionalGeneration(config)
    except (ValueError, TypeError, AttributeError, KeyError, IndexError, RuntimeError) as exc:
        raise CheckpointError(f"config.json does not build the model: {type(exc).__name__}: {exc}") from exc


def expected_backbone(config: Any) -> Shapes:
    """Every backbone tensor the loader asks for, by its name in the released files, with its shape."""
    from transformers.core_model_loading import revert_weight_conversion

    model = meta_model(config)
    released = revert_weight_conversion(model, model.state_dict())
    return {name: tuple(tensor.shape) for name, tensor in released.items()}


def lora_shapes(thinker: Any, targets: tuple[str, ...] | list[str], rank: int) -> Shapes:
    """The tensors of a rank-`rank` LoRA over the modules named `targets` in the thinker's text decoder, by the names
    peft saves them under (lora_A [rank, in], lora_B [out, rank] per targeted Linear)."""
    from torch import nn

    from omni.model.lora import PEFT_PREFIX, TEXT_DECODER

    shapes: Shapes = {}
    for name, module in thinker.named_modules():
        if name.startswith(TEXT_DECODER) and name.rsplit(".", 1)[-1] in targets and isinstance(module, nn.Linear):
            shapes[f"{PEFT_PREFIX}{name}.lora_A.weight"] = (rank, module.in_features)
            shapes[f"{PEFT_PREFIX}{name}.lora_B.weight"] = (module.out_features, rank)
    return shapes


def read_head_config(directory: Path) -> dict[str, Any]:
    """joint_head_config.json, with the same refusals as the loader (`omni.model.head.load_joint_head`)."""
    try:
        config = json.loads((directory / "joint_head_config.json").read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"joint_head_config.json cannot be read: {exc}") from exc
    return read_head_config_values(config)


def read_head_config_values(config: Any) -> dict[str, Any]:
    """A head config (joint_head_config.json's object, or an adapter's head_config) with the loader's refusals."""
    if not isinstance(config, dict):
        raise CheckpointError("joint_head_config.json is not a JSON object")
    unknown = sorted(set(config) - set(HEAD_CONFIG_KEYS))
    if unknown:
        raise CheckpointError(f"joint_head_config.json has unknown keys: {', '.join(unknown)}")
    return config


def expected_head(head_config: dict[str, Any]) -> Shapes:
    """Every joint-head tensor `load_joint_head` loads (strict=True), with its shape."""
    try:
        with torch.device("meta"):
            head = JointSchemaHead(**head_config)
    except (TypeError, ValueError, AssertionError) as exc:     # a missing key, heads not dividing width …
        raise CheckpointError(f"joint_head_config.json does not build a head: {exc}") from exc
    return {name: tuple(tensor.shape) for name, tensor in head.state_dict().items()}


def compare(expected: Shapes, found: dict[str, TensorInfo], ignore_prefixes: tuple[str, ...] = ()) -> Comparison:
    """Which expected tensors the files lack or hold in another shape, and what they hold that nothing asks for."""
    comparison = Comparison()
    for name in sorted(expected):
        if name not in found:
            comparison.missing.append(name)
        elif found[name].shape != expected[name]:
            comparison.mismatched.append(f"{name} (file {list(found[name].shape)} vs config {list(expected[name])})")
    for name in sorted(set(found) - set(expected)):
        (comparison.ignored if name.startswith(ignore_prefixes) else comparison.unexpected).append(name)
    return comparison


def compare_backbone(expected: Shapes, found: dict[str, TensorInfo]) -> Comparison:
    return compare(expected, found, ALLOWED_UNEXPECTED_PREFIXES)


def model_shape(config: Any, backbone: Shapes, head_config: dict[str, Any] | None, head: Shapes | None) -> ModelShape:
    """The figures of `ModelShape` from the configs and the expected tensors (no file is read)."""
    text = config.thinker_config.text_config
    heads = int(text.num_attention_heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    return ModelShape(
        backbone_params=sum(math.prod(shape) for shape in backbone.values()),
        head_params=sum(math.prod(shape) for shape in (head or {}).values()),
        hidden_size=int(text.hidden_size), layers=int(text.num_hidden_layers), attention_heads=heads,
        kv_heads=int(text.num_key_value_heads), head_dim=head_dim, experts=int(text.num_experts),
        experts_per_token=int(text.num_experts_per_tok), expert_width=int(text.moe_intermediate_size),
        head_width=int((head_config or {}).get("width", 0)))
