"""The ONE way a request becomes model inputs: media decoded and encoded (through the media cache), the reference
prompt, explicit M-RoPE position ids, and the key of its prefix.

`Inputs.prepare` runs on the CPU, off the model thread, and is thread-safe. When the record's prefix is in the
prefix cache already (`PrefixCache.peek`), it stops short: no pixel tensors and no positions before the questions,
only the positions after the prefix, which continue where the cached prefix ends. `Inputs.complete` builds the rest
when a forward needs the whole record (the prefix turned out not to be cached, or it is prefilled in chunks).
Isolated records (`x_isolation`) have one block per question, each restarting its positions where the prefix ends,
as if asked alone. Knows nothing of how the forward runs, of queues, HTTP, answers' wire shape or the environment.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from omni.contract.audit import MediaAudit, PromptAudit
from omni.contract.types import DecisionRequest
from omni.model.adapters import Selection
from omni.model.backbone import Backbone
from omni.model.media import MediaEncoder, RequestMedia
from omni.model.prefixes import PrefixCache, PrefixEntry, PrefixProgress
from omni.model.prompt import TEMPLATE_NAME, TEMPLATE_SHA256, EncodedPrompt, PromptEncoder
from preprocess.item import MediaItem
from preprocess.processor import EncodedMedia


@dataclass
class PreparedRecord:
    """Everything one request needs for the forward pass; built off the model thread."""

    request: DecisionRequest
    prompt: EncodedPrompt
    input_ids: torch.Tensor            # [T]
    media: EncodedMedia                # its pixel tensors may be deferred (a record expected to reuse its prefix)
    position_ids: torch.Tensor | None  # [3, 1, T]; None while only the part after the prefix is known
    suffix_position_ids: torch.Tensor  # [3, 1, T - P]: the positions after the prefix
    tokens_by_modality: dict[str, int]
    prompt_audit: PromptAudit          # the audit record's prompt: what the ids are, how they were made
    prefix_key: str = ""               # everything before the first question, hashed (`PrefixCache.key`)
    timings_ms: dict[str, float] = field(default_factory=dict)   # decode, encode
    cache: dict[str, str] = field(default_factory=dict)          # media / prefix: hit, partial, miss (off: absent)
    prefix_entry: PrefixEntry | None = None    # its prefix, once prefilled in chunks
    progress: PrefixProgress | None = None     # a chunked prefill under way
    media_audit: tuple[MediaAudit, ...] = ()   # the audit record's media: what the model used of each item
    selection: Selection = field(default_factory=Selection)   # the adapter it is answered with, a shadow candidate
    shadow_units: list[Any] | None = None      # what a head-only shadow candidate's head reads, left by the forward
    attention: list[torch.Tensor] | None = None   # per question [n_i, T]: the head's evidence, when the request asks

    @property
    def lora_key(self) -> str | None:
        """The resident LoRA weights its backbone rows run with (None: the base)."""
        adapter = self.selection.adapter
        return adapter.lora_key if adapter is not None else None

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())

    @property
    def truncated_state_tokens(self) -> int:
        return self.prompt.state_tokens_dropped

    @property
    def truncated_state_chars(self) -> int:
        return self.prompt.state_chars_dropped

    @property
    def prefix_len(self) -> int:
        return self.prompt.prefix_len

    @property
    def positions(self) -> torch.Tensor:
        """[3, 1, T]: the record's position ids (only after `Inputs.complete`)."""
        if self.position_ids is None:
            raise RuntimeError("the record's positions are not built yet (Inputs.complete)")
        return self.position_ids


class Inputs:
    """Requests -> PreparedRecord, for one loaded model (its backbone's position rule, tokenizer, media encoder and
    prefix cache)."""

    def __init__(self, backbone: Backbone, prompt_encoder: PromptEncoder, media: MediaEncoder,
                 prefixes: PrefixCache, isolation: str = "joint"):
        self.backbone, self.prompt_encoder, self.media = backbone, prompt_encoder, media
        self.prefixes, self.isolation = prefixes, isolation

    def encode_media(self, items: tuple[MediaItem, ...]) -> RequestMedia:
        """Decode and encode a request's media items (prompt order), through the media cache; typed MediaError
        carrying the bad item."""
        return self.media.encode(items)

    def prepare(self, request: DecisionRequest, media: RequestMedia | None = None,
                selection: Selection | None = None) -> PreparedRecord:
        """The request's model inputs. `media`: its items already encoded (`encode_media`), to reuse them;
        `selection`: the adapter (and shadow candidate) it is answered with (None: the base)."""
        selection = selection or Selection()
        started = time.perf_counter()
        if media is None:
            media = self.encode_media(request.media)
        decoded = time.perf_counter()
        encoded = media.encoded
        isolated = (request.isolation or self.isolation) == "isolated" and len(request.questions) > 1
        prompt = self.prompt_encoder.encode(request, encoded.ids, isolated=isolated)
        input_ids = torch.tensor(prompt.input_ids, dtype=torch.long)
        # "text" = every token that is not a media pad (block markers and newlines count as text)
        text_tokens = len(prompt.input_ids) - sum(encoded.tokens_by_modality.values())
        tokens = {"text": text_tokens, **encoded.tokens_by_modality}
        lora = selection.adapter.lora_key if selection.adapter is not None else None
        key = self.prefixes.key(input_ids, prompt.prefix_len, media.digest, encoded.use_audio_in_video, lora)
        cache = {"media": "hit" if media.cached_items == media.items else "partial" if media.cached_items else "miss"} \
            if media.items and self.media.cache.enabled else {}
        record = PreparedRecord(request, prompt, input_ids, encoded, None, torch.empty(3, 1, 0, dtype=torch.long),
                                tokens, prompt_audit(prompt, tokens), key, {}, cache, media_audit=media.audit,
                                selection=selection)
        expected = self.prefixes.peek(key) if self.prefixes.enabled else None
        if expected is not None:   # likely to reuse the prefix: no pixels, no positions before the questions
            record.suffix_position_ids = after_prefix(prompt, expected.next_position)
        else:
            self.complete(record)
        record.timings_ms = {"decode": (decoded - started) * 1e3, "encode": (time.perf_counter() - decoded) * 1e3}
        return record

    def complete(self, record: PreparedRecord) -> PreparedRecord:
        """Build what a forward of the whole record needs: every media tensor and the [3, 1, T] M-RoPE ids.
        Isolated blocks each restart where the prefix ends, as if asked alone."""
        if record.position_ids is not None:
            return record
        record.media = media = record.media.complete()
        prompt, ids = record.prompt, record.input_ids
        if prompt.isolated:
            prefix = self.backbone.position_ids(ids[:prompt.prefix_len], media.tensors, media.use_audio_in_video)
            positions = torch.cat([prefix, after_prefix(prompt, int(prefix.max()) + 1)], dim=2)
        else:
            positions = self.backbone.position_ids(ids, media.tensors, media.use_audio_in_video)
        record.position_ids = positions
        record.suffix_position_ids = positions[:, :, prompt.prefix_len:]
        return record


def prompt_audit(prompt: EncodedPrompt, tokens_by_modality: dict[str, int]) -> PromptAudit:
    """The audit record's view of a prompt: its template, the sha256 of its exact ids (little-endian uint32),
    tokens, truncation and isolation mode."""
    ids = np.asarray(prompt.input_ids, dtype="<u4").tobytes()
    return PromptAudit(TEMPLATE_NAME, TEMPLATE_SHA256, hashlib.sha256(ids).hexdigest(), len(prompt.input_ids),
                       dict(tokens_by_modality), prompt.state_tokens_dropped, prompt.state_chars_dropped,
                       "isolated" if prompt.isolated else "joint")


def after_prefix(prompt: EncodedPrompt, start: int) -> torch.Tensor:
    """[3, 1, T - P]: text after the prefix continues at `start`; isolated, each block starts there again."""
    runs = [b.end - b.start for b in prompt.blocks] if prompt.isolated else [len(prompt.input_ids) - prompt.prefix_len]
    return torch.cat([(start + torch.arange(n)).view(1, 1, -1).expand(3, 1, -1) for n in runs], dim=2)
