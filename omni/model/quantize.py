"""Quantized backbones: the schemes `--quantize` names, the library configs they become, and what a checkpoint's
own `quantization_config` says it is.

Every scheme goes through a library, never by hand, and touches only the thinker's text decoder layers (`TARGETS`:
attention projections, the fused MoE experts, any dense MLP). The router, embeddings, `lm_head` (the head's lexical
table), the audio and vision towers and the joint head keep their dtype.

- `int8`: torchao `Int8WeightOnlyConfig` (per-row scales), through transformers' torchao quantizer. torchao quantizes
  the fused 3-D expert parameters too (`FqnToConfig` names them), but its Int8Tensor lacks the transpose/bmm that
  transformers' grouped experts forward uses, so the experts run transformers' per-expert `eager` forward.
- `fp8`: torchao `Float8WeightOnlyConfig` (e4m3, per-row scales), experts included; runs on CPU and GPU.
- `nf4`: bitsandbytes 4-bit NormalFloat (blocks of 64). transformers' bitsandbytes quantizer replaces `nn.Linear` only,
  so the fused experts (nearly all of a MoE's bytes) would silently stay in 16/32 bits; they are quantized after
  loading with bitsandbytes' own `replace_parameter_4bit` (a parametrization that dequantizes on access).
- `int4`: torchao `Int4WeightOnlyConfig` (groups of 128); its kernels need a CUDA GPU.

Knows nothing of requests, serving, the CLI or the environment; `omni.model.backbone` calls it while loading.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from omni.contract.errors import CheckpointError

INSTALL_HINT = "pip install 'omni-decide[quantize]'"
# the text decoder's quantized weights: module names (nn.Linear) and the fused experts' parameter names
TARGETS = (r"thinker\.model\.language_model\.layers\.\d+\."
           r"(self_attn\.[qkvo]_proj|mlp\.experts\.(gate_up|down)_proj|mlp\.(shared_expert\.)?(gate|up|down)_proj)")
# what bitsandbytes must leave alone (its quantizer takes every nn.Linear not named here): towers, lexical table, router
KEEP = ("thinker.model.visual", "thinker.model.audio_tower", "thinker.lm_head", "talker", "code2wav", "mlp.gate",
        "shared_expert_gate")
EXPERT_PARAMS = ("gate_up_proj", "down_proj")
NF4_BLOCK = 64


class QuantizationError(CheckpointError):
    """A scheme that cannot be used here: unknown, its library missing, needs a GPU, or disagrees with the checkpoint."""


@dataclass(frozen=True)
class Scheme:
    name: str
    library: str | None          # the distribution that does the work (None: no quantization)
    needs_gpu: bool
    bits: int                    # bits per quantized weight
    summary: str


SCHEMES: dict[str, Scheme] = {s.name: s for s in (
    Scheme("none", None, False, 16, "the checkpoint's weights in --dtype"),
    Scheme("int8", "torchao", False, 8, "int8 weights, a scale per output row (torchao Int8WeightOnlyConfig)"),
    Scheme("fp8", "torchao", False, 8, "float8 e4m3 weights, a scale per output row (torchao Float8WeightOnlyConfig)"),
    Scheme("nf4", "bitsandbytes", False, 4, "4-bit NormalFloat, an absmax per 64 weights (bitsandbytes)"),
    Scheme("int4", "torchao", True, 4, "int4 weights, a scale and zero per 128 (torchao Int4WeightOnlyConfig)"),
)}
_TORCHAO_CONFIGS = {"int8": "Int8WeightOnlyConfig", "fp8": "Float8WeightOnlyConfig", "int4": "Int4WeightOnlyConfig"}


def scheme(name: str) -> Scheme:
    """The scheme called `name` (QuantizationError listing them when there is none)."""
    try:
        return SCHEMES[name]
    except KeyError:
        raise QuantizationError(f"--quantize {name!r} is not a scheme; choose one of {', '.join(SCHEMES)}") from None


def check_usable(name: str, device: str) -> Scheme:
    """The scheme, once its library is importable and the device can run it (QuantizationError saying the fix)."""
    chosen = scheme(name)
    if chosen.library:
        try:
            importlib.import_module(chosen.library)
        except ImportError as exc:
            raise QuantizationError(f"--quantize {name} needs {chosen.library}, which is not installed here ({exc}): "
                                    f"{INSTALL_HINT}") from None
    if chosen.needs_gpu and not device.startswith("cuda"):
        raise QuantizationError(f"--quantize {name} needs a CUDA GPU ({chosen.summary}); on {device} use "
                                f"--quantize nf4 (4-bit) or int8 instead")
    return chosen


def stored_scheme_in(directory: Path) -> str | None:
    """The scheme `directory`'s config.json names, read without transformers (None: unquantized, or no readable
    config.json — the loader names what is wrong with it)."""
    try:
        saved = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return stored_scheme(saved) if isinstance(saved, dict) else None


def stored_scheme(config: Any) -> str | None:
    """The scheme a pre-quantized checkpoint's config names (`quantization_config`, of a transformers config or of
    config.json's dict), None when it has none."""
    stored = config.get("quantization_config") if isinstance(config, dict) else getattr(config, "quantization_config",
                                                                                          None)
    if stored is None:
        return None
    stored = stored if isinstance(stored, dict) else stored.to_dict()
    method = stored.get("quant_method")
    if method == "bitsandbytes" and stored.get("load_in_4bit") and stored.get("bnb_4bit_quant_type") == "nf4":
        return "nf4"
    if method == "torchao":
        types = set(re.findall(r"'_type': '(\w+Config)'", str(stored.get("quant_type")))) - {"FqnToConfig"}
        for name, config_name in _TORCHAO_CONFIGS.items():
            if types == {config_name}:
                return name
    raise QuantizationError(f"the checkpoint's config.json names a quantization omni does not serve ({method}: "
                            f"{str(stored)[:160]}); re-export it with `omni export --quantize SCHEME` from the "
                            f"unquantized checkpoint")


def resolve(requested: str | None, stored: str | None, directory: Any) -> str:
    """The scheme to load: the checkpoint's own when it is pre-quantized (a different request is refused), else the
    requested one (none by default)."""
    if stored is None:
        return requested or "none"
    if requested not in (None, stored):
        raise QuantizationError(f"{directory} is quantized as {stored} (its config.json), but --quantize {requested} "
                                f"was asked: omit --quantize or pass --quantize {stored} (or load the unquantized "
                                f"checkpoint to use {requested})")
    return stored


def loading_arguments(name: str, dtype: torch.dtype) -> dict[str, Any]:
    """The `from_pretrained` keyword arguments that quantize while loading (none for `none`)."""
    if name == "none":
        return {}
    if name == "nf4":
        from transformers import BitsAndBytesConfig

        return {"quantization_config": BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype,
            llm_int8_skip_modules=list(KEEP))}
    from transformers import TorchAoConfig

    arguments: dict[str, Any] = {"quantization_config": TorchAoConfig(_torchao_config(name, TARGETS))}
    if name == "int8":
        arguments["experts_implementation"] = "eager"   # Int8Tensor has no transpose/bmm for the grouped forward
    return arguments


def _torchao_config(name: str, targets: str) -> Any:
    """torchao's config of the scheme for the weights `targets` names (modules and the fused experts' parameters)."""
    import torchao.quantization as ao

    return ao.FqnToConfig({f"re:{targets}$": getattr(ao, _TORCHAO_CONFIGS[name])()})


def finish(thinker: nn.Module, name: str) -> None:
    """What the library's loader leaves undone: for nf4, the fused experts (bitsandbytes' parametrization)."""
    if name != "nf4":
        return
    from bitsandbytes.nn.parametrize import replace_parameter_4bit

    for module in thinker.modules():
        if type(module).__name__.endswith("Experts") and all(hasattr(module, p) for p in EXPERT_PARAMS):
            for param in EXPERT_PARAMS:
                if not nn.utils.parametrize.is_parametrized(module, param):
                    replace_parameter_4bit(module, param, quant_type="nf4", blocksize=NF4_BLOCK)


def grad_off(name: str) -> contextlib.AbstractContextManager[Any]:
    """The grad mode to answer in: inference_mode, except for torchao's tensor subclasses, whose view ops fail on
    inference tensors ("Cannot set version_counter for inference tensor"): no_grad for those."""
    return torch.no_grad() if SCHEMES[name].library == "torchao" else torch.inference_mode()


def quantize_built(thinker: Any, name: str, dtype: torch.dtype) -> None:
    """Quantize, in place, a thinker built in memory rather than loaded (benchmarks/device/realsize.py's random
    real-size model) with the same libraries and targets as loading: torchao's `quantize_`, or bitsandbytes'
    Linear4bit (quantized when moved to its device) and `finish` for the experts."""
    if name == "none":
        return
    targets = re.compile(TARGETS.removeprefix(r"thinker\."))
    if name == "nf4":
        import bitsandbytes as bnb

        for fqn, module in list(thinker.named_modules()):
            if isinstance(module, nn.Linear) and targets.fullmatch(fqn):
                packed = bnb.nn.Linear4bit(module.in_features, module.out_features, bias=module.bias is not None,
                                           compute_dtype=dtype, quant_type="nf4", device="meta")
                packed.weight = bnb.nn.Params4bit(module.weight.data, requires_grad=False, quant_type="nf4",
                                                  blocksize=NF4_BLOCK)
                packed.bias = module.bias
                parent, _, child = fqn.rpartition(".")
                setattr(thinker.get_submodule(parent), child, packed.to(module.weight.device))
        finish(thinker, name)
        return
    import torchao.quantization as ao

    ao.quantize_(thinker, _torchao_config(name, targets.pattern), filter_fn=None)
    if name == "int8":
        thinker.set_experts_implementation("eager")     # as `loading_arguments` says


def weight_bytes(module: nn.Module) -> int:
    """Bytes the module's parameters and buffers hold, quantized ones counted by what they store (their data,
    scales and absmax), each storage once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    tensors = [*module.parameters(), *module.buffers(), *_parametrization_states(module)]
    tensors += [t for p in module.parameters() for t in _quant_state_tensors(getattr(p, "quant_state", None))]
    for tensor in tensors:
        for leaf in _leaves(tensor):
            key = (leaf.untyped_storage().data_ptr(), leaf.untyped_storage().nbytes())
            if key not in seen and leaf.device.type != "meta":
                seen.add(key)
                total += leaf.untyped_storage().nbytes()
    return total


def _leaves(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors behind a (possibly quantized, subclassed) tensor."""
    flatten = getattr(type(tensor), "__tensor_flatten__", None)
    if flatten is None or type(tensor) in (torch.Tensor, nn.Parameter):
        return [tensor]
    names, _ = tensor.__tensor_flatten__()     # type: ignore[attr-defined]
    return [leaf for name in names for leaf in _leaves(getattr(tensor, name))]


def _parametrization_states(module: nn.Module) -> list[torch.Tensor]:
    """bitsandbytes' parametrized parameters keep their absmax and code table outside the module's buffers."""
    states = []
    for sub in module.modules():
        for parametrizations in getattr(sub, "parametrizations", {}).values():
            for parametrization in parametrizations:
                states += _quant_state_tensors(getattr(parametrization, "quant_state", None))
    return states


def _quant_state_tensors(state: Any) -> list[torch.Tensor]:
    """A bitsandbytes QuantState's tensors (absmax, code table), none for anything else."""
    if state is None:
        return []
    return [t for t in (getattr(state, "absmax", None), getattr(state, "code", None)) if isinstance(t, torch.Tensor)]
