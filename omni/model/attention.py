"""The thinker's text attention, registered with transformers as "omni_sdpa": causal SDPA that also serves prefills
which continue a cache (a cached prefix, the next chunk of a long prefill) without building a mask.

Every forward the model runs is causal: a whole batch (pads only after real tokens), or rows that continue the same
cached keys (each row sees all of them, then itself causally). transformers' own SDPA path would build an explicit
[rows, 1, S, P + S] mask for the second kind, which on CPU costs about as much as the attention itself. Here:
- no cache (S == P + S): SDPA with is_causal, as transformers does;
- a continuation on CPU: attention over the cached keys (nothing masked) and over the row's own keys (is_causal)
  run as two flash kernels and are merged by their log-sum-exp, which is exactly softmax over all keys;
- a continuation elsewhere (CUDA): SDPA with torch's lower-right causal bias, which the fused kernels take as is.
The mask hook returns None: no model forward here ever needs a padding mask. Knows nothing of prompts, heads or
caches' contents: it sees query, key and value tensors.
"""
from __future__ import annotations

import torch
from torch.nn.attention.bias import causal_lower_right

NAME = "omni_sdpa"


def register() -> str:
    """Make "omni_sdpa" known to transformers (idempotent); returns its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, lambda *args, **kwargs: None)
    return NAME


def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
              **kwargs: object) -> tuple[torch.Tensor, None]:
    """query [B, Hq, S, d], key/value [B, Hkv, P + S, d] -> ([B, S, Hq, d], None), causal with the queries last."""
    if attention_mask is not None:
        raise ValueError("omni_sdpa runs causal attention only (no padding masks)")
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    rows, past = query.shape[2], key.shape[2] - query.shape[2]
    if past == 0:
        out = torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=rows > 1, scale=scaling)
    elif query.device.type == "cpu":
        out = _continued_cpu(query, key, value, past, scaling)
    else:
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=causal_lower_right(rows, key.shape[2]), scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def _continued_cpu(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, past: int,
                   scaling: float | None) -> torch.Tensor:
    """softmax over [cached keys | own keys (causal)] as two flash passes merged by log-sum-exp."""
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    old, old_lse = flash(query, key[:, :, :past], value[:, :, :past], 0.0, False, scale=scaling)[:2]
    own, own_lse = flash(query, key[:, :, past:], value[:, :, past:], 0.0, query.shape[2] > 1, scale=scaling)[:2]
    top = torch.maximum(old_lse, own_lse)
    old_weight, own_weight = torch.exp(old_lse - top)[..., None], torch.exp(own_lse - top)[..., None]
    return ((old * old_weight + own * own_weight) / (old_weight + own_weight)).to(query.dtype)
