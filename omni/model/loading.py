"""Loading a Clef-omni checkpoint: a directory in the released layout -> its parts (processor parts, thinker
backbone, joint-schema head, where it came from), checked strictly; and what an `EngineConfig` asks of the model.

`load_checkpoint` checks the files first (`check_checkpoint_files`), then loads the processor parts, the backbone
(strict keys, `omni.model.backbone`) and the head, and refuses a head whose width is not the backbone's. Every problem
is a CheckpointError naming what is wrong. `model_options` / `calibration_for` turn an EngineConfig into the model's
keyword arguments and its calibration. `ClefModel.load` / `ClefModel.from_config` put the parts together.
Knows nothing of requests, forwards, caches' contents, serving or the environment.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from omni.contract.config import EngineConfig
from omni.contract.errors import CheckpointError
from omni.model import quantize
from omni.model.backbone import Backbone, resolve_device
from omni.model.calibration import Calibration, load_calibration
from omni.model.checkpoint import DEMO_CHECKPOINT_DIR, CheckpointSource, check_checkpoint_files, release_date
from omni.model.head import JointSchemaHead, load_joint_head
from preprocess.loader import ProcessorConfigError, ProcessorParts, load_processor_parts
from preprocess.media import MiB

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A checkpoint's parts, loaded and checked against each other."""

    backbone: Backbone
    head: JointSchemaHead
    parts: ProcessorParts
    source: CheckpointSource


def load_checkpoint(directory: str | Path, *, dtype: str = "auto", device: str = "auto",
                    head_dtype: str = "float32", attn_implementation: str = "sdpa",
                    tiny_default: bool = False, quantization: str | None = None) -> LoadedCheckpoint:
    """A checkpoint directory in the released layout, loaded strictly (CheckpointError naming what is wrong)."""
    directory = Path(directory)
    check_checkpoint_files(directory)
    try:
        parts = load_processor_parts(directory)
    except ProcessorConfigError as exc:
        raise CheckpointError(str(exc)) from exc
    backbone = Backbone.load(directory, dtype=dtype, device=device, attn_implementation=attn_implementation,
                             quantization=quantization)
    head = load_joint_head(directory, backbone.device, getattr(torch, head_dtype))
    if head.hidden_size != backbone.hidden_size:
        raise CheckpointError(f"joint head hidden_size {head.hidden_size} != backbone hidden size "
                              f"{backbone.hidden_size}")
    return LoadedCheckpoint(backbone, head, parts, CheckpointSource(directory, tiny_default, release_date(directory)))


def model_options(config: EngineConfig) -> dict[str, Any]:
    """`ClefModel.load`'s keyword arguments for `config`: precision, device, context, media limits, caches,
    isolation, chunked prefill and the threads that decode media."""
    return {"dtype": config.dtype, "device": config.device, "head_dtype": config.head_dtype,
            "attn_implementation": config.attn_implementation, "quantization": config.quantize,
            "max_context_tokens": config.max_context_tokens,
            "media_limits": config.media, "tiny_default": config.model_path is None,
            "media_cache_bytes": int(config.media_cache_mb * MiB),
            "prefix_cache_bytes": int(config.prefix_cache_mb * MiB), "isolation": config.isolation,
            "prefill_chunk_tokens": config.prefill_chunk_tokens, "cache_dir": config.cache_dir,
            "decode_threads": config.decode_threads}


def check_quantization(config: EngineConfig, device: str | None = None) -> None:
    """Before anything loads (a server's start): QuantizationError when `config.quantize` cannot be used — its
    library is missing, `device` (default: the config's) cannot run it, or a local pre-quantized checkpoint is stored
    in another scheme. `device` "any" skips the device check (Ray replicas whose devices are not known yet)."""
    directory = DEMO_CHECKPOINT_DIR if config.model_path is None else Path(config.model_path)
    scheme = quantize.resolve(config.quantize, quantize.stored_scheme_in(directory), directory)
    if device == "any":
        quantize.check_usable(scheme, "cuda")
    else:
        quantize.check_usable(scheme, resolve_device(device or config.device))


def calibration_for(config: EngineConfig, directory: Path) -> Calibration | None:
    """The checkpoint's calibration when `config` asks for it (a warning when it has none)."""
    if not config.calibration:
        return None
    calibration = load_calibration(directory)
    if calibration is None:
        log.warning("calibration is on but %s has no calibration.json: serving uncalibrated", directory)
    return calibration
