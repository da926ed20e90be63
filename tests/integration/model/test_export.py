"""`export_checkpoint` on the embedded demo and the tiny checkpoint: the released layout (numbered shards cut at the
size asked for, their index, the head config's keys, the processor's video section, config.json's vision fields), an
export that loads through the normal path and answers as its source does, strict key checks through the index, and
a source that would not load refused with nothing written. M-RoPE sections that do not share out the head's rotary
frequencies are refused by the loader and by `omni doctor`."""
from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from api.cli.main import main
from omni.contract.config import EngineConfig
from omni.contract.errors import CheckpointConfigError, CheckpointError
from omni.contract.request import parse_request
from omni.model.backbone import Backbone
from omni.model.checkpoint import DEMO_CHECKPOINT_DIR
from omni.model.clef import ClefModel
from omni.model.doctor.headers import read_header
from omni.model.export import RELEASED_HEAD_KEYS, export_checkpoint
from omni.model.shards import DTYPE_BYTES, INDEX_FILE

MAX_SHARD_BYTES = 300_000          # the demo's backbone is 1.2 MB: five shards
REQUEST = {"state": "The unit hums; the serial number label is visible.",
           "questions": {"label": {"type": "noul", "instructions": "Is the label visible?"},
                         "team": {"type": "choice", "criteria": {"billing": None, "technical": "Bugs", "sales": None}}}}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    return export_checkpoint(DEMO_CHECKPOINT_DIR, tmp_path_factory.mktemp("export") / "clef-omni", MAX_SHARD_BYTES)


def copy_of(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(source, target)
    return target


def probabilities(directory: Path) -> list[list[float]]:
    model = ClefModel.load(directory)
    record = model.prepare(parse_request(REQUEST, EngineConfig()))
    return [p.tolist() for p in model.probabilities([record])[0]]


def test_the_backbone_is_sharded_with_an_index_and_cut_at_the_size_asked_for(exported):
    index = json.loads((exported / INDEX_FILE).read_text())
    shards = sorted(p.name for p in exported.glob("model*.safetensors"))
    assert shards == [f"model-{i:05d}-of-00005.safetensors" for i in range(1, 6)]
    assert not (exported / "model.safetensors").exists()
    assert sorted(set(index["weight_map"].values())) == shards
    source = load_file(str(DEMO_CHECKPOINT_DIR / "model.safetensors"))
    assert set(index["weight_map"]) == set(source)
    held: dict[str, str] = {}
    for name in shards:
        header = read_header(exported / name)
        data_bytes = sum(info.numel * DTYPE_BYTES[info.dtype] for info in header.tensors.values())
        assert data_bytes <= MAX_SHARD_BYTES, name
        held.update(dict.fromkeys(header.tensors, name))
        with safe_open(str(exported / name), "pt") as handle:
            for key in handle.keys():  # noqa: SIM118 (safe_open is not iterable)
                assert torch.equal(handle.get_tensor(key), source[key]), key
    assert held == index["weight_map"]                          # each tensor once, where the index says
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in source.values())
    # the shards are filled in order: each but the last could not take the next tensor
    names = sorted(index["weight_map"])
    for first, second in itertools.pairwise(shards):
        last_of_first = max(n for n in names if held[n] == first)
        following = names[names.index(last_of_first) + 1]
        assert held[following] == second
        size = sum(source[n].numel() * source[n].element_size() for n in names if held[n] == first)
        assert size + source[following].numel() * source[following].element_size() > MAX_SHARD_BYTES


def test_the_head_config_has_the_release_keys_only(exported):
    config = json.loads((exported / "joint_head_config.json").read_text())
    assert list(config) == ["hidden_size", "width", "routing_layers", "layers", "heads", "feedforward"]
    assert tuple(config) == RELEASED_HEAD_KEYS
    source = json.loads((DEMO_CHECKPOINT_DIR / "joint_head_config.json").read_text())
    assert "dropout" in source
    assert config == {k: source[k] for k in RELEASED_HEAD_KEYS}
    assert (exported / "joint_head.safetensors").read_bytes() == (DEMO_CHECKPOINT_DIR /
                                                                   "joint_head.safetensors").read_bytes()


def test_the_processor_config_names_its_video_processor(exported):
    processor = json.loads((exported / "processor_config.json").read_text())
    assert processor["processor_class"] == "Qwen3OmniMoeProcessor"
    video = processor["video_processor"]
    assert video["video_processor_type"] == "Qwen2VLVideoProcessor"
    assert video["size"] == {"shortest_edge": 131072, "longest_edge": 786432}
    image = processor["image_processor"]
    assert {k: video[k] for k in ("patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std")} == \
        {k: image[k] for k in ("patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std")}
    assert image["image_processor_type"] == "Qwen2VLImageProcessor"
    assert processor["feature_extractor"]["feature_extractor_type"] == "WhisperFeatureExtractor"


def test_config_json_carries_the_vision_fields_the_release_has(exported):
    config = json.loads((exported / "config.json").read_text())
    vision = config["thinker_config"]["vision_config"]
    assert vision["image_size"] == 8 * 16                   # 64 positions (8 x 8 patches), patch 16
    assert vision["apply_vit_abs_pos_embed"] is True
    source = json.loads((DEMO_CHECKPOINT_DIR / "config.json").read_text())
    del vision["image_size"], vision["apply_vit_abs_pos_embed"]
    assert config == source                                     # nothing else changed


def test_the_export_loads_through_the_normal_path_and_answers_as_its_source(exported):
    assert probabilities(exported) == probabilities(DEMO_CHECKPOINT_DIR)
    assert {p.name for p in exported.iterdir()} >= {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                                                    "training.json", "generation_config.json"}


def test_strict_keys_through_the_index(exported, tmp_path):
    copy = copy_of(exported, tmp_path)
    index = json.loads((copy / INDEX_FILE).read_text())
    key = "thinker.model.layers.1.self_attn.q_proj.weight"
    shard = copy / index["weight_map"][key]
    state = load_file(str(shard))
    save_file({k: v for k, v in state.items() if k != key}, str(shard), metadata={"format": "pt"})
    del index["weight_map"][key]
    (copy / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=f"missing keys: {key}"):
        Backbone.load(copy)
    state["thinker.extra.weight"] = torch.ones(2)
    save_file(state, str(shard), metadata={"format": "pt"})
    index["weight_map"].update({key: shard.name, "thinker.extra.weight": shard.name})
    (copy / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"unexpected keys: thinker\.extra\.weight"):
        Backbone.load(copy)


def test_the_tiny_checkpoint_exports_in_one_shard_with_its_index(tiny_dir, tmp_path):
    out = export_checkpoint(tiny_dir, tmp_path / "one")
    index = json.loads((out / INDEX_FILE).read_text())
    assert sorted(p.name for p in out.glob("model*.safetensors")) == ["model-00001-of-00001.safetensors"]
    assert set(index["weight_map"].values()) == {"model-00001-of-00001.safetensors"}
    assert probabilities(out) == probabilities(tiny_dir)


def test_an_export_exports_again_at_another_shard_size(exported, tmp_path):
    again = export_checkpoint(exported, tmp_path / "again", 700_000)
    first = json.loads((exported / INDEX_FILE).read_text())
    second = json.loads((again / INDEX_FILE).read_text())
    assert sorted(set(second["weight_map"].values())) == ["model-00001-of-00002.safetensors",
                                                          "model-00002-of-00002.safetensors"]
    assert set(second["weight_map"]) == set(first["weight_map"])
    assert second["metadata"] == first["metadata"]
    for name in ("config.json", "joint_head_config.json", "processor_config.json", "joint_head.safetensors"):
        assert (again / name).read_bytes() == (exported / name).read_bytes(), name
    assert probabilities(again) == probabilities(DEMO_CHECKPOINT_DIR)


def test_a_flat_preprocessor_config_becomes_the_sectioned_processor_config(tmp_path):
    copy = copy_of(DEMO_CHECKPOINT_DIR, tmp_path)
    sections = json.loads((copy / "processor_config.json").read_text())
    (copy / "processor_config.json").unlink()
    flat = {**sections["image_processor"], **sections["feature_extractor"]}
    (copy / "preprocessor_config.json").write_text(json.dumps(flat))
    out = export_checkpoint(copy, tmp_path / "out")
    processor = json.loads((out / "processor_config.json").read_text())
    assert not (out / "preprocessor_config.json").exists()
    assert processor["video_processor"]["video_processor_type"] == "Qwen2VLVideoProcessor"
    assert processor["image_processor"]["patch_size"] == 16
    assert processor["feature_extractor"]["feature_size"] == 128
    assert probabilities(out) == probabilities(DEMO_CHECKPOINT_DIR)


def test_an_output_directory_in_use_is_refused(exported, tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="already exists and is not an empty directory"):
        export_checkpoint(DEMO_CHECKPOINT_DIR, tmp_path / "taken")
    with pytest.raises(CheckpointError, match="must differ"):
        export_checkpoint(exported, exported)


def with_mrope(source: Path, tmp_path: Path, section: list[int]) -> Path:
    copy = copy_of(source, tmp_path)
    config = json.loads((copy / "config.json").read_text())
    config["thinker_config"]["text_config"]["rope_parameters"]["mrope_section"] = section
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def test_mrope_sections_that_miss_half_the_head_dim_are_refused_at_load(tmp_path):
    copy = with_mrope(DEMO_CHECKPOINT_DIR, tmp_path, [4, 2, 4])          # head_dim 16: the sections must sum to 8
    with pytest.raises(CheckpointConfigError) as info:
        Backbone.load(copy)
    assert info.value.field == "thinker_config.text_config.rope_parameters.mrope_section"
    assert str(info.value) == ("config.json: thinker_config.text_config.rope_parameters.mrope_section [4, 2, 4] sums "
                               "to 10, but head_dim / 2 = 8 (head_dim 16): the time, height and width sections must "
                               "share out the head's rotary frequencies exactly")
    with pytest.raises(CheckpointConfigError, match="mrope_section"):
        ClefModel.load(copy)


def test_a_source_that_would_not_load_is_not_exported(tmp_path):
    copy = with_mrope(DEMO_CHECKPOINT_DIR, tmp_path, [4, 2, 4])
    with pytest.raises(CheckpointError, match=r"would not load, so it is not exported: backbone: config.json: "
                                              r"thinker_config.text_config.rope_parameters.mrope_section \[4, 2, 4\]"):
        export_checkpoint(copy, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy"]          # nothing written, not even a staging dir


def test_doctor_reports_mrope_sections_the_loader_refuses(tmp_path, capsys):
    copy = with_mrope(DEMO_CHECKPOINT_DIR, tmp_path, [4, 2, 4])
    code = main(["doctor", "--model", str(copy), "--device", "cpu"])
    lines = capsys.readouterr().out.splitlines()
    backbone = next(line for line in lines if line.split()[1:2] == ["backbone"])
    assert code == 1
    assert backbone.split()[0] == "fail"
    assert "mrope_section [4, 2, 4] sums to 10, but head_dim / 2 = 8 (head_dim 16)" in backbone
    assert lines[-1] == "1 check failed: backbone (exit 1)"
