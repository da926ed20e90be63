"""Chunked prefill: a long prefix computed a chunk of `chunk_tokens` at a time, so that the thread owning the model can
answer other requests between chunks.

A record is chunked when its prefix is longer than two chunks and not already computed or cached. Its first chunk
holds every media item whole (the thinker scatters media features by placeholder, so a media block cannot be split);
each later chunk continues the same preallocated key/value cache (`Backbone.chunk_cache`). When the last chunk is
done the prefix becomes the record's `prefix_entry` (and goes to the prefix cache), and the record runs like one
whose prefix was cached (`omni.model.forward`). Which record gets a chunk in which model turn, and putting it back in
the queue until it is done, is the engine's business (`omni/serve/chunking.py`).
Knows nothing of queues, deadlines, HTTP or the request's wire shape.
"""
from __future__ import annotations

import torch

from omni.model.backbone import Backbone
from omni.model.head import JointSchemaHead
from omni.model.inputs import Inputs, PreparedRecord
from omni.model.prefixes import PrefixCache, PrefixEntry, PrefixProgress


class ChunkedPrefill:
    def __init__(self, backbone: Backbone, head: JointSchemaHead, prefixes: PrefixCache, inputs: Inputs,
                 chunk_tokens: int = 0):
        """`chunk_tokens` 0: nothing is chunked."""
        self.backbone, self.head, self.prefixes, self.inputs = backbone, head, prefixes, inputs
        self.chunk_tokens = chunk_tokens

    def needs_chunks(self, record: PreparedRecord) -> bool:
        """Whether the record's prefix is long enough to prefill a chunk at a time and is not already computed or
        cached."""
        chunk = self.chunk_tokens
        if not chunk or record.prefix_entry is not None or record.prefix_len <= 2 * chunk:
            return False
        return record.progress is not None or self.prefixes.peek(record.prefix_key) is None

    def tokens_left(self, record: PreparedRecord) -> int:
        """Prefix tokens the record still has to prefill a chunk at a time (0 when it is not chunked)."""
        if not self.needs_chunks(record):
            return 0
        return record.prefix_len - (record.progress.done if record.progress is not None else 0)

    def step(self, record: PreparedRecord) -> bool:
        """Prefill the next chunk of the record's prefix; True once the prefix is complete."""
        with self.backbone.grad_off():
            return self._step(record)

    def _step(self, record: PreparedRecord) -> bool:
        if record.progress is None:
            self.inputs.complete(record)
            record.progress = PrefixProgress(self.backbone.chunk_cache(record.prefix_len))
        chunks, prefix, positions = record.progress, record.prefix_len, record.positions
        start = chunks.done
        end = min(prefix, max(start + self.chunk_tokens, record.prompt.media_end if start == 0 else 0))
        with self.backbone.lora.rows([record.lora_key]):
            hidden = self.backbone.prefill_chunk(chunks.cache, record.input_ids[start:end],
                                                 positions[:, :, start:end], record.media.tensors if start == 0 else {})
        chunks.hidden.append(hidden.to(self.head.hidden_norm.weight.device))
        chunks.done = end
        if end < prefix:
            return False
        entry = PrefixEntry(self.backbone.cached_kv(chunks.cache), torch.cat(chunks.hidden),
                            int(positions[:, 0, :prefix].max()) + 1)
        record.prefix_entry, record.progress = entry, None
        if self.prefixes.enabled:
            self.prefixes.put(record.prefix_key, entry)
        return True
