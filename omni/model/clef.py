"""ClefModel: a loaded Clef-omni model — processor parts + prompt encoder + thinker backbone + joint-schema head —
behind the `DecisionModel` / `TrainableModel` surfaces (omni/model/surface.py).

One pipeline for serving, evaluation and training. This module only puts the jobs together; each lives in a
module named for it:

    loading.py   from a directory (strict) or an EngineConfig (`from_config`: embedded default, dir or hub id,
                 calibration)
    inputs.py    `prepare`: media + the reference prompt + M-RoPE positions -> PreparedRecord (off the model thread)
    prefixes.py  the prefix key and the prefix cache (keys/values + head memory rows of what precedes the questions)
    forward.py   `logits`: whole records, prefixes, continuations after computed prefixes, one batched head pass
    chunked.py   a long prefix prefilled a chunk per model turn (the engine schedules the turns)

Knows nothing of HTTP, queues, answers' wire shape or the environment.
"""
from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch

from omni.contract.audit import CalibrationAudit, ModelAudit, ModelEvidence
from omni.contract.config import EngineConfig
from omni.contract.types import DecisionRequest
from omni.model.adapters import Adapter, Selection, load_adapter, unload_adapter
from omni.model.backbone import Backbone
from omni.model.cache import CacheStats
from omni.model.calibration import Calibration
from omni.model.checkpoint import CheckpointSource, default_cache_dir, locate_checkpoint
from omni.model.chunked import ChunkedPrefill
from omni.model.evidence import record_evidence
from omni.model.fingerprint import checkpoint_sha256, software_versions
from omni.model.forward import Forward
from omni.model.head import JointSchemaHead, option_probabilities
from omni.model.inputs import Inputs, PreparedRecord
from omni.model.loading import calibration_for, load_checkpoint, model_options
from omni.model.media import MediaEncoder, RequestMedia
from omni.model.prefixes import PrefixCache
from omni.model.prompt import PromptEncoder
from preprocess.align import PlaceholderIds
from preprocess.item import MediaItem
from preprocess.loader import ProcessorParts
from preprocess.media import MediaLimits


class ClefModel:
    def __init__(self, backbone: Backbone, head: JointSchemaHead, parts: ProcessorParts, source: CheckpointSource, *,
                 max_context_tokens: int = 64_000, media_limits: MediaLimits = MediaLimits(),
                 media_cache_bytes: int = 0, prefix_cache_bytes: int = 0, isolation: str = "joint",
                 prefill_chunk_tokens: int = 0, cache_dir: str | None = None, decode_threads: int = 1):
        self.backbone = backbone
        self.head = head
        self.parts = parts
        self.source = source                           # directory, embedded default or not, release date
        self.calibration: Calibration | None = None    # applied to the logits by `probabilities` when set
        self.default_selection = Selection()           # what `prepare` answers with when not told (`use_adapter`)
        self.calibrate_adapters = True                 # an adapter's own calibration.json applies (config.calibration)
        self.prompt_encoder = PromptEncoder(parts.tokenizer, max_context_tokens)
        self.media = MediaEncoder(parts, media_limits, media_cache_bytes, **backbone.media_timing,
                                  decode_threads=decode_threads)
        self.prefixes = PrefixCache(prefix_cache_bytes)
        self.inputs = Inputs(backbone, self.prompt_encoder, self.media, self.prefixes, isolation)
        self.forward = Forward(backbone, head, self.prefixes, self.inputs)
        self.chunks = ChunkedPrefill(backbone, head, self.prefixes, self.inputs, prefill_chunk_tokens)
        # the checkpoint's sha256 (audit records), hashed once when loaded (a sidecar spares a restart the re-hash)
        self.sha256 = checkpoint_sha256(source.directory, default_cache_dir(cache_dir))

    @classmethod
    def from_config(cls, config: EngineConfig) -> ClefModel:
        """The model `config` names (None = the embedded default), loaded strictly; calibrated when asked."""
        directory = locate_checkpoint(config.model_path, config.cache_dir)
        model = cls.load(directory, **model_options(config))
        model.calibration = calibration_for(config, directory)
        model.calibrate_adapters = config.calibration
        return model

    @classmethod
    def load(cls, directory: str | Path, *, dtype: str = "auto", device: str = "auto", head_dtype: str = "float32",
             attn_implementation: str = "sdpa", tiny_default: bool = False, max_context_tokens: int = 64_000,
             media_limits: MediaLimits = MediaLimits(), media_cache_bytes: int = 0, prefix_cache_bytes: int = 0,
             isolation: str = "joint", prefill_chunk_tokens: int = 0, cache_dir: str | None = None,
             decode_threads: int = 1, quantization: str | None = None) -> ClefModel:
        """A checkpoint directory in the released layout, loaded strictly (`omni.model.loading`). Caches and chunked
        prefill are off unless given (`from_config` gives the config's)."""
        loaded = load_checkpoint(directory, dtype=dtype, device=device, head_dtype=head_dtype,
                                 attn_implementation=attn_implementation, tiny_default=tiny_default,
                                 quantization=quantization)
        return cls(loaded.backbone, loaded.head, loaded.parts, loaded.source, max_context_tokens=max_context_tokens,
                   media_limits=media_limits, media_cache_bytes=media_cache_bytes,
                   prefix_cache_bytes=prefix_cache_bytes, isolation=isolation,
                   prefill_chunk_tokens=prefill_chunk_tokens, cache_dir=cache_dir, decode_threads=decode_threads)

    # ---------------------------------------------------------------------------------------- off the model thread
    def encode_media(self, items: tuple[MediaItem, ...]) -> RequestMedia:
        return self.inputs.encode_media(items)

    def prepare(self, request: DecisionRequest, media: RequestMedia | None = None,
                selection: Selection | None = None) -> PreparedRecord:
        return self.inputs.prepare(request, media, selection or self.default_selection)

    def use_adapter(self, directory: str | Path, name: str = "adapter") -> Adapter:
        """Answer every request with the adapter in `directory` unless told otherwise (the CLI's `--adapter`: eval,
        calibrate, policy fit, replay of one adapter)."""
        adapter = self.load_adapter(directory, name)
        self.default_selection = Selection(adapter)
        self.forget_prefixes()
        return adapter

    @property
    def answering_directory(self) -> Path:
        """Where the weights that answer by default live: the adapter's folder when one is in use, else the
        checkpoint's (a calibration is fitted for, and read from, there)."""
        adapter = self.default_selection.adapter
        return adapter.directory if adapter is not None else self.source.directory

    # ----------------------------------------------------------------------------------- adapters (model thread)
    def load_adapter(self, directory: str | Path, name: str) -> Adapter:
        """The adapter in `directory` served as `name`, checked against this base; a LoRA adapter's weights become
        resident in the thinker. Call it where no forward runs at the same time (the engine's model lock)."""
        return load_adapter(directory, name, base_sha256=self.sha256, hidden_size=self.backbone.hidden_size,
                            device=self.forward.head_device, head_dtype=self.head.hidden_norm.weight.dtype,
                            slots=self.backbone.lora, quantization=self.backbone.quantization)

    def unload_adapter(self, adapter: Adapter) -> None:
        """Free what `adapter` holds in the base (no record using it may still run)."""
        unload_adapter(adapter, self.backbone.lora)

    # ------------------------------------------------------------------------------------------- on the model thread
    def logits(self, records: Sequence[PreparedRecord]) -> list[list[torch.Tensor]]:
        return self.forward.logits(records)

    def grad_off(self) -> AbstractContextManager[Any]:
        return self.backbone.grad_off()

    def probabilities(self, records: Sequence[PreparedRecord]) -> list[list[torch.Tensor]]:
        with self.backbone.grad_off():
            per_record = self.logits(records)
            return [option_probabilities(self._calibrated(record, logits, record.selection.adapter))
                    for record, logits in zip(records, per_record, strict=True)]

    @torch.inference_mode()
    def score_shadows(self, records: Sequence[PreparedRecord]) -> list[list[torch.Tensor] | None]:
        """Each record's head-only shadow candidate's calibrated probabilities, from the rows its forward left (None
        for a record without), in one head pass per candidate. Thread-safe beside the model thread: it runs only
        candidates' heads."""
        scored = [r for r in records if r.selection.shadow is not None and r.shadow_units is not None]
        logits = dict(zip(map(id, scored), self.forward.shadow_logits(scored), strict=True))
        return [option_probabilities(self._calibrated(r, logits[id(r)], r.selection.shadow))
                if id(r) in logits and r.selection.shadow is not None else None for r in records]

    def _calibrated(self, record: PreparedRecord, logits: list[torch.Tensor],
                    adapter: Adapter | None) -> list[torch.Tensor]:
        """The logits of the record's questions under the calibration of whoever answered (an adapter's own, else
        the base's)."""
        calibration = self.calibration if adapter is None else adapter.calibration if self.calibrate_adapters else None
        return calibration.apply_record(record.request, logits) if calibration is not None else logits

    def explain(self, record: PreparedRecord, per_question: list[torch.Tensor]) -> dict[str, Any] | None:
        """The record's `x_evidence` from the attention its forward left (None when its request did not ask)."""
        ids = PlaceholderIds.from_mapping(self.parts.special_ids, self.parts.newline_ids)
        return record_evidence(record, per_question, ids)

    def needs_chunks(self, record: PreparedRecord) -> bool:
        return self.chunks.needs_chunks(record)

    def prefill_tokens_left(self, record: PreparedRecord) -> int:
        return self.chunks.tokens_left(record)

    def prefill_step(self, record: PreparedRecord) -> bool:
        return self.chunks.step(record)

    # -------------------------------------------------------------------------------------------------- audit
    def evidence(self, record: PreparedRecord) -> ModelEvidence:
        adapter = record.selection.adapter
        calibration = self.calibration if adapter is None else adapter.calibration if self.calibrate_adapters else None
        source = self.source
        head = adapter.head if adapter is not None else self.head
        return ModelEvidence(
            model=ModelAudit("", self.sha256, dict(head.config), source.release_date,
                             "embedded demo checkpoint" if source.tiny_default else str(source.directory),
                             adapter.audit() if adapter is not None else None),
            calibration=CalibrationAudit(calibration.file_sha256, calibration.format,
                                         calibration.buckets(record.request)) if calibration is not None else None,
            prompt=record.prompt_audit,
            media=record.media_audit, software=software_versions(), device=str(self.backbone.device),
            backbone_dtype=dtype_name(self.backbone.dtype), head_dtype=dtype_name(self.head.hidden_norm.weight.dtype),
            quantization=self.backbone.quantization)

    # ------------------------------------------------------------------------------------------------- caches
    def cache_stats(self) -> dict[str, CacheStats]:
        return {"media": self.media.cache.stats(), "prefix": self.prefixes.stats()}

    def forget_prefixes(self) -> None:
        self.prefixes.clear()


def dtype_name(dtype: torch.dtype) -> str:
    """"bfloat16" for torch.bfloat16."""
    return str(dtype).removeprefix("torch.")
