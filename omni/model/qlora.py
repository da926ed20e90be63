"""LoRA over a quantized base (QLoRA): which `--quantize` schemes LoRA can be trained over or served on, and the one
library shortcut that must be off while gradients flow through a 4-bit base.

    scheme   train LoRA over it                                   serve a LoRA adapter on it
    none     yes                                                  yes
    nf4      yes: peft's LoRA over bitsandbytes Linear4bit; the   yes (peft's bitsandbytes LoRA layer, rows mixed)
             fused experts dequantize through bnb's parametrization
    int8     yes: torchao's Int8Tensor linear has a backward      yes (peft's torchao LoRA layer)
    fp8      no: torchao's Float8Tensor has no backward for the   yes
             fused experts' grouped matmul
    int4     no (torchao Int4Tensor)                              no: peft's LoRA does not wrap torchao's Int4Tensor

Full fine-tuning of quantized weights is no such thing: the weights are integer codes (`check_trainable`).

`trainable_base(thinker)`: bitsandbytes' Linear4bit, on a CPU with AVX512-BF16, repacks its weight for a faster
kernel the first time it runs in eval mode on an input that needs no gradient (any answer, any validation pass),
and from then on runs that kernel, which has no backward: the gradient through the frozen base projections is then
silently dropped (torch only warns "an autograd kernel was not registered"), and LoRA learns from a wrong gradient.
It puts those layers in training mode (which skips the repacking; nothing else in them reads it) and unpacks a weight
already repacked (bitsandbytes' own inverse; the repacking rounded its absmax to bfloat16, which stays);
`served_base` puts them back in eval mode once training is over.
Knows nothing of training loops, adapter folders, argv or HTTP.
"""
from __future__ import annotations

from typing import Any

from torch import nn

from omni.contract.errors import AdapterError
from omni.model.quantize import QuantizationError

TRAINABLE = {"none": None, "nf4": None, "int8": None,
             "fp8": "torchao's Float8Tensor has no backward for the fused experts' grouped matmul",
             "int4": "peft's LoRA does not wrap torchao's Int4Tensor"}
NOT_SERVABLE = {"int4": "peft's LoRA does not wrap torchao's Int4Tensor"}
TRAINABLE_SCHEMES = tuple(name for name, why in TRAINABLE.items() if why is None and name != "none")


def check_trainable(mode: str, scheme: str) -> None:
    """QuantizationError (naming the scheme and the fix) when fine-tuning of `mode` cannot run over a base quantized
    as `scheme`: full fine-tuning of any quantized base, LoRA over a scheme without a backward."""
    if scheme == "none" or mode == "head":
        return
    if mode == "full":
        raise QuantizationError(f"--mode full cannot train a base quantized as {scheme}: its weights are integer "
                                f"codes, not trainable parameters; train LoRA over it (--mode lora --quantize "
                                f"{'/'.join(TRAINABLE_SCHEMES)}, QLoRA) or fine-tune the unquantized base "
                                "(--quantize none)")
    why = TRAINABLE.get(scheme)
    if why is not None:
        served = "" if scheme in NOT_SERVABLE else f"; an adapter trained so can still be served on {scheme}"
        raise QuantizationError(f"--mode lora cannot train over a base quantized as {scheme} ({why}): use "
                                f"--quantize {' or '.join(TRAINABLE_SCHEMES)} (QLoRA) or none{served}")


def check_servable(scheme: str, adapter: str) -> None:
    """AdapterError (naming the scheme and the fix) when a LoRA adapter cannot be served on a base quantized as
    `scheme`."""
    why = NOT_SERVABLE.get(scheme)
    if why is not None:
        raise AdapterError(adapter, f"a LoRA adapter cannot be served on a base quantized as {scheme} ({why}): load "
                           "the base with --quantize nf4, int8, fp8 or none, or serve a head-only adapter")


def _linear4bit_layers(thinker: nn.Module) -> list[Any]:
    """bitsandbytes' own Linear4bit layers (not peft's LoRA wrappers around them); typed Any: their weight is a
    Params4bit, with its quant_state, which bitsandbytes does not annotate."""
    try:
        from bitsandbytes.nn import Linear4bit
    except ImportError:
        return []
    return [m for m in thinker.modules() if type(m) is Linear4bit]


def trainable_base(thinker: nn.Module) -> None:
    """Let gradients flow through the thinker's 4-bit layers (see the module docstring); a no-op without them."""
    for layer in _linear4bit_layers(thinker):
        from bitsandbytes.nn import modules as bnb_modules

        weight = layer.weight
        if getattr(weight.quant_state, "packing_format_for_cpu", False):
            # bitsandbytes' own inverse (what its Params4bit.cuda() calls before moving a repacked weight)
            weight.data, weight.quant_state = bnb_modules._convert_weight_packed_for_cpu_inverse(
                weight.data, weight.quant_state)
        layer.train()


def served_base(thinker: nn.Module) -> None:
    """The 4-bit layers back in eval mode (bitsandbytes' fast inference kernel allowed again)."""
    for layer in _linear4bit_layers(thinker):
        layer.eval()
