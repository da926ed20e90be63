"""A prepared record's `x_evidence` (docs/evidence.md): the attention its forward left (`record.attention`, per
question [n_i, T] in the head's option order) and its answers → per question the chosen option's evidence (and
every option's, when asked), mapped to the caller's state and media.

Knows nothing of how the forward ran (batched, chunked, cached prefix: the attention already covers the record's
tokens), of HTTP or of policies.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from omni.model.evidence_layout import record_layout
from omni.model.evidence_map import METHOD, option_evidence
from omni.model.inputs import PreparedRecord
from preprocess.align import PlaceholderIds


def record_evidence(record: PreparedRecord, per_question: Sequence[torch.Tensor],
                    ids: PlaceholderIds) -> dict[str, Any] | None:
    """`x_evidence` of one answered record (None when its request did not ask or its forward left none)."""
    ask, attention = record.request.evidence, record.attention
    if ask is None or attention is None:
        return None
    prompt = record.prompt
    media_start = prompt.media_end - len(record.media.ids)
    layout = record_layout(record.input_ids, media_start, prompt.media_end, prompt.state_tokens_kept,
                           prompt.state_offsets, record.request.state, record.media_audit,
                           record.media.tokens_per_item, ids)
    questions: dict[str, Any] = {}
    for question, probabilities, weights in zip(record.request.questions, per_question, attention, strict=True):
        order = [option.id for option in question.prompt_options]
        chosen = int(torch.argmax(probabilities))
        entry: dict[str, Any] = {"answer": order[chosen], **option_evidence(weights[chosen], layout, ask.top)}
        if ask.options == "all":
            by_id = {option_id: option_evidence(weights[j], layout, ask.top) for j, option_id in enumerate(order)}
            entry["options"] = {option.id: by_id[option.id] for option in question.options}
        questions[question.id] = entry
    return {"method": METHOD, "questions": questions}
