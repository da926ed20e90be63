"""A loaded Clef-omni model: processor parts + prompt encoder + thinker backbone + joint-schema head.

One pipeline for serving, evaluation and training. `prepare` is THE way a request becomes model inputs (media
decoded and encoded through the media cache, the reference prompt, explicit M-RoPE positions), on the CPU and
thread-safe; `logits` / `probabilities` run a batch of prepared records and one batched head pass.
`from_config` finds the checkpoint (embedded default, directory or hub id), loads it strictly and applies
calibration when asked.

Remembering (clef-reference §5: exact because the backbone is causal and the prompt puts everything that does not
depend on the questions first): the prefix of a record — system text, STATE:, media, state, schema header — is
keyed by its ids and media content. Records whose prefix is not cached run whole, as without a cache, and leave it
behind: each layer's keys/values and the head's memory rows (§3: the head attends to every row). A record whose
prefix is cached prefills only what follows it, its positions continuing after the prefix. Isolated records
(`x_isolation`) have one block per question, each read by the head with the prefix alone, as if asked alone.
Only the model thread reads and fills the prefix cache; under grad (training) it is neither read nor filled.
Knows nothing of HTTP, queues, answers' wire shape or the environment.
"""
from __future__ import annotations

import hashlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from omni.contract.config import EngineConfig
from omni.contract.errors import CheckpointError
from omni.contract.types import DecisionRequest
from omni.model.backbone import KV, Backbone
from omni.model.cache import ByteLRU, CacheStats, resident_bytes
from omni.model.checkpoint import CheckpointSource, check_checkpoint_files, locate_checkpoint, release_date
from omni.model.head import JointSchemaHead, RecordSpans, load_joint_head, option_probabilities
from omni.model.media import MediaEncoder, RequestMedia
from omni.model.prompt import EncodedPrompt, PromptEncoder
from preprocess.item import MediaItem
from preprocess.loader import ProcessorConfigError, ProcessorParts, load_processor_parts
from preprocess.media import MediaLimits, MiB
from preprocess.processor import EncodedMedia

log = logging.getLogger(__name__)
# keys/values of a cached prefix are repeated once per row of a continuation forward: at most this much at a time
CONTINUATION_BUDGET_BYTES = 512 * MiB


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
    prefix_key: str = ""               # everything before the first question, hashed (the prefix cache's key)
    timings_ms: dict[str, float] = field(default_factory=dict)   # decode, encode
    cache: dict[str, str] = field(default_factory=dict)          # media / prefix: hit, partial, miss (off: absent)
    prefix_entry: PrefixEntry | None = None    # its prefix, once prefilled in chunks
    progress: _Chunks | None = None            # a chunked prefill under way

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


@dataclass(frozen=True)
class PrefixEntry:
    """A computed prefix: each layer's keys and values (backbone device), the head's memory rows [P, W] and the first
    position id after it (text after the prefix continues from there)."""

    kv: KV
    memory: torch.Tensor
    next_position: int

    @property
    def nbytes(self) -> int:
        return resident_bytes(*(t for pair in self.kv for t in pair), self.memory)


@dataclass
class _Chunks:
    """A prefix being prefilled a chunk at a time: the cache so far, the memory rows so far, tokens done."""

    cache: Any
    memory: list[torch.Tensor] = field(default_factory=list)
    done: int = 0


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
                 media_cache_bytes: int = 0, prefix_cache_bytes: int = 0, isolation: str = "joint",
                 prefill_chunk_tokens: int = 0):
        self.backbone = backbone
        self.head = head
        self.parts = parts
        self.source = source
        self.media_limits = media_limits
        self.isolation = isolation
        self.prefill_chunk_tokens = prefill_chunk_tokens
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
                         prefix_cache_bytes=int(config.prefix_cache_mb * MiB), isolation=config.isolation,
                         prefill_chunk_tokens=config.prefill_chunk_tokens)
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

        `caching`: media_cache_bytes, prefix_cache_bytes, prefill_chunk_tokens (0 = off, the defaults here) and
        isolation.
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
        # "text" = every token that is not a media pad (block markers and newlines count as text)
        text_tokens = len(prompt.input_ids) - sum(encoded.tokens_by_modality.values())
        tokens = {"text": text_tokens, **encoded.tokens_by_modality}
        key = self._prefix_key(input_ids, prompt.prefix_len, media.digest, encoded.use_audio_in_video)
        cache = {"media": "hit" if media.cached_items == media.items else "partial" if media.cached_items else "miss"} \
            if media.items and self.media.cache.enabled else {}
        record = PreparedRecord(request, prompt, input_ids, encoded, None, torch.empty(3, 1, 0, dtype=torch.long),
                                tokens, key, {}, cache)
        expected = self.prefixes.peek(key) if self.prefixes.enabled else None
        if expected is not None:   # likely to reuse the prefix: no pixels, no positions before the questions
            record.suffix_position_ids = self._after_prefix(prompt, expected.next_position)
        else:
            self._complete(record)
        record.timings_ms = {"decode": (decoded - started) * 1e3, "encode": (time.perf_counter() - decoded) * 1e3}
        return record

    def _complete(self, record: PreparedRecord) -> PreparedRecord:
        """Build what a forward of the whole record needs: every media tensor and the [3, 1, T] M-RoPE ids.
        Isolated blocks each restart where the prefix ends, as if asked alone."""
        if record.position_ids is not None:
            return record
        record.media = media = record.media.complete()
        prompt, ids = record.prompt, record.input_ids
        if prompt.isolated:
            prefix = self.backbone.position_ids(ids[:prompt.prefix_len], media.tensors, media.use_audio_in_video)
            positions = torch.cat([prefix, self._after_prefix(prompt, int(prefix.max()) + 1)], dim=2)
        else:
            positions = self.backbone.position_ids(ids, media.tensors, media.use_audio_in_video)
        record.position_ids = positions
        record.suffix_position_ids = positions[:, :, prompt.prefix_len:]
        return record

    @staticmethod
    def _after_prefix(prompt: EncodedPrompt, start: int) -> torch.Tensor:
        """[3, 1, T - P]: text after the prefix continues at `start`; isolated, each block starts there again."""
        runs = [b.end - b.start for b in prompt.blocks] if prompt.isolated else [len(prompt.input_ids) - prompt.prefix_len]
        return torch.cat([(start + torch.arange(n)).view(1, 1, -1).expand(3, 1, -1) for n in runs], dim=2)

    def _prefix_key(self, input_ids: torch.Tensor, length: int, media_digest: str, heard: bool) -> str:
        """The prefix's ids, the content of its media and whether videos are heard (its position ids follow from
        these), under this model's identity."""
        digest = hashlib.blake2b(digest_size=20)
        digest.update(f"{self._identity}|{media_digest}|{heard}|{length}|".encode())
        digest.update(input_ids[:length].numpy().tobytes())
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
            if record.prefix_entry is not None:                    # prefilled in chunks just now
                entries[record.prefix_key] = record.prefix_entry
                if self.prefixes.enabled:
                    record.cache["prefix"] = "miss"
            elif use_cache:
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
        chosen = [self._complete(records[i]) for i in rows]
        batch = self.backbone.collate([(r.input_ids, r.position_ids, r.media.tensors) for r in chosen])
        if entries is None:
            hidden = self.backbone.padded_hidden_states(batch)
        else:
            hidden, cache = self.backbone.prefill_with_cache(batch)
            for row, record in enumerate(chosen):
                self._keep(record, entries, cache, row, hidden[row], store=True)
        head_device = self.head.hidden_norm.weight.device
        return self.head.forward_batch(hidden.to(head_device), batch.lengths, batch.input_ids.to(head_device),
                                       self.backbone.lexical_table, [r.prompt.spans for r in chosen])

    def _prefixes(self, records: list[PreparedRecord], rows: list[int], entries: dict[str, PrefixEntry],
                  store: bool) -> None:
        """One forward of the prefixes alone (isolated records whose prefix is not cached)."""
        chosen = [self._complete(records[i]) for i in rows]
        batch = self.backbone.collate([(r.input_ids[:r.prefix_len], r.position_ids[:, :, :r.prefix_len],
                                        r.media.tensors) for r in chosen])
        hidden, cache = self.backbone.prefill_with_cache(batch)
        for row, record in enumerate(chosen):
            self._keep(record, entries, cache, row, hidden[row], store)

    def _keep(self, record: PreparedRecord, entries: dict[str, PrefixEntry], cache, row: int, hidden: torch.Tensor,
              store: bool) -> None:
        """The record's prefix (row `row` of a forward) as a PrefixEntry, for this batch (and the cache when `store`)."""
        key, length, positions = record.prefix_key, record.prefix_len, record.position_ids
        if key in entries:
            return
        entry = PrefixEntry(self.backbone.prefix_kv(cache, row, length), self.head.memory_rows(
            hidden[:length].to(self.head.hidden_norm.weight.device)), int(positions[:, 0, :length].max()) + 1)
        entries[key] = entry
        if store:
            self.prefixes.put(key, entry, entry.nbytes)

    def _continue(self, records: list[PreparedRecord], rows: list[int],
                  entries: dict[str, PrefixEntry]) -> list[_Unit]:
        """Prefill what follows each cached prefix. Every run after a prefix is a row: a joint record's schema, or
        one block of an isolated record; rows sharing a prefix go through one forward (as many at a time as
        CONTINUATION_BUDGET_BYTES of repeated keys/values allow). Returns what the head must read."""
        runs: dict[str, list[tuple[int, int, int, RecordSpans]]] = {}    # prefix key -> (record, start, end, spans)
        for i in rows:
            record = records[i]
            if record.prompt.isolated:
                found = [(i, b.start, b.end, b.spans) for b in record.prompt.blocks]
            else:
                found = [(i, record.prefix_len, len(record.input_ids), record.prompt.spans)]
            runs.setdefault(record.prefix_key, []).extend(found)
        units: list[_Unit] = []
        for key, members in runs.items():
            entry = entries[key]
            per_call = max(1, CONTINUATION_BUDGET_BYTES // max(1, sum(k.nbytes + v.nbytes for k, v in entry.kv)))
            for start in range(0, len(members), per_call):
                units += self._continue_rows(records, members[start:start + per_call], entry)
        return units

    def _continue_rows(self, records: list[PreparedRecord], runs: list[tuple[int, int, int, RecordSpans]],
                       entry: PrefixEntry) -> list[_Unit]:
        """One forward of runs that follow the same prefix (right-padded rows; each causal over prefix + itself)."""
        pieces = []
        for i, start, end, _ in runs:
            record = records[i]
            offset = start - record.prefix_len
            pieces.append((record.input_ids[start:end], record.suffix_position_ids[:, :, offset:offset + end - start],
                           {}))
        batch = self.backbone.collate(pieces)
        hidden = self.backbone.continue_from(entry.kv, batch.input_ids, batch.position_ids)
        return [_Unit(i, hidden[row, :end - start], records[i].input_ids[start:end], spans.shifted(-start),
                      entry.memory) for row, (i, start, end, spans) in enumerate(runs)]

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
            per_record = [self.calibration.apply_record(r.request, x) for r, x in zip(records, per_record)]
        return [option_probabilities(per_question) for per_question in per_record]

    # ------------------------------------------------------------------------------------------ chunked prefill
    def needs_chunks(self, record: PreparedRecord) -> bool:
        """Whether the record's prefix is long enough to prefill a chunk at a time (so that the model thread can
        serve other requests in between) and is not already computed or cached."""
        chunk = self.prefill_chunk_tokens
        if not chunk or record.prefix_entry is not None or record.prefix_len <= 2 * chunk:
            return False
        return record.progress is not None or self.prefixes.peek(record.prefix_key) is None

    def prefill_tokens_left(self, record: PreparedRecord) -> int:
        """Prefix tokens the record still has to prefill a chunk at a time (0 when it is not chunked)."""
        if not self.needs_chunks(record):
            return 0
        return record.prefix_len - (record.progress.done if record.progress is not None else 0)

    @torch.inference_mode()
    def prefill_step(self, record: PreparedRecord) -> bool:
        """Prefill the next chunk of the record's prefix (the first chunk holds every media item whole); True once
        the prefix is complete: it is then the record's `prefix_entry` (and in the prefix cache), and the record
        runs like one whose prefix was cached."""
        if record.progress is None:
            self._complete(record)
            record.progress = _Chunks(self.backbone.chunk_cache(record.prefix_len))
        chunks, prefix = record.progress, record.prefix_len
        start = chunks.done
        end = min(prefix, max(start + self.prefill_chunk_tokens, record.prompt.media_end if start == 0 else 0))
        hidden = self.backbone.prefill_chunk(chunks.cache, record.input_ids[start:end],
                                             record.position_ids[:, :, start:end],
                                             record.media.tensors if start == 0 else {})
        chunks.memory.append(self.head.memory_rows(hidden.to(self.head.hidden_norm.weight.device)))
        chunks.done = end
        if end < prefix:
            return False
        entry = PrefixEntry(self.backbone.cached_kv(chunks.cache), torch.cat(chunks.memory),
                            int(record.position_ids[:, 0, :prefix].max()) + 1)
        record.prefix_entry, record.progress = entry, None
        if self.prefixes.enabled:
            self.prefixes.put(record.prefix_key, entry, entry.nbytes)
        return True

    def cache_stats(self) -> dict[str, CacheStats]:
        """The media and prefix caches' counters (for metrics)."""
        return {"media": self.media.cache.stats(), "prefix": self.prefixes.stats()}

    def forget_prefixes(self) -> None:
        """Drop every cached prefix (they were computed with the weights as they were: call after changing them)."""
        self.prefixes.clear()
