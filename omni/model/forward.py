"""The batched forward: prepared records -> per question head logits, in as few backbone passes as the batch allows.

Records whose prefix is not cached run whole, together, as without a cache, and leave their prefix behind (each
layer's keys/values and the head's memory rows, `PrefixEntry`). Isolated records whose prefix is not cached first
run their prefixes alone. Every record whose prefix is then known — cached, computed in this batch, or prefilled in
chunks just before (`record.prefix_entry`) — prefills only what follows it: a joint record's schema, or each block of
an isolated record, as rows of one forward per prefix (as many at a time as `CONTINUATION_BUDGET_BYTES` of repeated
keys/values allow), then ONE batched head pass reads them with their prefix's memory rows.
Under grad (training) the prefix cache is neither read nor filled. Runs on the thread that owns the model.
Knows nothing of requests' wire shape, media decoding, chunk scheduling, queues or HTTP.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from omni.model.backbone import Backbone
from omni.model.head import JointSchemaHead, RecordSpans
from omni.model.inputs import Inputs, PreparedRecord
from omni.model.prefixes import PrefixCache, PrefixEntry
from preprocess.media import MiB

if TYPE_CHECKING:
    from transformers import Cache

# keys/values of a cached prefix are repeated once per row of a continuation forward: at most this much at a time
CONTINUATION_BUDGET_BYTES = 512 * MiB
Run = tuple[int, int, int, RecordSpans]      # (record index, start, end, spans): one row that follows a prefix


@dataclass
class _Unit:
    """What the head reads for one block that follows a computed prefix: its rows, ids, spans (row indices)."""

    record: int
    hidden: torch.Tensor               # [S, H]
    input_ids: torch.Tensor            # [S]
    spans: RecordSpans
    memory: torch.Tensor               # the prefix's memory rows [P, W]


class Forward:
    """The forward of one loaded model: its backbone, head, prefix cache and the inputs that complete records."""

    def __init__(self, backbone: Backbone, head: JointSchemaHead, prefixes: PrefixCache, inputs: Inputs):
        self.backbone, self.head, self.prefixes, self.inputs = backbone, head, prefixes, inputs

    @property
    def head_device(self) -> torch.device:
        return self.head.hidden_norm.weight.device

    def logits(self, records: Sequence[PreparedRecord]) -> list[list[torch.Tensor]]:
        """Per record, per question [n_i] logits (request question order)."""
        use_cache = self.prefixes.enabled and not torch.is_grad_enabled()
        entries = self._known_prefixes(records, use_cache)
        out: list[list[torch.Tensor] | None] = [None] * len(records)
        full = [i for i, r in enumerate(records) if not r.prompt.isolated and r.prefix_key not in entries]
        if full:
            for i, logits in zip(full, self._full(records, full, entries if use_cache else None), strict=True):
                out[i] = logits
        missing = {r.prefix_key: i for i, r in enumerate(records) if r.prompt.isolated and r.prefix_key not in entries}
        if missing:
            self._prefixes(records, list(missing.values()), entries, store=use_cache)
        units = self._continue(records, [i for i in range(len(records)) if out[i] is None], entries)
        if units:
            self._read_units(records, units, out)
        return [logits or [] for logits in out]

    def _known_prefixes(self, records: Sequence[PreparedRecord], use_cache: bool) -> dict[str, PrefixEntry]:
        """Prefix key -> entry of every prefix known before this batch runs (prefilled in chunks just now, or cached
        when `use_cache`); each record's `cache["prefix"]` says hit or miss."""
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
        return entries

    def _read_units(self, records: Sequence[PreparedRecord], units: list[_Unit],
                    out: list[list[torch.Tensor] | None]) -> None:
        """One head pass over `units`; each record's logits into `out` (an isolated record's blocks in order)."""
        per_unit = self._head([u.hidden for u in units], [u.input_ids for u in units], [u.spans for u in units],
                              [u.memory for u in units])
        for unit, logits in zip(units, per_unit, strict=True):
            if records[unit.record].prompt.isolated:
                out[unit.record] = (out[unit.record] or []) + logits
            else:
                out[unit.record] = logits

    def _full(self, records: Sequence[PreparedRecord], rows: list[int],
              entries: dict[str, PrefixEntry] | None) -> list[list[torch.Tensor]]:
        """One forward of whole records (the path without a cache); their prefixes go to `entries` and the cache."""
        chosen = [self.inputs.complete(records[i]) for i in rows]
        batch = self.backbone.collate([(r.input_ids, r.positions, r.media.tensors) for r in chosen])
        if entries is None:
            hidden = self.backbone.padded_hidden_states(batch)
        else:
            hidden, cache = self.backbone.prefill_with_cache(batch)
            for row, record in enumerate(chosen):
                self._keep(record, entries, cache, row, hidden[row], store=True)
        return self.head.forward_batch(hidden.to(self.head_device), batch.lengths,
                                       batch.input_ids.to(self.head_device), self.backbone.lexical_table,
                                       [r.prompt.spans for r in chosen])

    def _prefixes(self, records: Sequence[PreparedRecord], rows: list[int], entries: dict[str, PrefixEntry],
                  store: bool) -> None:
        """One forward of the prefixes alone (isolated records whose prefix is not cached)."""
        chosen = [self.inputs.complete(records[i]) for i in rows]
        batch = self.backbone.collate([(r.input_ids[:r.prefix_len], r.positions[:, :, :r.prefix_len],
                                        r.media.tensors) for r in chosen])
        hidden, cache = self.backbone.prefill_with_cache(batch)
        for row, record in enumerate(chosen):
            self._keep(record, entries, cache, row, hidden[row], store)

    def _keep(self, record: PreparedRecord, entries: dict[str, PrefixEntry], cache: Cache, row: int,
              hidden: torch.Tensor, store: bool) -> None:
        """The record's prefix (row `row` of a forward) as a PrefixEntry, for this batch (and the cache when `store`)."""
        key, length = record.prefix_key, record.prefix_len
        if key in entries:
            return
        entry = PrefixEntry(self.backbone.prefix_kv(cache, row, length),
                            self.head.memory_rows(hidden[:length].to(self.head_device)),
                            int(record.positions[:, 0, :length].max()) + 1)
        entries[key] = entry
        if store:
            self.prefixes.put(key, entry)

    def _continue(self, records: Sequence[PreparedRecord], rows: list[int],
                  entries: dict[str, PrefixEntry]) -> list[_Unit]:
        """Prefill what follows each computed prefix. Every run after a prefix is a row: a joint record's schema, or
        one block of an isolated record; rows sharing a prefix go through one forward (as many at a time as
        CONTINUATION_BUDGET_BYTES of repeated keys/values allow). Returns what the head must read."""
        runs: dict[str, list[Run]] = {}    # prefix key -> its runs
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

    def _continue_rows(self, records: Sequence[PreparedRecord], runs: list[Run], entry: PrefixEntry) -> list[_Unit]:
        """One forward of runs that follow the same prefix (right-padded rows; each causal over prefix + itself)."""
        pieces: list[tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]] = []
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
        lengths = [len(ids) for ids in input_ids]
        padded = hidden[0].new_zeros(len(hidden), max(lengths), hidden[0].shape[-1])
        ids = torch.zeros(len(hidden), max(lengths), dtype=torch.long)
        for row, (h, i) in enumerate(zip(hidden, input_ids, strict=True)):
            padded[row, :len(i)] = h
            ids[row, :len(i)] = i
        return self.head.forward_batch(padded.to(self.head_device), lengths, ids.to(self.head_device),
                                       self.backbone.lexical_table, spans, prefix_memory=memory)
