"""The batched forward: prepared records -> per question head logits, in as few backbone passes as the batch allows.

Records whose prefix is not cached run whole, together, as without a cache, and leave their prefix behind (each
layer's keys/values and its final-norm hidden rows, `PrefixEntry`). Isolated records whose prefix is not cached first
run their prefixes alone. Every record whose prefix is then known — cached, computed in this batch, or prefilled in
chunks just before (`record.prefix_entry`) — prefills only what follows it: a joint record's schema, or each block of
an isolated record, as rows of one forward per prefix (as many at a time as `CONTINUATION_BUDGET_BYTES` of repeated
keys/values allow), then ONE batched pass per head reads them with their prefix's memory rows for that head.
Adapters: each backbone row runs with its record's LoRA weights, if any (`Backbone.lora`: one forward for rows
of different adapters); each record is read by its adapter's head (else the base's), and a head-only shadow
candidate's head reads the same rows later, off the live path (`shadow_logits`). Under grad (training) the prefix cache is neither read nor filled. Runs on the thread that owns the model.
Knows nothing of requests' wire shape, media decoding, chunk scheduling, queues or HTTP.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from omni.model.backbone import Backbone
from omni.model.evidence_attention import mean_over_layers
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
    """What one head reads for one record's rows: the rows, ids, spans (row indices) and, after a computed prefix,
    the prefix's memory rows for that head. `shadow`: the logits go to the record's shadow candidate."""

    record: int
    head: JointSchemaHead
    hidden: torch.Tensor               # [S, H]
    input_ids: torch.Tensor            # [S]
    spans: RecordSpans
    memory: torch.Tensor | None        # the prefix's memory rows [P, W] (None: the rows are the whole record)
    shadow: bool = False
    start: int = 0                     # the record's token index of the first row (after the prefix: a block's start)
    tokens: int = 0                    # the record's token count; > 0 when its record asks for evidence
    attention: list[torch.Tensor] | None = None   # per question [n_i, tokens]: the evidence, when asked


class Forward:
    """The forward of one loaded model: its backbone, base head, prefix cache and the inputs that complete records.
    Each record is read by its own head (its adapter's, else the base's) and, with a head-only shadow candidate, by
    the candidate's too, from the same rows."""

    def __init__(self, backbone: Backbone, head: JointSchemaHead, prefixes: PrefixCache, inputs: Inputs):
        self.backbone, self.head, self.prefixes, self.inputs = backbone, head, prefixes, inputs

    @property
    def head_device(self) -> torch.device:
        return self.head.hidden_norm.weight.device

    def head_of(self, record: PreparedRecord) -> JointSchemaHead:
        adapter = record.selection.adapter
        return adapter.head if adapter is not None else self.head

    def logits(self, records: Sequence[PreparedRecord]) -> list[list[torch.Tensor]]:
        """Per record, per question [n_i] logits (request question order). What a head-only shadow candidate's head
        must read is left on the record (`record.shadow_units`) for `shadow_logits`, off the live answer's path."""
        use_cache = self.prefixes.enabled and not torch.is_grad_enabled()
        entries = self._known_prefixes(records, use_cache)
        units: list[_Unit] = []
        full = [i for i, r in enumerate(records) if not r.prompt.isolated and r.prefix_key not in entries]
        if full:
            units += self._full(records, full, entries if use_cache else None)
        missing = {r.prefix_key: i for i, r in enumerate(records) if r.prompt.isolated and r.prefix_key not in entries}
        if missing:
            self._prefixes(records, list(missing.values()), entries, store=use_cache)
        done = set(full)
        units += self._continue(records, [i for i in range(len(records)) if i not in done], entries)
        out: list[list[torch.Tensor]] = [[] for _ in records]
        live = [unit for unit in units if not unit.shadow]
        for unit, logits in zip(live, self._heads(live), strict=True):
            out[unit.record].extend(logits)                      # an isolated record's blocks in order
        for n, record in enumerate(records):
            record.attention = [a for unit in live if unit.record == n for a in unit.attention or []] \
                if record.request.evidence is not None else None
        shadow: list[list[_Unit]] = [[] for _ in records]
        for unit in units:
            if unit.shadow:
                shadow[unit.record].append(unit)
        for record, left in zip(records, shadow, strict=True):
            record.shadow_units = left if record.selection.shadow is not None and not torch.is_grad_enabled() else None
        return out

    def shadow_logits(self, records: Sequence[PreparedRecord]) -> list[list[torch.Tensor]]:
        """Each record's shadow candidate's per question logits from the rows its forward left (`shadow_units`): one
        head pass per candidate head over all the records' rows; the rows are let go."""
        units: list[_Unit] = []
        for n, record in enumerate(records):
            units += [dataclasses.replace(unit, record=n) for unit in record.shadow_units or []]
            record.shadow_units = None
        out: list[list[torch.Tensor]] = [[] for _ in records]
        for unit, logits in zip(units, self._heads(units), strict=True):
            out[unit.record].extend(logits)
        return out

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

    def _units(self, i: int, record: PreparedRecord, hidden: torch.Tensor, input_ids: torch.Tensor,
               spans: RecordSpans, entry: PrefixEntry | None, start: int = 0) -> list[_Unit]:
        """What the record's head (and its head-only shadow candidate's) read of these rows."""
        heads = [(self.head_of(record), False)]
        candidate = record.selection.shadow
        if candidate is not None:
            heads.append((candidate.head, True))
        tokens = record.num_tokens if record.request.evidence is not None else 0
        return [_Unit(i, head, hidden, input_ids, spans, entry.memory_for(head) if entry is not None else None, shadow,
                      start, 0 if shadow else tokens) for head, shadow in heads]

    def _full(self, records: Sequence[PreparedRecord], rows: list[int],
              entries: dict[str, PrefixEntry] | None) -> list[_Unit]:
        """One forward of whole records (the path without a cache); their prefixes go to `entries` and the cache."""
        chosen = [self.inputs.complete(records[i]) for i in rows]
        batch = self.backbone.collate([(r.input_ids, r.positions, r.media.tensors) for r in chosen])
        with self.backbone.lora.rows([r.lora_key for r in chosen]):
            if entries is None:
                hidden = self.backbone.padded_hidden_states(batch)
            else:
                hidden, cache = self.backbone.prefill_with_cache(batch)
                for row, record in enumerate(chosen):
                    self._keep(record, entries, cache, row, hidden[row], store=True)
        hidden = hidden.to(self.head_device)
        return [unit for row, (i, record) in enumerate(zip(rows, chosen, strict=True))
                for unit in self._units(i, record, hidden[row, :batch.lengths[row]], record.input_ids,
                                        record.prompt.spans, None)]

    def _prefixes(self, records: Sequence[PreparedRecord], rows: list[int], entries: dict[str, PrefixEntry],
                  store: bool) -> None:
        """One forward of the prefixes alone (isolated records whose prefix is not cached)."""
        chosen = [self.inputs.complete(records[i]) for i in rows]
        batch = self.backbone.collate([(r.input_ids[:r.prefix_len], r.positions[:, :, :r.prefix_len],
                                        r.media.tensors) for r in chosen])
        with self.backbone.lora.rows([r.lora_key for r in chosen]):
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
                            hidden[:length].to(self.head_device, copy=True),
                            int(record.positions[:, 0, :length].max()) + 1)
        entries[key] = entry
        if store:
            self.prefixes.put(key, entry)

    def _continue(self, records: Sequence[PreparedRecord], rows: list[int],
                  entries: dict[str, PrefixEntry]) -> list[_Unit]:
        """Prefill what follows each computed prefix. Every run after a prefix is a row: a joint record's schema, or
        one block of an isolated record; rows sharing a prefix go through one forward (as many at a time as
        CONTINUATION_BUDGET_BYTES of repeated keys/values allow). Returns what the heads must read."""
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
        """One forward of runs that follow the same prefix (right-padded rows; each causal over prefix + itself).
        They share the prefix key, hence its LoRA weights."""
        pieces: list[tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]] = []
        for i, start, end, _ in runs:
            record = records[i]
            offset = start - record.prefix_len
            pieces.append((record.input_ids[start:end], record.suffix_position_ids[:, :, offset:offset + end - start],
                           {}))
        batch = self.backbone.collate(pieces)
        with self.backbone.lora.rows([records[i].lora_key for i, *_ in runs]):
            hidden = self.backbone.continue_from(entry.kv, batch.input_ids, batch.position_ids)
        hidden = hidden.to(self.head_device)
        return [unit for row, (i, start, end, spans) in enumerate(runs)
                for unit in self._units(i, records[i], hidden[row, :end - start], records[i].input_ids[start:end],
                                        spans.shifted(-start), entry, start)]

    def _heads(self, units: list[_Unit]) -> list[list[torch.Tensor]]:
        """Each unit's logits (unit order): one batched pass per head over the units it reads."""
        out: list[list[torch.Tensor]] = [[] for _ in units]
        by_head: dict[int, list[int]] = {}
        for n, unit in enumerate(units):
            by_head.setdefault(id(unit.head), []).append(n)
        for members in by_head.values():
            group = [units[n] for n in members]
            for n, logits in zip(members, self._head(group), strict=True):
                out[n] = logits
        return out

    def _head(self, units: list[_Unit]) -> list[list[torch.Tensor]]:
        """One batched pass of one head over its units."""
        lengths = [len(u.input_ids) for u in units]
        padded = units[0].hidden.new_zeros(len(units), max(lengths), units[0].hidden.shape[-1])
        ids = torch.zeros(len(units), max(lengths), dtype=torch.long)
        for row, unit in enumerate(units):
            padded[row, :lengths[row]] = unit.hidden
            ids[row, :lengths[row]] = unit.input_ids
        memory = [u.memory for u in units]
        trace: list[torch.Tensor] | None = [] if any(u.tokens for u in units) else None
        logits = units[0].head.forward_batch(padded, lengths, ids.to(self.head_device), self.backbone.lexical_table,
                                             [u.spans for u in units],
                                             prefix_memory=memory if any(m is not None for m in memory) else None,
                                             trace=trace)
        if trace:
            attach_attention(units, logits, mean_over_layers(trace))
        return logits


def attach_attention(units: list[_Unit], logits: list[list[torch.Tensor]], attention: torch.Tensor) -> None:
    """Give each evidence-asking unit its rows of `attention` [N, L'] (all units' options in order) as per question
    [n_i, record tokens]: memory columns are the prefix's rows (the record's first P tokens) then the unit's own rows
    (the record's tokens from `start`); tokens the unit's head does not read (another isolated block) weigh 0."""
    row = 0
    for unit, per_question in zip(units, logits, strict=True):
        counts = [len(q) for q in per_question]
        if unit.tokens:
            prefix, own = (0 if unit.memory is None else len(unit.memory)), len(unit.input_ids)
            block = attention[row:row + sum(counts)].float().cpu()
            full = block.new_zeros(len(block), unit.tokens)
            full[:, :prefix] = block[:, :prefix]
            full[:, unit.start:unit.start + own] = block[:, prefix:prefix + own]
            unit.attention = list(torch.split(full, counts))
        row += sum(counts)
