"""A loaded Clef-omni model: processor parts + prompt encoder + thinker backbone + joint-schema head.

One pipeline for serving, evaluation and training: `prepare` turns a request (and its decoded media) into model
inputs on the CPU; `logits` / `probabilities` run one prefill for a batch of prepared records and one batched head
pass. Knows nothing of HTTP, queues, answers' wire shape or the environment.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from omni.model.backbone import Backbone, check_checkpoint_files
from omni.contract.errors import CheckpointError
from omni.model.head import JointSchemaHead, load_joint_head, option_probabilities
from omni.model.prompt import EncodedPrompt, PromptEncoder
from omni.contract.types import DecisionRequest
from preprocess.loader import ProcessorConfigError, ProcessorParts, load_processor_parts
from preprocess.processor import EncodedMedia

NO_MEDIA = EncodedMedia(ids=[], tensors={}, use_audio_in_video=False, tokens_by_modality={})


@dataclass
class PreparedRecord:
    """Everything one request needs for the forward pass; built off the model thread."""

    request: DecisionRequest
    prompt: EncodedPrompt
    input_ids: torch.Tensor            # [T]
    position_ids: torch.Tensor         # [3, 1, T]
    media: dict[str, torch.Tensor]
    tokens_by_modality: dict[str, int]
    timings_ms: dict[str, float] = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())


class ClefModel:
    def __init__(self, backbone: Backbone, head: JointSchemaHead, parts: ProcessorParts, max_context_tokens: int):
        self.backbone = backbone
        self.head = head
        self.parts = parts
        self.prompt_encoder = PromptEncoder(parts.tokenizer, max_context_tokens)
        self.calibration = None   # an omni.model.calibration.Calibration, applied to the logits when set

    @classmethod
    def load(cls, directory: Path, *, dtype: str = "auto", device: str = "auto", head_dtype: str = "float32",
             attn_implementation: str = "sdpa", max_context_tokens: int = 64_000) -> ClefModel:
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
        return cls(backbone, head, parts, max_context_tokens)

    def prepare(self, request: DecisionRequest, media: EncodedMedia | None = None) -> PreparedRecord:
        media = media or NO_MEDIA
        started = time.perf_counter()
        prompt = self.prompt_encoder.encode(request, media.ids)
        input_ids = torch.tensor(prompt.input_ids, dtype=torch.long)
        positions = self.backbone.position_ids(input_ids, media.tensors, media.use_audio_in_video)
        # "text" = every token that is not a media pad (block markers and newlines count as text)
        text_tokens = len(prompt.input_ids) - sum(media.tokens_by_modality.values())
        tokens = {"text": text_tokens, **media.tokens_by_modality}
        return PreparedRecord(request, prompt, input_ids, positions, media.tensors, tokens,
                              {"encode": (time.perf_counter() - started) * 1e3})

    def logits(self, records: list[PreparedRecord]) -> list[list[torch.Tensor]]:
        """One backbone forward for all records, then one batched head pass (per record, per question [n_i] logits)."""
        batch = self.backbone.collate([(r.input_ids, r.position_ids, r.media) for r in records])
        hidden = self.backbone.padded_hidden_states(batch)
        head_device = self.head.hidden_norm.weight.device
        return self.head.forward_batch(hidden.to(head_device), batch.lengths, batch.input_ids.to(head_device),
                                       self.backbone.lexical_table, [r.prompt.spans for r in records])

    @torch.inference_mode()
    def probabilities(self, records: list[PreparedRecord]) -> list[list[torch.Tensor]]:
        per_record = self.logits(records)
        if self.calibration is not None:
            per_record = [self.calibration.apply_record(r.request.questions, x) for r, x in zip(records, per_record)]
        return [option_probabilities(per_question) for per_question in per_record]
