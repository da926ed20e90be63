"""make-tiny → load → decide through the real loading path; strict key checks name the offending key."""
import hashlib
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from omni.contract.config import EngineConfig
from omni.contract.errors import CheckpointError
from omni.contract.request import parse_request
from omni.model.backbone import Backbone
from omni.model.checkpoint import check_checkpoint_files
from omni.model.tiny import SPECIAL_TOKENS, write_checkpoint
from omni.serve.engine import DecisionEngine

REQ = {"state": "The unit hums.", "questions": {"ok": {"type": "noul", "instructions": "Does it sound normal?"}}}


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def copy_ckpt(src, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    return dst


def edit_weights(directory, change):
    state = load_file(str(directory / "model.safetensors"))
    change(state)
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})


def test_released_layout_files(tiny_dir):
    names = {p.name for p in tiny_dir.iterdir()}
    assert {"config.json", "model.safetensors", "joint_head_config.json", "joint_head.safetensors",
            "tokenizer.json", "tokenizer_config.json", "processor_config.json"} <= names
    config = json.loads((tiny_dir / "config.json").read_text())
    assert config["model_type"] == "qwen3_omni_moe" and config["enable_audio_output"] is False
    thinker = config["thinker_config"]
    assert thinker["position_id_per_seconds"] == 13 and "vision_start_token_id" in thinker
    keys = load_file(str(tiny_dir / "model.safetensors")).keys()
    assert all(k.startswith("thinker.") for k in keys)
    assert "thinker.model.layers.0.mlp.experts.0.gate_proj.weight" in keys     # released (unfused) expert names
    assert "thinker.lm_head.weight" in keys
    processor = json.loads((tiny_dir / "processor_config.json").read_text())
    assert {"image_processor", "feature_extractor"} <= set(processor)


def test_special_tokens_in_release_order(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    ids = tok.convert_tokens_to_ids(list(SPECIAL_TOKENS))
    assert len(SPECIAL_TOKENS) == 33 and ids == list(range(ids[0], ids[0] + 33))
    for t in SPECIAL_TOKENS:
        assert tok(t, add_special_tokens=False).input_ids == [tok.convert_tokens_to_ids(t)]


def test_same_seed_same_weight_bytes_other_seed_differs(tiny_dir, tmp_path):
    again = write_checkpoint(tmp_path / "again", seed=0)
    other = write_checkpoint(tmp_path / "other", seed=1)
    for name in ("model.safetensors", "joint_head.safetensors"):
        assert sha(again / name) == sha(tiny_dir / name)
        assert sha(other / name) != sha(tiny_dir / name)


def test_load_keeps_lm_head_weight_and_swaps_identity(tiny_dir):
    backbone = Backbone.load(tiny_dir)
    raw = load_file(str(tiny_dir / "model.safetensors"))["thinker.lm_head.weight"]
    assert torch.equal(backbone.lexical_table, raw)
    assert isinstance(backbone.thinker.lm_head, torch.nn.Identity)
    assert not torch.equal(raw, load_file(str(tiny_dir / "model.safetensors"))["thinker.model.embed_tokens.weight"])


def test_round_trip_decide(tiny_dir):
    engine = DecisionEngine(EngineConfig(model_path=str(tiny_dir))).load()
    out = engine.decide(parse_request(REQ, engine.config)).to_wire()
    assert set(out["answers"]) == {"ok"} and 0 <= out["answers"]["ok"]["noul"] <= 1
    assert out["usage"]["output_tokens"] == 0 and out["usage"]["input_tokens"] > 50


@pytest.mark.parametrize("key", ["thinker.audio_tower.conv2d1.bias", "thinker.model.layers.1.self_attn.q_proj.weight"])
def test_missing_tensor_is_named(tiny_dir, tmp_path, key):
    d = copy_ckpt(tiny_dir, tmp_path)
    edit_weights(d, lambda s: s.pop(key))
    with pytest.raises(CheckpointError, match="missing keys: ") as info:
        Backbone.load(d)
    assert key in str(info.value)


def test_shape_mismatch_is_named(tiny_dir, tmp_path):
    d = copy_ckpt(tiny_dir, tmp_path)
    edit_weights(d, lambda s: s.__setitem__("thinker.audio_tower.conv2d1.bias", torch.zeros(3)))
    with pytest.raises(CheckpointError, match=r"shape-mismatched keys: thinker.audio_tower.conv2d1.bias "
                                              r"\(checkpoint \(3,\) vs model \(16,\)\)"):
        Backbone.load(d)


def test_talker_keys_may_be_unexpected_others_may_not(tiny_dir, tmp_path):
    d = copy_ckpt(tiny_dir, tmp_path)
    edit_weights(d, lambda s: s.update({"talker.model.norm.weight": torch.ones(4),
                                        "code2wav.decoder.0.weight": torch.ones(2)}))
    Backbone.load(d)
    edit_weights(d, lambda s: s.__setitem__("thinker.extra.weight", torch.ones(2)))
    with pytest.raises(CheckpointError, match="unexpected keys: thinker.extra.weight"):
        Backbone.load(d)


def test_directory_without_joint_head_is_refused(tiny_dir, tmp_path):
    d = copy_ckpt(tiny_dir, tmp_path)
    (d / "joint_head.safetensors").unlink()
    (d / "joint_head_config.json").unlink()
    with pytest.raises(CheckpointError, match="missing: joint_head_config.json, joint_head.safetensors .*without "
                                              "Clef's joint-schema head"):
        check_checkpoint_files(d)
    with pytest.raises(CheckpointError):
        DecisionEngine(EngineConfig(model_path=str(d))).load()


def test_not_a_directory_nor_hub_id(tmp_path):
    with pytest.raises(CheckpointError, match="not a directory"):
        DecisionEngine(EngineConfig(model_path=str(tmp_path / "nope"))).load()
