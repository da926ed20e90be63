"""A loaded Clef-omni model: processor parts + prompt encoder + thinker backbone + joint-schema head.

One pipeline for serving, evaluation and training. `prepare` is THE way a request becomes model inputs (media
decoded and encoded, the reference prompt, explicit M-RoPE positions), on the CPU and thread-safe; `logits` /
`probabilities` run one prefill for a batch of prepared records and one batched head pass. `from_config` finds the
checkpoint (embedded default, directory or hub id), loads it strictly and applies calibration when asked.
Knows nothing of HTTP, queues, answers' wire shape or the environment.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from omni.contract.config import EngineConfig
from omni.contract.errors import CheckpointError
from omni.contract.types import DecisionRequest
from omni.model.backbone import Backbone
from omni.model.checkpoint import CheckpointSource, check_checkpoint_files, locate_checkpoint, release_date
from omni.model.head import JointSchemaHead, load_joint_head, option_probabilities
from omni.model.media import encode_request_media
from omni.model.prompt import EncodedPrompt, PromptEncoder
from preprocess.item import MediaItem
from preprocess.loader import ProcessorConfigError, ProcessorParts, load_processor_parts
from preprocess.media import MediaLimits
from preprocess.processor import EncodedMedia

log = logging.getLogger(__name__)


@dataclass
class PreparedRecord:
    """Everything one request needs for the forward pass; built off the model thread."""

    request: DecisionRequest
    prompt: EncodedPrompt
    input_ids: torch.Tensor            # [T]
    position_ids: torch.Tensor         # [3, 1, T]
    media: dict[str, torch.Tensor]
    tokens_by_modality: dict[str, int]
    timings_ms: dict[str, float] = field(default_factory=dict)   # decode, encode

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())

    @property
    def truncated_state_tokens(self) -> int:
        return self.prompt.state_tokens_dropped


class ClefModel:
    def __init__(self, backbone: Backbone, head: JointSchemaHead, parts: ProcessorParts, source: CheckpointSource, *,
                 max_context_tokens: int = 64_000, media_limits: MediaLimits = MediaLimits()):
        self.backbone = backbone
        self.head = head
        self.parts = parts
        self.source = source
        self.media_limits = media_limits
        self.prompt_encoder = PromptEncoder(parts.tokenizer, max_context_tokens)
        self.calibration = None   # an omni.model.calibration.Calibration, applied to the logits when set

    @classmethod
    def from_config(cls, config: EngineConfig) -> ClefModel:
        """The model `config` names (None = the embedded default), loaded strictly; calibrated when asked."""
        directory = locate_checkpoint(config.model_path, config.cache_dir)
        model = cls.load(directory, dtype=config.dtype, device=config.device, head_dtype=config.head_dtype,
                         attn_implementation=config.attn_implementation, max_context_tokens=config.max_context_tokens,
                         media_limits=config.media, tiny_default=config.model_path is None)
        if config.calibration:
            from omni.model.calibration import load_calibration

            model.calibration = load_calibration(directory)
            if model.calibration is None:
                log.warning("calibration is on but %s has no calibration.json: serving uncalibrated", directory)
        return model

    @classmethod
    def load(cls, directory: str | Path, *, dtype: str = "auto", device: str = "auto", head_dtype: str = "float32",
             attn_implementation: str = "sdpa", max_context_tokens: int = 64_000,
             media_limits: MediaLimits = MediaLimits(), tiny_default: bool = False) -> ClefModel:
        """A checkpoint directory in the released layout, loaded strictly (CheckpointError naming what is wrong)."""
        directory = Path(directory)
        check_checkpoint_files(directory)
        try:
            parts = load_processor_parts(directory)
        except ProcessorConfigError as exc:
            raise CheckpointError(str(exc)) from exc
        backbone = Backbone.load(directory, dtype=dtype, device=device, attn_implementation=attn_implementation)
        head = load_joint_head(directory, backbone.device, getattr(torch, head_dtype))
        if head.hidden_size != backbone.hidden_size:
            raise CheckpointError(f"joint head hidden_size {head.hidden_size} != backbone hidden size "
                                  f"{backbone.hidden_size}")
        source = CheckpointSource(directory, tiny_default, release_date(directory))
        return cls(backbone, head, parts, source, max_context_tokens=max_context_tokens, media_limits=media_limits)

    def encode_media(self, items: tuple[MediaItem, ...]) -> EncodedMedia:
        """Decode and encode a request's media items (prompt order); typed MediaError carrying the bad item."""
        return encode_request_media(items, self.parts, self.media_limits, **self.backbone.media_timing)

    def prepare(self, request: DecisionRequest, media: EncodedMedia | None = None) -> PreparedRecord:
        """The request's model inputs. `media`: its items already encoded (`encode_media`), to reuse them."""
        started = time.perf_counter()
        if media is None:
            media = self.encode_media(request.media)
        decoded = time.perf_counter()
        prompt = self.prompt_encoder.encode(request, media.ids)
        input_ids = torch.tensor(prompt.input_ids, dtype=torch.long)
        positions = self.backbone.position_ids(input_ids, media.tensors, media.use_audio_in_video)
        # "text" = every token that is not a media pad (block markers and newlines count as text)
        text_tokens = len(prompt.input_ids) - sum(media.tokens_by_modality.values())
        tokens = {"text": text_tokens, **media.tokens_by_modality}
        timings = {"decode": (decoded - started) * 1e3, "encode": (time.perf_counter() - decoded) * 1e3}
        return PreparedRecord(request, prompt, input_ids, positions, media.tensors, tokens, timings)

    def logits(self, records: list[PreparedRecord]) -> list[list[torch.Tensor]]:
        """One backbone forward for all records, then one batched head pass (per record, per question [n_i] logits)."""
        batch = self.backbone.collate([(r.input_ids, r.position_ids, r.media) for r in records])
        hidden = self.backbone.padded_hidden_states(batch)
        head_device = self.head.hidden_norm.weight.device
        return self.head.forward_batch(hidden.to(head_device), batch.lengths, batch.input_ids.to(head_device),
                                       self.backbone.lexical_table, [r.prompt.spans for r in records])

    @torch.inference_mode()
    def probabilities(self, records: list[PreparedRecord]) -> list[list[torch.Tensor]]:
        """Per record, per question: float32 probabilities in the head's (prompt) option order."""
        per_record = self.logits(records)
        if self.calibration is not None:
            per_record = [self.calibration.apply_record(r.request.questions, x) for r, x in zip(records, per_record)]
        return [option_probabilities(per_question) for per_question in per_record]
