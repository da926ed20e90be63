"""Clef's joint-schema head: hidden states + question/option spans → one logit per option (clef-reference §3).

The module tree and state-dict names equal the reference `JointSchemaHead` (§1.4) so a released
`joint_head.safetensors` loads with `strict=True`. Knows nothing of tokenizers, prompts, the backbone class or
answers: it sees a [T, H] tensor, token ids, the lexical table (the backbone's untied `lm_head.weight`) and spans.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from omni.model.evidence_attention import routing_attention

HEAD_CONFIG_KEYS = ("hidden_size", "width", "routing_layers", "layers", "heads", "feedforward", "dropout")
_MAX_LOG_SCALE = math.log(100.0)


@dataclass(frozen=True)
class RecordSpans:
    """Where each question and option sits in one record's token sequence ([start, end) indices, prompt order).

    `option_spans[i]` lists question i's options in head order; `question_types[i]` is 0 noul, 1 choice, 2 score.
    """

    question_spans: tuple[tuple[int, int], ...]
    option_spans: tuple[tuple[tuple[int, int], ...], ...]
    question_types: tuple[int, ...]

    def shifted(self, offset: int) -> RecordSpans:
        return RecordSpans(
            tuple((s + offset, e + offset) for s, e in self.question_spans),
            tuple(tuple((s + offset, e + offset) for s, e in q) for q in self.option_spans),
            self.question_types,
        )


class EvidenceLayer(nn.Module):
    """Stage 1: options (queries) gather evidence from the memory; options never attend to each other."""

    def __init__(self, width: int, heads: int, feedforward: int, dropout: float):
        super().__init__()
        self.query_norm = nn.LayerNorm(width)
        self.memory_norm = nn.LayerNorm(width)
        self.feedforward_norm = nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, dropout=dropout, batch_first=True)
        self.feedforward = nn.Sequential(
            nn.Linear(width, feedforward), nn.GELU(), nn.Dropout(dropout), nn.Linear(feedforward, width), nn.Dropout(dropout)
        )

    def forward(self, routes: torch.Tensor, memory: torch.Tensor,
                memory_padding: torch.Tensor | None = None) -> torch.Tensor:
        """routes [B, N, W], memory [B, T, W] (memory_padding [B, T], True = not a real position) → [B, N, W]."""
        normed_memory = self.memory_norm(memory)
        attended, _ = self.attention(self.query_norm(routes), normed_memory, normed_memory,
                                     key_padding_mask=memory_padding, need_weights=False)
        routes = routes + attended
        return routes + self.feedforward(self.feedforward_norm(routes))


class JointSchemaHead(nn.Module):
    """Reference head; kwargs equal `joint_head_config.json`."""

    def __init__(self, hidden_size: int, width: int, routing_layers: int, layers: int, heads: int, feedforward: int,
                 dropout: float = 0.0):
        super().__init__()
        self.hidden_size, self.width = hidden_size, width
        self.config: dict[str, int | float] = {      # joint_head_config.json, as the audit record names it
            "hidden_size": hidden_size, "width": width, "routing_layers": routing_layers, "layers": layers,
            "heads": heads, "feedforward": feedforward, "dropout": dropout}
        self.hidden_norm = nn.LayerNorm(hidden_size)
        self.memory_projection = nn.Linear(hidden_size, width, bias=False)
        self.question_projection = nn.Linear(hidden_size, width, bias=False)
        self.option_question_projection = nn.Linear(hidden_size, width, bias=False)
        self.global_projection = nn.Linear(hidden_size, width, bias=False)
        self.option_context_projection = nn.Linear(hidden_size, width, bias=False)
        self.option_lexical_projection = nn.Linear(hidden_size, width, bias=False)
        self.type_embedding = nn.Embedding(3, width)
        self.evidence_layers = nn.ModuleList(
            EvidenceLayer(width, heads, feedforward, dropout) for _ in range(routing_layers)
        )
        self.option_summary_norm = nn.LayerNorm(width)
        self.layers = nn.ModuleList(
            nn.TransformerDecoderLayer(width, heads, feedforward, dropout, activation="gelu", batch_first=True,
                                       norm_first=True)
            for _ in range(layers)
        )
        self.field_norm = nn.LayerNorm(width)
        self.option_norm = nn.LayerNorm(width)
        self.residual_scorer = nn.Sequential(nn.Linear(4 * width, width), nn.GELU(), nn.Dropout(dropout), nn.Linear(width, 1))
        self.prior_logit_scale = nn.Parameter(torch.zeros(()))
        self.joint_logit_scale = nn.Parameter(torch.zeros(()))
        self.residual_gate = nn.Parameter(torch.zeros(()))

    def forward(self, hidden: torch.Tensor, input_ids: torch.Tensor, lexical_table: torch.Tensor,
                spans: RecordSpans) -> list[torch.Tensor]:
        """One record. hidden [T, H] (final-norm output), input_ids [T], lexical_table [V, H] → per question [n_i] logits."""
        return self.forward_batch(hidden[None], [hidden.shape[0]], input_ids[None], lexical_table, [spans])[0]

    def memory_rows(self, hidden: torch.Tensor) -> torch.Tensor:
        """The memory M = W_mem LN(Hs) of some rows: hidden [..., H] -> [..., W] (what a cached prefix keeps)."""
        return self.memory_projection(self.hidden_norm(hidden.to(self.hidden_norm.weight.dtype)))

    def forward_batch(self, hidden: torch.Tensor, lengths: list[int], input_ids: torch.Tensor,
                      lexical_table: torch.Tensor, spans: list[RecordSpans],
                      prefix_memory: Sequence[torch.Tensor | None] | None = None,
                      trace: list[torch.Tensor] | None = None) -> list[list[torch.Tensor]]:
        """Several records at once; each record's logits equal its one-record pass (up to float rounding).

        hidden [B, L, H] right-padded (row b is real for its first lengths[b] positions), input_ids [B, L] →
        per record, per question [n_i] logits. Each step runs once for the whole batch instead of once per record:
        spans are shifted into the flattened [B·L] rows, options and fields are padded to the batch's largest record
        and padding is excluded with key-padding masks (it is never attended to, so it changes no real row).
        Without padding (one record, or equal shapes) no mask is passed.

        `prefix_memory[b]`: the memory rows [P_b, W] (`memory_rows`) of tokens that come before record b's rows in
        `hidden` and were computed earlier (a cached prefix); the memory attended to is then those rows followed by
        the record's own. Spans index the rows of `hidden`.

        `trace`: a list that receives, per routing layer, each option's attention over the memory [N, L'] (mean over
        heads; rows in option order, record b's memory in its first lengths[b] (+ prefix) columns) — the evidence.
        """
        if len(lengths) != hidden.shape[0] or len(spans) != hidden.shape[0]:
            raise ValueError("hidden, lengths and spans must describe the same records")
        B, L, _ = hidden.shape
        device, dtype = hidden.device, self.hidden_norm.weight.dtype
        h = self.hidden_norm(hidden.to(dtype))                                          # [B, L, H]
        memory = self.memory_projection(h)                                              # [B, L, W]
        lengths_t = torch.tensor(lengths, device=device)
        if prefix_memory is not None and any(m is not None and len(m) for m in prefix_memory):
            memory, lengths_m = _with_prefix(memory, lengths, prefix_memory)             # [B, L', W]
        else:
            lengths_m = lengths_t
        padding = torch.arange(memory.shape[1], device=device)[None] >= lengths_m[:, None]  # True = padding
        memory_padding = padding if bool(padding.any()) else None                     # none: MHA's fast path
        flat = h.reshape(B * L, -1)
        last = flat[torch.arange(B, device=device) * L + lengths_t - 1]                 # g per record: [B, H]
        shifted = [s.shifted(b * L) for b, s in enumerate(spans)]
        question_spans = [q for s in shifted for q in s.question_spans]
        option_spans = [o for s in shifted for q in s.option_spans for o in q]
        question_vectors = span_means(flat, question_spans)                             # [Q, H] all records
        option_context = span_means(flat, option_spans)                                 # [N, H]
        index, segment, option_lengths = span_layout(option_spans, device)
        lexical_rows = lexical_table[input_ids.reshape(-1).to(device)[index].to(lexical_table.device)].to(device, dtype)
        option_lexical = segment_means(lexical_rows, segment, option_lengths)           # [N, H]
        counts = [len(q) for s in spans for q in s.option_spans]                        # options per question
        questions_per_record = [len(s.question_spans) for s in spans]
        owner = torch.repeat_interleave(torch.arange(len(counts), device=device), torch.tensor(counts, device=device))
        question_record = torch.repeat_interleave(torch.arange(B, device=device),
                                                  torch.tensor(questions_per_record, device=device))
        option_record = question_record[owner]

        routes = (self.option_context_projection(option_context) + self.option_lexical_projection(option_lexical)
                  + self.option_question_projection(question_vectors)[owner])            # [N, W]
        options_per_record = torch.bincount(option_record, minlength=B).tolist()
        routes_b, routes_real = _pad_rows(routes, options_per_record)                   # [B, maxN, W]
        for layer in self.evidence_layers:
            if trace is not None:
                trace.append(routing_attention(layer, routes_b, memory, memory_padding)[routes_real])
            routes_b = layer(routes_b, memory, memory_padding)
        routes = routes_b[routes_real]                                                  # [N, W]

        question_keys = self.question_projection(question_vectors)                      # [Q, W]
        by_question, option_real = _pad_rows(routes, counts)                            # [Q, maxn, W]
        scores = (by_question @ question_keys[:, :, None])[..., 0] / math.sqrt(self.width)
        weights = torch.softmax(scores.masked_fill(~option_real, float("-inf")), dim=-1)
        summaries = self.option_summary_norm((weights[:, None] @ by_question)[:, 0])    # [Q, W]
        types = torch.tensor([t for s in spans for t in s.question_types], device=device)
        fields = question_keys + summaries + self.global_projection(last)[question_record] + self.type_embedding(types)
        fields_b, fields_real = _pad_rows(fields, questions_per_record)                 # [B, maxQ, W]
        for layer in self.layers:
            fields_b = layer(fields_b, memory, tgt_key_padding_mask=None if fields_real.all() else ~fields_real,
                             memory_key_padding_mask=memory_padding)
        fields = self.field_norm(fields_b[fields_real])                                 # [Q, W]

        anchors = F.normalize(question_vectors + last[question_record], dim=-1, eps=1e-12)
        prior = (F.normalize(option_lexical, dim=-1, eps=1e-12) * anchors[owner]).sum(-1)
        prior = torch.exp(self.prior_logit_scale.clamp(max=_MAX_LOG_SCALE)) * prior
        options = self.option_norm(routes)
        field_rows = fields[owner]
        joint = torch.exp(self.joint_logit_scale.clamp(max=_MAX_LOG_SCALE)) * F.cosine_similarity(
            field_rows, options, dim=-1, eps=1e-8)
        pair = torch.cat([field_rows, options, field_rows * options, (field_rows - options).abs()], dim=-1)
        joint = joint + self.residual_scorer(pair)[:, 0]
        logits = prior + torch.sigmoid(self.residual_gate) * joint                      # [N]
        per_question = list(torch.split(logits, counts))
        out, start = [], 0
        for n in questions_per_record:
            out.append(per_question[start:start + n])
            start += n
        return out


def _with_prefix(memory: torch.Tensor, lengths: list[int],
                 prefix_memory: Sequence[torch.Tensor | None]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each record's prefix memory rows followed by its own rows, right-padded: ([B, L', W], lengths [B])."""
    prefixes = [m if m is not None else memory.new_zeros(0, memory.shape[-1]) for m in prefix_memory]
    totals = [len(p) + n for p, n in zip(prefixes, lengths, strict=True)]
    out = memory.new_zeros(len(lengths), max(totals), memory.shape[-1])
    for b, (prefix, n) in enumerate(zip(prefixes, lengths, strict=True)):
        out[b, :len(prefix)] = prefix.to(memory.device, memory.dtype)
        out[b, len(prefix):len(prefix) + n] = memory[b, :n]
    return out, torch.tensor(totals, device=memory.device)


def _pad_rows(rows: torch.Tensor, counts: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Consecutive groups of rows [sum(counts), D] → zero-padded [G, max(counts), D] and its real-row mask [G, max]."""
    width = max(counts)
    real = torch.arange(width, device=rows.device)[None] < torch.tensor(counts, device=rows.device)[:, None]
    padded = rows.new_zeros(len(counts), width, rows.shape[-1])
    padded[real] = rows
    return padded, real


def span_layout(spans: Sequence[tuple[int, int]],
                device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Flatten [start, end) spans: (token index [S], segment id per token [S], span lengths [N])."""
    starts = torch.tensor([s for s, _ in spans], dtype=torch.long)
    lengths = torch.tensor([e - s for s, e in spans], dtype=torch.long)
    if bool((lengths <= 0).any()):
        raise ValueError("every span must cover at least one token")
    segment = torch.repeat_interleave(torch.arange(len(spans)), lengths)
    offsets = torch.arange(int(lengths.sum())) - torch.repeat_interleave(torch.cumsum(lengths, 0) - lengths, lengths)
    return (starts[segment] + offsets).to(device), segment.to(device), lengths.to(device)


def segment_means(values: torch.Tensor, segment: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """values [S, D] grouped by `segment` → per-segment mean [N, D]."""
    sums = torch.zeros(len(lengths), values.shape[-1], dtype=values.dtype, device=values.device)
    sums.index_add_(0, segment, values)
    return sums / lengths.to(values.dtype)[:, None]


def span_means(rows: torch.Tensor, spans: Sequence[tuple[int, int]]) -> torch.Tensor:
    """Mean of rows[start:end] for each span: rows [T, D] → [len(spans), D] (one gather + index_add)."""
    index, segment, lengths = span_layout(spans, rows.device)
    return segment_means(rows.index_select(0, index), segment, lengths)


def option_probabilities(logits: list[torch.Tensor]) -> list[torch.Tensor]:
    """Float32 softmax per question (the reference casts logits to float before the softmax)."""
    return [torch.softmax(x.float(), dim=-1) for x in logits]


def build_joint_head(config: dict, state: dict[str, torch.Tensor], what: str = "joint_head.safetensors") -> JointSchemaHead:
    """A head built from its config and loaded from `state` with strict=True; ValueError naming every unknown config
    key, missing, unexpected or shape-mismatched weight (`what` names the weights' file in the message)."""
    unknown = sorted(set(config) - set(HEAD_CONFIG_KEYS))
    if unknown:
        raise ValueError(f"the head config has unknown keys: {', '.join(unknown)}")
    try:
        head = JointSchemaHead(**config)
    except (TypeError, ValueError, AssertionError) as exc:     # a missing key, heads not dividing width …
        raise ValueError(f"the head config does not build a head: {exc}") from None
    expected = head.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    mismatched = sorted(f"{k} (file {tuple(state[k].shape)} vs config {tuple(v.shape)})"
                        for k, v in expected.items() if k in state and state[k].shape != v.shape)
    if missing or unexpected or mismatched:
        raise ValueError(f"{what} does not match its head config — "
                         + " | ".join(f"{kind}: {', '.join(keys)}" for kind, keys in
                                      (("missing keys", missing), ("unexpected keys", unexpected),
                                       ("shape-mismatched keys", mismatched)) if keys))
    head.load_state_dict(state, strict=True)
    return head


def load_joint_head(directory: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32) -> JointSchemaHead:
    """Build the head from `joint_head_config.json` and load `joint_head.safetensors` with strict=True."""
    import json

    from safetensors.torch import load_file

    from omni.contract.errors import CheckpointError

    directory = Path(directory)
    try:
        config = json.loads((directory / "joint_head_config.json").read_text())
        state = load_file(str(directory / "joint_head.safetensors"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read the joint head in {directory}: {exc}") from exc
    try:
        head = build_joint_head(config, state)
    except ValueError as exc:
        raise CheckpointError(str(exc).replace("its head config", "joint_head_config.json")
                              .replace("the head config", "joint_head_config.json")) from None
    return head.to(device=device, dtype=dtype).eval()
