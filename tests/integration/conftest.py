"""Fixtures of the integration tests: the reference processors (built offline), a bounded-time runner, a tiny
thinker, and the app serving the tiny checkpoint in-process (`tiny_app_client`).

Everything is built in-process; no network.
"""
from __future__ import annotations

import pytest

from preprocess.align import PlaceholderIds

# Ids of a tiny vocabulary: 0..49 text, then the special tokens (the real checkpoint's are 151652..151675).
TINY_VOCAB = 64
TINY_IDS = PlaceholderIds(image_pad=50, video_pad=51, audio_pad=52, vision_start=53, vision_end=54,
                          audio_start=55, audio_end=56, newline=(10,))


@pytest.fixture(scope="session")
def image_processor():
    """The checkpoint's image processor settings (as make_tiny_processor.py builds them)."""
    from transformers import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(patch_size=16, temporal_patch_size=2, merge_size=2, min_pixels=3136,
                                    max_pixels=12845056, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])


@pytest.fixture(scope="session")
def feature_extractor():
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, n_fft=400,
                                   chunk_length=300, dither=0.0, return_attention_mask=True)


@pytest.fixture(scope="module")
def tiny_app_client(tiny_dir):
    """A TestClient of the app serving the tiny checkpoint, once it is ready (one per test module)."""
    from fastapi.testclient import TestClient

    from api.http.app import create_app
    from api.http.settings import Settings
    from omni.serve.engine import DecisionEngine
    from tests.unit.http.serving import wait_ready

    settings = Settings().with_values({"model": str(tiny_dir)})
    with TestClient(create_app(settings, DecisionEngine(settings.engine))) as client:
        wait_ready(client, seconds=120)
        yield client


@pytest.fixture(scope="session")
def token_ids() -> PlaceholderIds:
    return TINY_IDS


@pytest.fixture(scope="session")
def bounded():
    """bounded(fn, *args, seconds=20) -> fn's result; fails the test (instead of hanging) past `seconds`."""
    from tests.threads import in_thread

    def run(fn, *args, seconds: float = 20.0, **kwargs):
        return in_thread(fn, *args, seconds=seconds, **kwargs)

    return run


@pytest.fixture(scope="session")
def tiny_thinker():
    """A 280k-parameter random Qwen3-Omni thinker whose special ids are TINY_IDS (qwen-omni-notes §2.1)."""
    import torch
    from transformers import Qwen3OmniMoeThinkerConfig, Qwen3OmniMoeThinkerForConditionalGeneration

    torch.manual_seed(0)
    text = {"vocab_size": TINY_VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "moe_intermediate_size": 32, "num_experts": 4,
                "num_experts_per_tok": 2, "decoder_sparse_step": 1, "norm_topk_prob": True, "max_position_embeddings": 8192,
                "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 2, 2],
                                 "interleaved": True, "mrope_interleaved": True}}
    vision = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 16, "temporal_patch_size": 2,
                  "spatial_merge_size": 2, "in_channels": 3, "out_hidden_size": 64, "num_position_embeddings": 64,
                  "deepstack_visual_indexes": [1]}
    audio = {"num_mel_bins": 128, "encoder_layers": 2, "encoder_attention_heads": 2, "encoder_ffn_dim": 64, "d_model": 32,
                 "output_dim": 64, "downsample_hidden_size": 16, "n_window": 50, "n_window_infer": 800, "max_source_positions": 1500,
                 "conv_chunksize": 500}
    ids = TINY_IDS
    config = Qwen3OmniMoeThinkerConfig(
        text_config=text, vision_config=vision, audio_config=audio, audio_token_id=ids.audio_pad,
        image_token_id=ids.image_pad, video_token_id=ids.video_pad, audio_start_token_id=ids.audio_start,
        audio_end_token_id=ids.audio_end, vision_start_token_id=ids.vision_start, vision_end_token_id=ids.vision_end,
        position_id_per_seconds=13, seconds_per_chunk=2)
    model = Qwen3OmniMoeThinkerForConditionalGeneration(config).eval()
    model.set_attn_implementation("sdpa")
    return model
