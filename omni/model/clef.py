"""A loaded Clef-omni model: processor parts + prompt encoder + thinker backbone + joint-schema head.

One pipeline for serving, evaluation and training. `prepare` is THE way a request becomes model inputs (media
decoded and encoded, the reference prompt, explicit M-RoPE positions), on the CPU and thread-safe; `logits` /
`probabilities` run one prefill for a batch of prepared records and one batched head pass. `from_config` finds the
checkpoint (embedded default, directory or hub id), loads it strictly and applies calibration when asked.
Knows nothing of HTTP, queues, answers' wire shape or the environment.
"""
from __future__ import annotations

import hashlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import torch

from omni.contract.config import EngineConfig
from omni.contract.errors import CheckpointError
from omni.contract.types import DecisionRequest
from omni.model.backbone import KV, Backbone
from omni.model.cache import ByteLRU, CacheStats
from omni.model.checkpoint import CheckpointSource, check_checkpoint_files, locate_checkpoint, release_date
from omni.model.head import JointSchemaHead, RecordSpans, load_joint_head, option_probabilities
from omni.model.media import MediaEncoder, RequestMedia
from omni.model.prompt import EncodedPrompt, PromptEncoder
from preprocess.item import MediaItem
from preprocess.loader import ProcessorConfigError, ProcessorParts, load_processor_parts
from preprocess.media import MediaLimits, MiB
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
    prefix_key: str = ""               # everything before the first question, hashed (the prefix cache's key)
    timings_ms: dict[str, float] = field(default_factory=dict)   # decode, encode
    cache: dict[str, str] = field(default_factory=dict)          # media / prefix: hit, partial, miss (off: absent)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())

    @property
    def truncated_state_tokens(self) -> int:
        return self.prompt.state_tokens_dropped

    @property
    def prefix_len(self) -> int:
        return self.prompt.prefix_len


@dataclass(frozen=True)
class PrefixEntry:
    """A computed prefix: each layer's keys and values (backbone device) and the head's memory rows [P, W]."""

    kv: KV
    memory: torch.Tensor

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.kv) + self.memory.nbytes


@dataclass
class _Unit:
    """What the head reads for one block that follows a computed prefix: its rows, ids, spans (row indices)."""

    record: int
    hidden: torch.Tensor               # [S, H]
    input_ids: torch.Tensor            # [S]
    spans: RecordSpans
    memory: torch.Tensor               # the prefix's memory rows [P, W]


class ClefModel:
    def __init__(self, backbone: Backbone, head: JointSchemaHead, parts: ProcessorParts, source: CheckpointSource, *,
                 max_context_tokens: int = 64_000, media_limits: MediaLimits = MediaLimits(),
                 media_cache_bytes: int = 0, prefix_cache_bytes: int = 0, isolation: str = "joint"):
        self.backbone = backbone
        self.head = head
        self.parts = parts
        self.source = source
        self.media_limits = media_limits
        self.isolation = isolation
        self.prompt_encoder = PromptEncoder(parts.tokenizer, max_context_tokens)
        self.media = MediaEncoder(parts, media_limits, media_cache_bytes, **backbone.media_timing)
        self.prefixes: ByteLRU[PrefixEntry] = ByteLRU(prefix_cache_bytes)
        self._identity = uuid.uuid4().hex      # prefix keys are this model's own: its weights made the entries
        self.calibration = None   # an omni.model.calibration.Calibration, applied to the logits when set

    @classmethod
    def from_config(cls, config: EngineConfig) -> ClefModel:
        """The model `config` names (None = the embedded default), loaded strictly; calibrated when asked."""
        directory = locate_checkpoint(config.model_path, config.cache_dir)
        model = cls.load(directory, dtype=config.dtype, device=config.device, head_dtype=config.head_dtype,
                         attn_implementation=config.attn_implementation, max_context_tokens=config.max_context_tokens,
                         media_limits=config.media, tiny_default=config.model_path is None,
                         media_cache_bytes=int(config.media_cache_mb * MiB),
                         prefix_cache_bytes=int(config.prefix_cache_mb * MiB), isolation=config.isolation)
        if config.calibration:
            from omni.model.calibration import load_calibration

            model.calibration = load_calibration(directory)
            if model.calibration is None:
                log.warning("calibration is on but %s has no calibration.json: serving uncalibrated", directory)
        return model

    @classmethod
    def load(cls, directory: str | Path, *, dtype: str = "auto", device: str = "auto", head_dtype: str = "float32",
             attn_implementation: str = "sdpa", max_context_tokens: int = 64_000,
             media_limits: MediaLimits = MediaLimits(), tiny_default: bool = False, **caching) -> ClefModel:
        """A checkpoint directory in the released layout, loaded strictly (CheckpointError naming what is wrong).

        `caching`: media_cache_bytes, prefix_cache_bytes (0 = off, the default here) and isolation.
        """
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
        return cls(backbone, head, parts, source, max_context_tokens=max_context_tokens, media_limits=media_limits,
                   **caching)

    # ------------------------------------------------------------------------------------------------- inputs
    def encode_media(self, items: tuple[MediaItem, ...]) -> RequestMedia:
        """Decode and encode a request's media items (prompt order), through the media cache; typed MediaError
        carrying the bad item."""
        return self.media.encode(items)

    def prepare(self, request: DecisionRequest, media: RequestMedia | None = None) -> PreparedRecord:
        """The request's model inputs. `media`: its items already encoded (`encode_media`), to reuse them."""
        started = time.perf_counter()
        if media is None:
            media = self.encode_media(request.media)
        decoded = time.perf_counter()
        encoded = media.encoded
        isolated = (request.isolation or self.isolation) == "isolated" and len(request.questions) > 1
        prompt = self.prompt_encoder.encode(request, encoded.ids, isolated=isolated)
        input_ids = torch.tensor(prompt.input_ids, dtype=torch.long)
        positions = self._positions(prompt, input_ids, encoded)
        # "text" = every token that is not a media pad (block markers and newlines count as text)
        text_tokens = len(prompt.input_ids) - sum(encoded.tokens_by_modality.values())
        tokens = {"text": text_tokens, **encoded.tokens_by_modality}
        key = self._prefix_key(input_ids, positions, prompt.prefix_len, media.digest, encoded.use_audio_in_video)
        cache = {"media": "hit" if media.cached_items == media.items else "partial" if media.cached_items else "miss"} \
            if media.items and self.media.cache.enabled else {}
        timings = {"decode": (decoded - started) * 1e3, "encode": (time.perf_counter() - decoded) * 1e3}
        return PreparedRecord(request, prompt, input_ids, positions, encoded.tensors, tokens, key, timings, cache)

    def _positions(self, prompt: EncodedPrompt, input_ids: torch.Tensor, media: EncodedMedia) -> torch.Tensor:
        """[3, 1, T] M-RoPE ids. Isolated blocks each restart where the prefix ends, as if asked alone."""
        if not prompt.isolated:
            return self.backbone.position_ids(input_ids, media.tensors, media.use_audio_in_video)
        prefix = self.backbone.position_ids(input_ids[:prompt.prefix_len], media.tensors, media.use_audio_in_video)
        start = int(prefix.max()) + 1
        blocks = [(start + torch.arange(b.end - b.start)).view(1, 1, -1).expand(3, 1, -1) for b in prompt.blocks]
        return torch.cat([prefix, *blocks], dim=2)

    def _prefix_key(self, input_ids: torch.Tensor, positions: torch.Tensor, length: int, media_digest: str,
                    heard: bool) -> str:
        digest = hashlib.blake2b(digest_size=20)
        digest.update(f"{self._identity}|{media_digest}|{heard}|{length}|".encode())
        digest.update(input_ids[:length].numpy().tobytes())
        digest.update(positions[:, :, :length].contiguous().numpy().tobytes())
        return digest.hexdigest()

    # ------------------------------------------------------------------------------------------------ forward
    def logits(self, records: list[PreparedRecord]) -> list[list[torch.Tensor]]:
        """Per record, per question [n_i] logits (request question order), in as few forwards as the batch allows:
        records whose prefix is not cached run together as today (and leave their prefix in the cache); the others
        prefill only what follows their prefix. Under grad (training) the prefix cache is neither read nor filled.
        """
        use_cache = self.prefixes.enabled and not torch.is_grad_enabled()
        entries: dict[str, PrefixEntry] = {}
        for record in records:
            if use_cache:
                entry = entries.get(record.prefix_key) or self.prefixes.get(record.prefix_key)
                record.cache["prefix"] = "hit" if entry is not None else "miss"
                if entry is not None:
                    entries[record.prefix_key] = entry
        out: list[list[torch.Tensor] | None] = [None] * len(records)
        full = [i for i, r in enumerate(records) if not r.prompt.isolated and r.prefix_key not in entries]
        if full:
            for i, logits in zip(full, self._full(records, full, entries if use_cache else None)):
                out[i] = logits
        missing = {r.prefix_key: i for i, r in enumerate(records) if r.prompt.isolated and r.prefix_key not in entries}
        if missing:
            self._prefixes(records, list(missing.values()), entries, store=use_cache)
        units = self._continue(records, [i for i in range(len(records)) if out[i] is None], entries)
        if units:
            per_unit = self._head([u.hidden for u in units], [u.input_ids for u in units], [u.spans for u in units],
                                  [u.memory for u in units])
            for unit, logits in zip(units, per_unit):
                if records[unit.record].prompt.isolated:
                    out[unit.record] = (out[unit.record] or []) + logits
                else:
                    out[unit.record] = logits
        return out

    def _full(self, records: list[PreparedRecord], rows: list[int],
              entries: dict[str, PrefixEntry] | None) -> list[list[torch.Tensor]]:
        """One forward of whole records (the path without a cache); their prefixes go to `entries` and the cache."""
        chosen = [records[i] for i in rows]
        batch = self.backbone.collate([(r.input_ids, r.position_ids, r.media) for r in chosen])
        if entries is None:
            hidden = self.backbone.padded_hidden_states(batch)
        else:
            hidden, cache = self.backbone.prefill_with_cache(batch)
            for row, record in enumerate(chosen):
                self._keep(record.prefix_key, entries, cache, row, hidden[row], record.prefix_len, store=True)
        head_device = self.head.hidden_norm.weight.device
        return self.head.forward_batch(hidden.to(head_device), batch.lengths, batch.input_ids.to(head_device),
                                       self.backbone.lexical_table, [r.prompt.spans for r in chosen])

    def _prefixes(self, records: list[PreparedRecord], rows: list[int], entries: dict[str, PrefixEntry],
                  store: bool) -> None:
        """One forward of the prefixes alone (isolated records whose prefix is not cached)."""
        chosen = [records[i] for i in rows]
        batch = self.backbone.collate([(r.input_ids[:r.prefix_len], r.position_ids[:, :, :r.prefix_len], r.media)
                                       for r in chosen])
        hidden, cache = self.backbone.prefill_with_cache(batch)
        for row, record in enumerate(chosen):
            self._keep(record.prefix_key, entries, cache, row, hidden[row], record.prefix_len, store)

    def _keep(self, key: str, entries: dict[str, PrefixEntry], cache, row: int, hidden: torch.Tensor, length: int,
              store: bool) -> None:
        """Row `row`'s first `length` positions as a PrefixEntry, for this batch (and the cache when `store`)."""
        if key in entries:
            return
        entry = PrefixEntry(self.backbone.prefix_kv(cache, row, length), self.head.memory_rows(
            hidden[:length].to(self.head.hidden_norm.weight.device)))
        entries[key] = entry
        if store:
            self.prefixes.put(key, entry, entry.nbytes)

    def _continue(self, records: list[PreparedRecord], rows: list[int],
                  entries: dict[str, PrefixEntry]) -> list[_Unit]:
        """Prefill what follows each cached prefix: joint records sharing a prefix together, isolated records each
        with their block mask. Returns what the head must read."""
        units: list[_Unit] = []
        groups: dict[str, list[int]] = {}
        for i in rows:
            if records[i].prompt.isolated:
                units += self._continue_isolated(i, records[i], entries[records[i].prefix_key])
            else:
                groups.setdefault(records[i].prefix_key, []).append(i)
        for key, members in groups.items():
            units += self._continue_joint(members, [records[i] for i in members], entries[key])
        return units

    def _continue_joint(self, rows: list[int], chosen: list[PreparedRecord], entry: PrefixEntry) -> list[_Unit]:
        prefix = chosen[0].prefix_len
        batch = self.backbone.collate([(r.input_ids[prefix:], r.position_ids[:, :, prefix:], {}) for r in chosen])
        hidden = self.backbone.continue_from(entry.kv, batch.input_ids, batch.position_ids)
        return [_Unit(i, hidden[row, :n], r.input_ids[prefix:], r.prompt.spans.shifted(-prefix), entry.memory)
                for row, (i, r, n) in enumerate(zip(rows, chosen, batch.lengths))]

    def _continue_isolated(self, index: int, record: PreparedRecord, entry: PrefixEntry) -> list[_Unit]:
        prefix, blocks = record.prefix_len, record.prompt.blocks
        mask = self.backbone.block_mask(prefix, [b.end - b.start for b in blocks])
        hidden = self.backbone.continue_from(entry.kv, record.input_ids[None, prefix:],
                                             record.position_ids[:, :, prefix:], mask)[0]
        return [_Unit(index, hidden[b.start - prefix:b.end - prefix], record.input_ids[b.start:b.end],
                      b.spans.shifted(-b.start), entry.memory) for b in blocks]

    def _head(self, hidden: list[torch.Tensor], input_ids: list[torch.Tensor], spans: list[RecordSpans],
              memory: list[torch.Tensor]) -> list[list[torch.Tensor]]:
        """One batched head pass over units that follow computed prefixes."""
        head_device = self.head.hidden_norm.weight.device
        lengths = [len(ids) for ids in input_ids]
        padded = hidden[0].new_zeros(len(hidden), max(lengths), hidden[0].shape[-1])
        ids = torch.zeros(len(hidden), max(lengths), dtype=torch.long)
        for row, (h, i) in enumerate(zip(hidden, input_ids)):
            padded[row, :len(i)] = h
            ids[row, :len(i)] = i
        return self.head.forward_batch(padded.to(head_device), lengths, ids.to(head_device),
                                       self.backbone.lexical_table, spans, prefix_memory=memory)

    @torch.inference_mode()
    def probabilities(self, records: list[PreparedRecord]) -> list[list[torch.Tensor]]:
        """Per record, per question: float32 probabilities in the head's (prompt) option order."""
        per_record = self.logits(records)
        if self.calibration is not None:
            per_record = [self.calibration.apply_record(r.request.questions, x) for r, x in zip(records, per_record)]
        return [option_probabilities(per_question) for per_question in per_record]

    def cache_stats(self) -> dict[str, CacheStats]:
        """The media and prefix caches' counters (for metrics)."""
        return {"media": self.media.cache.stats(), "prefix": self.prefixes.stats()}

    def forget_prefixes(self) -> None:
        """Drop every cached prefix (they were computed with the weights as they were: call after changing them)."""
        self.prefixes.clear()
