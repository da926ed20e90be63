"""The weight bytes of a thinker and its joint head under each quantization scheme (`omni.model.quantize`), counted
from the modules a config builds on the meta device (no weight is read).

Only the text decoder's layers that `quantize.TARGETS` names are quantized (attention projections, the fused MoE
experts' 3-D parameters, dense MLP projections); everything else — embeddings, the lexical table (`lm_head`), the
router (`mlp.gate`), norms, the audio and vision towers, buffers, the joint head — keeps its dtype. A quantized
weight of n values with `rows` output rows (for a 3-D expert parameter [E, out, in]: E x out rows) and `n / inner`
groups along its input holds, as the libraries store it (measured on the tiny checkpoint, int4 from torchao's source):
- int8 (torchao Int8Tensor): n int8 values + per row a float32 scale and an int8 zero point: n + 5 x rows;
- fp8 (torchao Float8Tensor): n float8_e4m3 values + per row a float32 scale: n + 4 x rows;
- nf4 (bitsandbytes): n / 2 bytes (two per byte) + a float32 absmax per 64 values + a 16-entry float32 code table
  per tensor: ceil(n / 2) + 4 x ceil(n / 64) + 64;
- int4 (torchao Int4Tensor, plain packing, groups of 128): n / 2 bytes + a scale and a zero point per group of 128
  in the load dtype: ceil(n / 2) + 2 x ceil(n / 128) x itemsize. Needs a GPU: not measured here.
Knows nothing of files, requests, devices' memory or argv.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import torch

from omni.model.quantize import SCHEMES, TARGETS

NF4_BLOCK, NF4_CODE_BYTES, INT4_GROUP = 64, 16 * 4, 128
_TARGET = re.compile(TARGETS)


@dataclass(frozen=True)
class WeightBytes:
    """One scheme's bytes: the quantized text layers, the rest of the thinker (in its dtype), the joint head."""

    scheme: str
    dtype: str
    quantized_bytes: int
    rest_bytes: int
    head_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.quantized_bytes + self.rest_bytes + self.head_bytes

    def to_json(self) -> dict[str, int | str]:
        return {"scheme": self.scheme, "dtype": self.dtype, "quantized_bytes": self.quantized_bytes,
                "rest_bytes": self.rest_bytes, "head_bytes": self.head_bytes, "total_bytes": self.total_bytes}


@dataclass(frozen=True)
class ThinkerTensors:
    """A thinker's tensors split by what quantization does to them: the quantized ones' shapes, and the element
    counts of the rest by whether they take the load dtype (floating parameters) or keep their own (buffers)."""

    quantized: tuple[tuple[int, ...], ...]
    rest_params: int
    buffer_bytes: int
    head_params: int

    @property
    def quantized_params(self) -> int:
        return sum(math.prod(shape) for shape in self.quantized)


def is_quantized(name: str) -> bool:
    """Whether `quantize` quantizes the thinker parameter `name` (runtime name, without the `thinker.` prefix)."""
    full = f"thinker.{name}"
    return bool(_TARGET.fullmatch(full.removesuffix(".weight")) or _TARGET.fullmatch(full))


def thinker_tensors(thinker: Any, head_params: int) -> ThinkerTensors:
    """Split a (meta) thinker's parameters and buffers; `head_params`: the joint head's parameter count."""
    quantized, rest = [], 0
    for name, param in thinker.named_parameters():
        if is_quantized(name):
            quantized.append(tuple(param.shape))
        else:
            rest += param.numel()
    buffers = sum(buffer.numel() * buffer.element_size() for buffer in thinker.buffers())
    return ThinkerTensors(tuple(quantized), rest, buffers, head_params)


def quantized_tensor_bytes(scheme: str, shape: tuple[int, ...], itemsize: int) -> int:
    """The bytes one weight of `shape` ([out, in] or [E, out, in]) holds under `scheme`; none: in `itemsize`."""
    n = math.prod(shape)
    rows = n // shape[-1]
    if scheme == "none":
        return n * itemsize
    if scheme == "int8":
        return n + 5 * rows
    if scheme == "fp8":
        return n + 4 * rows
    if scheme == "nf4":
        return math.ceil(n / 2) + 4 * math.ceil(n / NF4_BLOCK) + NF4_CODE_BYTES
    if scheme == "int4":
        return math.ceil(n / 2) + 2 * math.ceil(n / INT4_GROUP) * itemsize
    raise ValueError(f"unknown scheme {scheme!r}")


def weight_bytes(tensors: ThinkerTensors, scheme: str, dtype: torch.dtype, head_dtype: torch.dtype) -> WeightBytes:
    """The bytes the thinker and head hold loaded in `dtype` (head in `head_dtype`) with `scheme`."""
    item = dtype.itemsize
    quantized = sum(quantized_tensor_bytes(scheme, shape, item) for shape in tensors.quantized)
    return WeightBytes(scheme, str(dtype).removeprefix("torch."), quantized,
                       tensors.rest_params * item + tensors.buffer_bytes, tensors.head_params * head_dtype.itemsize)


def dequantized_bytes(tensors: ThinkerTensors, scheme: str, dtype: torch.dtype) -> int:
    """What a scheme unpacks while a layer runs, on top of the weights: nf4's fused experts are bitsandbytes
    parametrizations that dequantize a whole parameter on access and keep it (the parametrization cache) until the
    experts module's forward ends, so one layer's gate_up and down projections live in `dtype` at once (the largest
    layer's pair). torchao's weight-only schemes and bitsandbytes' Linear4bit dequantize inside their kernels, one
    projection at a time (not counted)."""
    if scheme != "nf4":
        return 0
    experts = [math.prod(shape) for shape in tensors.quantized if len(shape) == 3]   # per layer: gate_up, down
    pairs = [sum(experts[i:i + 2]) for i in range(0, len(experts), 2)]
    return max(pairs, default=0) * dtype.itemsize


def every_scheme(tensors: ThinkerTensors, head_dtype: torch.dtype) -> list[WeightBytes]:
    """Unquantized in float32 and bfloat16, then each quantized scheme over bfloat16 (the GPU load dtype)."""
    plain = [weight_bytes(tensors, "none", dtype, head_dtype) for dtype in (torch.float32, torch.bfloat16)]
    return plain + [weight_bytes(tensors, name, torch.bfloat16, head_dtype) for name in SCHEMES if name != "none"]
