"""The evidence of the joint head's stage 1: each option's attention over the memory in one routing layer, as the
layer's `nn.MultiheadAttention` computes it, recomputed from the layer's own weights beside it.

The layer itself keeps running with `need_weights=False` (its fused path), so a forward that asks for evidence answers
exactly as one that does not; what is recomputed here is only the softmax of one [N, L] score matrix per head.
Knows nothing of records, prompts, media or the wire: it sees one layer and three tensors.
"""
from __future__ import annotations

import math

import torch
from torch import nn


def routing_attention(layer: nn.Module, routes: torch.Tensor, memory: torch.Tensor,
                      memory_padding: torch.Tensor | None) -> torch.Tensor:
    """routes [B, N, W] entering `layer` (an EvidenceLayer), memory [B, L, W] (padding [B, L], True = not real) →
    each route's attention over the memory averaged over the layer's heads [B, N, L] (rows sum to 1)."""
    attention = layer.get_submodule("attention")
    query_norm, memory_norm = layer.get_submodule("query_norm"), layer.get_submodule("memory_norm")
    assert isinstance(attention, nn.MultiheadAttention)
    heads, width = attention.num_heads, attention.embed_dim
    head_dim = width // heads
    weight, bias = attention.in_proj_weight, attention.in_proj_bias
    query = nn.functional.linear(query_norm(routes), weight[:width], None if bias is None else bias[:width])
    key = nn.functional.linear(memory_norm(memory), weight[width:2 * width],
                               None if bias is None else bias[width:2 * width])
    B, N, L = routes.shape[0], routes.shape[1], memory.shape[1]
    query = query.view(B, N, heads, head_dim).transpose(1, 2)                       # [B, heads, N, d]
    key = key.view(B, L, heads, head_dim).transpose(1, 2)                           # [B, heads, L, d]
    scores = (query @ key.transpose(-1, -2)).float() / math.sqrt(head_dim)          # [B, heads, N, L]
    if memory_padding is not None:
        scores = scores.masked_fill(memory_padding[:, None, None, :], float("-inf"))
    return torch.softmax(scores, dim=-1).mean(dim=1)                                # [B, N, L]


def mean_over_layers(per_layer: list[torch.Tensor]) -> torch.Tensor:
    """The routing layers' attention [N, L] each → their mean [N, L] (the evidence of clef's stage 1)."""
    return torch.stack(per_layer).mean(dim=0)
