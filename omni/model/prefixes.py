"""Prefix state: a record's computed prefix, a prefix being prefilled a chunk at a time, and the prefix cache.

The prefix of a record is everything before its first question — system text, STATE:, media, the state, the schema
header (clef-reference §5: the prompt puts everything that does not depend on the questions first, and the backbone
is causal, so a prefix computed once is exact for every record that shares it). `PrefixCache.key` is THE prefix
key: the prefix's token ids, the content of its media, whether videos are heard (its position ids follow from
these), the identity of the model that computed it (its weights made the entries) and the LoRA adapter it ran with
(none for the base and every head-only adapter, which share the base's hidden states). An entry holds each layer's
keys/values, the final-norm hidden rows (each head derives its memory rows from them, §3: the head attends to every
row) and the first position id after the prefix.
The cache is read by `prepare` on the decode threads (`peek`: is a prefix likely to be reused?) and filled and read
by the forward on the model thread; `ByteLRU` makes both safe. Knows nothing of requests, prompts, media decoding,
how a forward is run, queues or HTTP.
"""
from __future__ import annotations

import hashlib
import uuid
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from omni.model.backbone import KV
from omni.model.cache import ByteLRU, CacheStats, resident_bytes

if TYPE_CHECKING:
    from transformers import Cache


class MemoryHead(Protocol):
    """What a prefix entry needs of a head: its memory rows of some hidden rows."""

    def memory_rows(self, hidden: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True, eq=False)
class PrefixEntry:
    """A computed prefix: each layer's keys and values (backbone device), its final-norm hidden rows [P, H] (head
    device) and the first position id after it (text after the prefix continues from there).

    The head reads a prefix through its memory rows (`memory_for(head)`): computed from the hidden rows once per head
    and kept, so the base and every head-only adapter share one entry (same backbone, same hidden states) and each
    head gets exactly the rows it would have computed itself."""

    kv: KV
    hidden: torch.Tensor
    next_position: int
    memories: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary, repr=False)

    def memory_for(self, head: MemoryHead) -> torch.Tensor:
        """The head's memory rows [P, W] of this prefix (computed on first use, then kept while the head lives)."""
        memory = self.memories.get(head)
        if memory is None:
            memory = self.memories[head] = head.memory_rows(self.hidden)
        return memory

    @property
    def nbytes(self) -> int:
        return resident_bytes(*(t for pair in self.kv for t in pair), self.hidden)


@dataclass
class PrefixProgress:
    """A prefix being prefilled a chunk at a time: the key/value cache so far, the hidden rows so far, tokens done."""

    cache: Cache
    hidden: list[torch.Tensor] = field(default_factory=list)
    done: int = 0


class PrefixCache:
    """Computed prefixes by key, bounded in bytes (least recently used go first); a budget of 0 keeps nothing."""

    def __init__(self, budget_bytes: int):
        self._entries: ByteLRU[PrefixEntry] = ByteLRU(budget_bytes)
        self._identity = uuid.uuid4().hex      # keys are this model's own: its weights made the entries

    @property
    def enabled(self) -> bool:
        return self._entries.enabled

    def key(self, input_ids: torch.Tensor, length: int, media_digest: str, heard: bool, lora: str | None = None) -> str:
        """The key of the first `length` ids of `input_ids` [T], with the content of the media among them
        (`RequestMedia.digest`), whether videos are heard and the LoRA weights the backbone ran with (`lora`: the
        resident key of a LoRA adapter, None for the base; head-only adapters share the base's prefixes)."""
        digest = hashlib.blake2b(digest_size=20)
        digest.update(f"{self._identity}|{lora or ''}|{media_digest}|{heard}|{length}|".encode())
        digest.update(input_ids[:length].numpy().tobytes())
        return digest.hexdigest()

    def peek(self, key: str) -> PrefixEntry | None:
        """The entry, without counting a hit or a miss or refreshing it (a guess made before the forward)."""
        return self._entries.peek(key)

    def get(self, key: str) -> PrefixEntry | None:
        return self._entries.get(key)

    def put(self, key: str, entry: PrefixEntry) -> None:
        self._entries.put(key, entry, entry.nbytes)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def clear(self) -> None:
        self._entries.clear()

    def stats(self) -> CacheStats:
        return self._entries.stats()
