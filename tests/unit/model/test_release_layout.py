"""The released layout's small parts without a checkpoint: M-RoPE sections checked against the head size (on real
transformers configs), shards planned at a size limit, the head config's release keys."""
from __future__ import annotations

import pytest

from omni.contract.errors import CheckpointConfigError, CheckpointError
from omni.model.checkpoint import check_mrope_section
from omni.model.export import RELEASED_HEAD_KEYS, released_config, released_head_config
from omni.model.head import HEAD_CONFIG_KEYS
from omni.model.shards import StoredTensor, plan_shards, shard_name


def thinker_config(head_dim: int | None, section: object = "absent", heads: int = 4, hidden: int = 64):
    from transformers import Qwen3OmniMoeConfig

    rope: dict[str, object] = {"rope_type": "default", "rope_theta": 1e6, "interleaved": True}
    if section != "absent":
        rope["mrope_section"] = section
    text = {"hidden_size": hidden, "num_attention_heads": heads, "num_key_value_heads": 2, "head_dim": head_dim,
            "rope_parameters": rope}
    return Qwen3OmniMoeConfig(thinker_config={"text_config": text}, enable_audio_output=False)


@pytest.mark.parametrize(("head_dim", "section"), [(16, [4, 2, 2]), (128, [24, 20, 20]), (32, [8, 4, 4]),
                                                   (128, "absent")])       # absent: transformers' [24, 20, 20]
def test_sections_that_share_out_half_the_head_dim_pass(head_dim, section):
    check_mrope_section(thinker_config(head_dim, section))


@pytest.mark.parametrize(("head_dim", "section", "words"), [
    (16, [4, 2, 4], "[4, 2, 4] sums to 10, but head_dim / 2 = 8 (head_dim 16)"),
    (128, [24, 20, 24], "[24, 20, 24] sums to 68, but head_dim / 2 = 64 (head_dim 128)"),
    (16, "absent", "[24, 20, 20] sums to 64, but head_dim / 2 = 8 (head_dim 16)"),
    (None, [4, 2, 2], "[4, 2, 2] sums to 8, but head_dim / 2 = 4 (head_dim 8)"),      # 32 hidden / 4 heads
])
def test_sections_that_do_not_are_refused_naming_the_field_and_the_numbers(head_dim, section, words):
    config = thinker_config(head_dim, section, hidden=32 if head_dim is None else 64)
    with pytest.raises(CheckpointConfigError) as info:
        check_mrope_section(config)
    assert info.value.file == "config.json"
    assert info.value.field == "thinker_config.text_config.rope_parameters.mrope_section"
    assert words in str(info.value)
    assert isinstance(info.value, CheckpointError)


@pytest.mark.parametrize("section", [[4, 4], [4, 2, "2"], [4.0, 2, 2], [8, -2, 2], "424"])
def test_sections_that_are_not_three_whole_numbers_are_refused(section):
    with pytest.raises(CheckpointConfigError, match=r"mrope_section is .*: expected three whole numbers"):
        check_mrope_section(thinker_config(16, section))


def test_the_error_pickles_whole():
    import pickle

    error = CheckpointConfigError("config.json", "a.b", "is wrong")
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), again.file, again.field, str(again)) == (CheckpointConfigError, "config.json", "a.b",
                                                                  "config.json: a.b is wrong")


def tensors(*sizes: int) -> list[StoredTensor]:
    from pathlib import Path

    return [StoredTensor(f"t{i:02d}", Path("model.safetensors"), size) for i, size in enumerate(sizes)]


def test_shards_are_filled_in_order_up_to_the_limit():
    plan = plan_shards(tensors(40, 50, 10, 30, 70, 100), max_shard_bytes=100)
    assert [[t.nbytes for t in shard] for shard in plan] == [[40, 50, 10], [30, 70], [100]]


def test_a_tensor_larger_than_the_limit_gets_a_shard_alone():
    plan = plan_shards(tensors(10, 250, 10, 10), max_shard_bytes=100)
    assert [[t.nbytes for t in shard] for shard in plan] == [[10], [250], [10, 10]]
    assert [[t.nbytes for t in shard] for shard in plan_shards(tensors(250), 100)] == [[250]]
    assert plan_shards([], 100) == []
    with pytest.raises(ValueError, match="at least 1"):
        plan_shards(tensors(1), 0)


def test_shard_names_are_the_releases():
    assert shard_name(3, 15) == "model-00003-of-00015.safetensors"


def test_the_head_config_keeps_the_release_keys_in_order():
    assert set(RELEASED_HEAD_KEYS) == set(HEAD_CONFIG_KEYS) - {"dropout"}
    ours = {"dropout": 0.1, "feedforward": 64, "heads": 4, "layers": 2, "routing_layers": 1, "width": 32,
            "hidden_size": 64}
    assert list(released_head_config(ours).items()) == [("hidden_size", 64), ("width", 32), ("routing_layers", 1),
                                                        ("layers", 2), ("heads", 4), ("feedforward", 64)]
    with pytest.raises(CheckpointError, match="lacks heads, feedforward"):
        released_head_config({k: ours[k] for k in ("hidden_size", "width", "routing_layers", "layers")})


def test_config_json_gains_the_vision_fields_and_keeps_any_present():
    config = {"thinker_config": {"vision_config": {"num_position_embeddings": 2304, "patch_size": 16}}}
    assert released_config(config)["thinker_config"]["vision_config"] == {
        "num_position_embeddings": 2304, "patch_size": 16, "image_size": 768, "apply_vit_abs_pos_embed": True}
    kept = {"thinker_config": {"vision_config": {"num_position_embeddings": 2304, "patch_size": 16,
                                                 "image_size": 512, "apply_vit_abs_pos_embed": False}}}
    assert released_config(kept)["thinker_config"]["vision_config"]["image_size"] == 512
    assert released_config({"model_type": "x"}) == {"model_type": "x"}
