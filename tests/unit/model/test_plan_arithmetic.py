"""The memory plan's pure arithmetic (`omni.model.doctor.plan*`): per-tensor bytes of each scheme, the per-token
terms of a prefill on a shape worked by hand, and the search for the largest setting that fits."""
from __future__ import annotations

import pytest
import torch

from omni.model.doctor.layout import ModelShape
from omni.model.doctor.plan import largest
from omni.model.doctor.plan_peak import attention_bytes, chunked_peak, forward_peak, kv_per_token, moe_per_token
from omni.model.doctor.plan_weights import is_quantized, quantized_tensor_bytes

# the released text decoder's figures (adapter_size.REAL_TEXT)
REAL = ModelShape(backbone_params=0, head_params=0, hidden_size=2048, layers=48, attention_heads=32, kv_heads=4,
                  head_dim=128, experts=128, experts_per_token=8, expert_width=768, head_width=1024)


@pytest.mark.parametrize(("scheme", "expected"), [
    ("none", 4096 * 2048 * 2), ("int8", 4096 * 2048 + 5 * 4096), ("fp8", 4096 * 2048 + 4 * 4096),
    ("nf4", 4096 * 2048 // 2 + 4 * 4096 * 2048 // 64 + 64), ("int4", 4096 * 2048 // 2 + 2 * 4096 * 2048 // 128 * 2)])
def test_a_q_proj_of_the_released_model_per_scheme(scheme, expected):
    assert quantized_tensor_bytes(scheme, (4096, 2048), 2) == expected


def test_an_expert_parameter_counts_every_experts_rows():
    # [E, 2I, H]: 128 x 1536 rows of 2048
    assert quantized_tensor_bytes("int8", (128, 1536, 2048), 2) == 128 * 1536 * 2048 + 5 * 128 * 1536
    with pytest.raises(ValueError, match="unknown scheme"):
        quantized_tensor_bytes("int3", (4, 4), 2)


def test_what_is_quantized_is_the_text_layers_only():
    assert is_quantized("model.language_model.layers.3.self_attn.q_proj.weight")
    assert is_quantized("model.language_model.layers.3.mlp.experts.gate_up_proj")
    for kept in ("model.language_model.layers.3.mlp.gate.weight", "model.language_model.embed_tokens.weight",
                 "lm_head.weight", "model.visual.blocks.0.attn.qkv.weight"):
        assert not is_quantized(kept), kept


def test_the_per_token_terms_by_hand():
    assert kv_per_token(REAL, 2) == 2 * 48 * 4 * 128 * 2
    # 4 stream rows + cos/sin + router logits + 4 rows per pick + the picks' weights, in bf16; float32 top-k values
    # and their bf16 cast; int64 indices, sort, permutation, inverse and a float32 copy of the ids; 4 int64 ids
    floating = (4 * 2048 + 2 * 128 + 128 + 4 * 8 * 2048 + 8) * 2
    assert moe_per_token(REAL, 2) == floating + 8 * (4 + 2) + 8 * (8 + 24 + 4) + 32
    assert attention_bytes(REAL, 2, 10, 1000) == 10 * ((3 * 2048 + 2 * 128 + 7 * 4096) * 2 + 32) + 2 * 4096 * 1000 * 2


def test_a_long_chunked_record_peaks_in_its_continuation_over_the_whole_context():
    peak = chunked_peak(REAL, 2, 63_744, 256, 1024)
    kv = kv_per_token(REAL, 2)
    assert peak.kv_bytes == 63_744 * kv + 64_000 * kv
    assert peak.activation_bytes >= 2 * 4096 * 64_000 * 2           # the repeated keys and values
    whole = forward_peak(REAL, 2, 1, 64_000, keep_kv=True)
    assert peak.total_bytes < whole.total_bytes                       # chunking is what makes long contexts fit


def test_largest_finds_the_edge_and_zero_when_nothing_fits():
    assert largest(1, 1000, lambda n: n <= 377) == 377
    assert largest(1, 1000, lambda n: True) == 1000
    assert largest(5, 1000, lambda n: n < 5) == 0


def test_nf4_unpacks_one_layers_experts_at_once_the_others_nothing():
    from omni.model.doctor.plan_weights import ThinkerTensors, dequantized_bytes

    layers = [(128, 2 * 768, 2048), (128, 2048, 768)] * 48          # the released experts: gate_up, down per layer
    tensors = ThinkerTensors(((2048, 2048), *layers), rest_params=0, buffer_bytes=0, head_params=0)
    assert dequantized_bytes(tensors, "nf4", torch.bfloat16) == 3 * 128 * 768 * 2048 * 2 == 1_207_959_552
    assert dequantized_bytes(tensors, "nf4", torch.float32) == 2 * 1_207_959_552
    assert all(dequantized_bytes(tensors, s, torch.bfloat16) == 0 for s in ("none", "int8", "fp8", "int4"))
