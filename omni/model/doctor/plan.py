"""`omni doctor --plan`: a memory plan for a checkpoint's config at an EngineConfig's limits — weight bytes per
quantization scheme (`plan_weights`), the peak of one request at the configured limits (`plan_peak`), the caches'
budgets, and for each GPU of a table whether it fits, with which scheme, and the largest context and batch it takes.

A request at the limits: `max_context_tokens` tokens (the media limits' images fill the first of them: at most
`max_images x max_image_pixels` pixels, patches of the vision config's size); unchunked (chunking off, or a context
within 2 chunks) it runs in a batch of `min(max_batch_records, max_batch_tokens // tokens)` records (at least one), its
keys and values kept when the prefix cache is on; chunked, it runs alone (`plan_peak.chunked_peak`, a suffix of
SUFFIX_TOKENS schema tokens after the prefix), and between its chunks a batch of prompts up to 2 chunks long runs
beside its cache. On a device the total is weights + that peak + the prefix cache's budget (`prefix_cache_mb`, on the
model's device) + the runtime and 10% slack (`memory.RUNTIME_BYTES`, `SLACK_FRACTION`); it fits a GPU when the total
is at most `TIGHT_FRACTION` of the card (the rest for the CUDA context's own needs). The media cache
(`media_cache_mb`) lives in host memory. Knows nothing of files, argv or printing.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from omni.contract.config import EngineConfig
from omni.model.doctor.layout import ModelShape
from omni.model.doctor.memory import RUNTIME_BYTES, SLACK_FRACTION, TIGHT_FRACTION
from omni.model.doctor.plan_peak import Media, Peak, Towers, chunked_peak, forward_peak, kv_per_token, media_bytes
from omni.model.doctor.plan_weights import ThinkerTensors, WeightBytes, dequantized_bytes, weight_bytes

GB, MiB = 10 ** 9, 1024 ** 2
GPUS_GB = (24, 32, 48, 80, 96, 141)
LEAST_LOSSY_FIRST = ("none", "int8", "fp8", "nf4", "int4")   # weight-only schemes by their rounding error
SUFFIX_TOKENS = 256
MIN_CONTEXT, MAX_CONTEXT, MAX_BATCH = 1024, 262_144, 256


@dataclass(frozen=True)
class Model:
    """What the plan needs of a checkpoint's config."""

    shape: ModelShape
    towers: Towers
    tensors: ThinkerTensors
    patch_size: int


@dataclass(frozen=True)
class RequestPeak:
    tokens: int
    rows: int
    chunked: bool
    visual_tokens: int
    peak: Peak

    def to_json(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "batch_records": self.rows, "chunked": self.chunked,
                "visual_tokens": self.visual_tokens, "activation_bytes": self.peak.activation_bytes,
                "kv_bytes": self.peak.kv_bytes, "total_bytes": self.peak.total_bytes}


@dataclass(frozen=True)
class Fit:
    gpu_gb: int
    scheme: str | None              # the least lossy scheme that fits (None: none does, even with `settings`)
    need_bytes: int                 # with that scheme (or the smallest one) and `settings`
    max_context_tokens: int         # the largest context that fits with it (configured batch and chunk)
    max_batch_records: int          # the largest batch of that context that fits with it
    settings: dict[str, int] = field(default_factory=dict)   # what must change from the configured limits to fit:
                                    # {} when they fit as they are; else prefix_cache_mb 0 and a max_context_tokens

    def to_json(self) -> dict[str, Any]:
        return {"gpu_gb": self.gpu_gb, "fits": self.scheme is not None, "scheme": self.scheme,
                "need_bytes": self.need_bytes, "usable_bytes": usable(self.gpu_gb),
                "max_context_tokens": self.max_context_tokens, "max_batch_records": self.max_batch_records,
                "settings": self.settings}


@dataclass(frozen=True)
class Plan:
    limits: dict[str, Any]
    weights: list[WeightBytes]
    request: RequestPeak
    prefix_cache_bytes: int
    media_cache_bytes: int
    runtime_bytes: int
    gpus: list[Fit]
    dequantized_bytes: dict[str, int] = field(default_factory=dict)   # per scheme: what one layer unpacks (nf4)

    def to_json(self) -> dict[str, Any]:
        return {"limits": self.limits, "weights": [w.to_json() for w in self.weights],
                "request": self.request.to_json(),
                "caches": {"prefix_cache_bytes": self.prefix_cache_bytes, "prefix_cache_on": "device",
                           "media_cache_bytes": self.media_cache_bytes, "media_cache_on": "host"},
                "runtime_bytes": self.runtime_bytes, "slack_fraction": SLACK_FRACTION,
                "usable_fraction": TIGHT_FRACTION, "gpus": [f.to_json() for f in self.gpus],
                "dequantized_bytes": self.dequantized_bytes}


def usable(gpu_gb: int) -> int:
    return int(gpu_gb * GB * TIGHT_FRACTION)


def planned_media(model: Model, config: EngineConfig, tokens: int) -> Media:
    """The images the media limits allow, as many as fit in `tokens` (patches of patch_size, merged into tokens)."""
    patches = config.media.max_images * config.media.max_image_pixels // model.patch_size ** 2
    visual = min(tokens, patches // model.towers.merge)
    return Media(image_patches=visual * model.towers.merge, visual_tokens=visual)


def request_peak(model: Model, config: EngineConfig, itemsize: int) -> RequestPeak:
    """The peak of one request at `config`'s limits (see the module's docstring)."""
    shape, tokens, chunk = model.shape, config.max_context_tokens, config.prefill_chunk_tokens
    media = planned_media(model, config, tokens)
    keep = config.prefix_cache_mb > 0
    if not chunk or tokens - SUFFIX_TOKENS <= 2 * chunk:
        rows = max(1, min(config.max_batch_records, config.max_batch_tokens // tokens))
        peak = forward_peak(shape, itemsize, rows, tokens, keep)
        extra = rows * media_bytes(shape, model.towers, itemsize, media, tokens)
        return RequestPeak(tokens, rows, False, media.visual_tokens, Peak(peak.activation_bytes + extra, peak.kv_bytes))
    prefix = tokens - SUFFIX_TOKENS
    first = max(chunk, media.visual_tokens)
    alone = chunked_peak(shape, itemsize, prefix, SUFFIX_TOKENS, chunk, first,
                         media_bytes(shape, model.towers, itemsize, media, first, batched=False))
    short = 2 * chunk                       # a prompt this long is not chunked: it runs beside the record's cache
    rows = max(1, min(config.max_batch_records, config.max_batch_tokens // short))
    beside = forward_peak(shape, itemsize, rows, short, keep)
    held = prefix * (kv_per_token(shape, itemsize) + shape.hidden_size * itemsize)
    beside = Peak(beside.activation_bytes + held, beside.kv_bytes)
    return RequestPeak(tokens, 1, True, media.visual_tokens, max(alone, beside, key=lambda p: p.total_bytes))


def device_need(weights: WeightBytes, request: RequestPeak, prefix_cache_bytes: int) -> int:
    """Bytes on the device: weights, the request's peak, the prefix cache, the runtime, slack over all but weights."""
    rest = request.peak.total_bytes + prefix_cache_bytes + RUNTIME_BYTES
    return weights.total_bytes + rest + int(SLACK_FRACTION * rest)


def fit_gpu(model: Model, config: EngineConfig, gpu_gb: int, head_dtype: torch.dtype) -> Fit:
    """The least lossy scheme that fits `gpu_gb` at `config`'s limits, and the largest context and batch with it.
    When none fits as configured: the least lossy one that fits with the prefix cache off and the longest context
    that then fits (at least MIN_CONTEXT tokens; the media limits' images fill as much of it as they can)."""
    dtype = torch.bfloat16
    room = usable(gpu_gb)

    def need(scheme: str, cfg: EngineConfig) -> int:
        weights = weight_bytes(model.tensors, scheme, dtype, head_dtype)
        request = request_peak(model, cfg, dtype.itemsize)
        unpacked = dequantized_bytes(model.tensors, scheme, dtype)      # alive during the MoE phase of one layer
        request = replace(request, peak=Peak(request.peak.activation_bytes + unpacked, request.peak.kv_bytes))
        return device_need(weights, request, int(cfg.prefix_cache_mb * MiB))

    chosen = next((s for s in LEAST_LOSSY_FIRST if need(s, config) <= room), None)
    settings: dict[str, int] = {}
    if chosen is None:
        lean = replace(config, prefix_cache_mb=0)
        for scheme in LEAST_LOSSY_FIRST:
            def fits_lean(n: int, s: str = scheme) -> bool:
                return need(s, replace(lean, max_context_tokens=n)) <= room

            context = largest(MIN_CONTEXT, config.max_context_tokens, fits_lean)
            if context:
                chosen, config = scheme, replace(lean, max_context_tokens=context)
                settings = {"prefix_cache_mb": 0, "max_context_tokens": context}
                break
    scheme = chosen or min(LEAST_LOSSY_FIRST, key=lambda s: need(s, config))
    context = largest(MIN_CONTEXT, MAX_CONTEXT, lambda n: need(scheme, replace(config, max_context_tokens=n)) <= room)
    batch_cap = max(MAX_BATCH, config.max_batch_records)

    def batch_of(n: int) -> EngineConfig:
        return replace(config, max_batch_records=n,
                       max_batch_tokens=max(config.max_batch_tokens, n * config.max_context_tokens))

    batch = largest(1, batch_cap, lambda n: need(scheme, batch_of(n)) <= room)
    return Fit(gpu_gb, chosen, need(scheme, config), context, batch, settings)


def largest(low: int, high: int, fits: Callable[[int], bool]) -> int:
    """The largest n in [low, high] for which `fits(n)` (fits is monotone); 0 when not even `low` fits."""
    if not fits(low):
        return 0
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


def make_plan(model: Model, config: EngineConfig, dtype: torch.dtype, head_dtype: torch.dtype,
              gpus: tuple[int, ...] = GPUS_GB) -> Plan:
    """The plan for `model` at `config`'s limits; the request's peak in `dtype` (the GPU table's in bfloat16)."""
    from omni.model.doctor.plan_weights import every_scheme

    limits = {"max_context_tokens": config.max_context_tokens, "max_batch_records": config.max_batch_records,
              "max_batch_tokens": config.max_batch_tokens, "prefill_chunk_tokens": config.prefill_chunk_tokens,
              "max_images": config.media.max_images, "max_image_pixels": config.media.max_image_pixels,
              "dtype": str(dtype).removeprefix("torch."), "head_dtype": str(head_dtype).removeprefix("torch.")}
    return Plan(limits, every_scheme(model.tensors, head_dtype), request_peak(model, config, dtype.itemsize),
                int(config.prefix_cache_mb * MiB), int(config.media_cache_mb * MiB), RUNTIME_BYTES,
                [fit_gpu(model, config, gb, head_dtype) for gb in gpus],
                {name: dequantized_bytes(model.tensors, name, torch.bfloat16) for name in LEAST_LOSSY_FIRST
                 if dequantized_bytes(model.tensors, name, torch.bfloat16)})


def plan_model(backbone_config: Any, head_config: dict[str, Any] | None) -> Model:
    """The plan's figures of a checkpoint's configs, its thinker built once on the meta device (no weight read)."""
    from omni.model.doctor import layout
    from omni.model.doctor.plan_peak import towers
    from omni.model.doctor.plan_weights import thinker_tensors

    thinker = layout.meta_model(backbone_config).thinker
    head = layout.expected_head(head_config) if head_config is not None else {}
    params = {name: tuple(p.shape) for name, p in thinker.named_parameters()}
    shape = layout.model_shape(backbone_config, params, head_config, head)
    tensors = thinker_tensors(thinker, shape.head_params)
    vision = backbone_config.thinker_config.vision_config
    return Model(shape, towers(backbone_config), tensors, int(vision.patch_size))
