"""Prefix state: a record's computed prefix, a prefix being prefilled a chunk at a time, and the prefix cache.

The prefix of a record is everything before its first question — system text, STATE:, media, the state, the schema
header (clef-reference §5: the prompt puts everything that does not depend on the questions first, and the backbone
is causal, so a prefix computed once is exact for every record that shares it). `PrefixCache.key` is THE prefix
key: the prefix's token ids, the content of its media, whether videos are heard (its position ids follow from
these) and the identity of the model that computed it (its weights made the entries). An entry holds each layer's
keys/values, the head's memory rows (§3: the head attends to every row) and the first position id after the prefix.
The cache is read by `prepare` on the decode threads (`peek`: is a prefix likely to be reused?) and filled and read
by the forward on the model thread; `ByteLRU` makes both safe. Knows nothing of requests, prompts, media decoding,
how a forward is run, queues or HTTP.
"""
from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from omni.model.backbone import KV
from omni.model.cache import ByteLRU, CacheStats, resident_bytes

if TYPE_CHECKING:
    from transformers import Cache


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
class PrefixProgress:
    """A prefix being prefilled a chunk at a time: the key/value cache so far, the memory rows so far, tokens done."""

    cache: Cache
    memory: list[torch.Tensor] = field(default_factory=list)
    done: int = 0


class PrefixCache:
    """Computed prefixes by key, bounded in bytes (least recently used go first); a budget of 0 keeps nothing."""

    def __init__(self, budget_bytes: int):
        self._entries: ByteLRU[PrefixEntry] = ByteLRU(budget_bytes)
        self._identity = uuid.uuid4().hex      # keys are this model's own: its weights made the entries

    @property
    def enabled(self) -> bool:
        return self._entries.enabled

    def key(self, input_ids: torch.Tensor, length: int, media_digest: str, heard: bool) -> str:
        """The key of the first `length` ids of `input_ids` [T], with the content of the media among them
        (`RequestMedia.digest`) and whether videos are heard."""
        digest = hashlib.blake2b(digest_size=20)
        digest.update(f"{self._identity}|{media_digest}|{heard}|{length}|".encode())
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
