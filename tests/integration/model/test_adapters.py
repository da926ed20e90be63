"""Adapters on the tiny checkpoint: `omni finetune` writes an adapter folder (head or LoRA, text decoder only),
`omni export --merge` makes it a whole checkpoint answering as the trained model did, `omni doctor --adapter` finds
what is wrong with one without loading it, and `adapter_bytes` counts what the files hold."""
from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from api.cli.main import main
from fixtures.inspection import write_inspection_set
from omni.contract.errors import AdapterError
from omni.learn.dataset import load_dataset
from omni.learn.training import finetune
from omni.learn.training_config import TrainingConfig
from omni.model.adapter_format import (
    HEAD_FILE,
    LORA_CONFIG_FILE,
    LORA_WEIGHTS_FILE,
    MANIFEST_FILE,
    check_files,
    read_manifest,
)
from omni.model.adapter_merge import merge_adapter
from omni.model.clef import ClefModel
from omni.model.doctor import layout
from omni.model.doctor.adapter import check_adapter
from omni.model.doctor.adapter_size import QKVO, REAL_HEAD, adapter_bytes, real_backbone_config
from omni.model.doctor.headers import ITEM_BYTES, read_header

FAST = {"batch_records": 4, "learning_rate": 1e-2, "backbone_learning_rate": 1e-2, "validation_fraction": 0.0,
        "epochs": 1}
DOCS = Path(__file__).resolve().parents[3] / "docs" / "adapters.md"
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return write_inspection_set(tmp_path_factory.mktemp("demo") / "set", n_train=4, n_test=2, seed=3)


@pytest.fixture(scope="module")
def trained(tiny_dir, demo, tmp_path_factory):
    """mode -> (the trained model in memory, its adapter folder), for head and LoRA."""
    pytest.importorskip("peft")
    out = tmp_path_factory.mktemp("adapters")
    records = load_dataset(demo["train"])
    models = {}
    for mode in ("head", "lora"):
        model = ClefModel.load(tiny_dir)
        finetune(model, tiny_dir, records, out / mode, TrainingConfig(mode=mode, lora_rank=4, **FAST), progress=False)
        models[mode] = (model, out / mode)
    return models


def probabilities(model, records) -> list[float]:
    return [value for per_record in model.probabilities([model.prepare(r.request) for r in records])
            for p in per_record for value in p.tolist()]


def tensor_bytes(path: Path) -> int:
    return sum(info.numel * ITEM_BYTES[info.dtype] for info in read_header(path).tensors.values())


def copy(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / folder.name))


# ----------------------------------------------------------------------------------------------- finetune
def test_finetune_writes_an_adapter_folder_not_a_checkpoint(trained, tiny_dir):
    for mode, (model, folder) in trained.items():
        manifest = read_manifest(folder)
        check_files(folder, manifest)
        assert manifest.mode == mode
        assert manifest.base_sha256 == ClefModel.load(tiny_dir).sha256 == model.sha256
        assert manifest.head_config == {k: v for k, v in model.head.config.items() if k != "dropout"}
        assert len(manifest.training_data_sha256 or "") == 64
        assert manifest.base_release_date == model.source.release_date
        on_disk = {p.name for p in folder.iterdir()}
        assert on_disk == {MANIFEST_FILE, "training.json", *manifest.files}      # no README, no model.safetensors
        with safe_open(str(folder / HEAD_FILE), "pt") as head:
            assert set(head.keys()) == set(model.head.state_dict())
            assert torch.equal(head.get_tensor("question_projection.weight"),
                               model.head.state_dict()["question_projection.weight"])
    lora = read_manifest(trained["lora"][1])
    assert lora.lora is not None
    assert (lora.lora.rank, lora.lora.targets) == (4, QKVO)
    assert read_manifest(trained["head"][1]).lora is None


def test_a_lora_adapter_holds_the_text_decoder_only(trained, tiny_dir):
    model, folder = trained["lora"]
    with safe_open(str(folder / LORA_WEIGHTS_FILE), "pt") as weights:
        keys = list(weights.keys())
    assert keys
    assert all(k.startswith("base_model.model.model.language_model.layers.") for k in keys)
    assert {k.split(".")[-3] for k in keys} == set(QKVO)
    # the thinker's audio tower has q/k/v projections too: none was adapted, in training either
    assert not any("lora_" in n for n, _ in model.backbone.thinker.named_parameters() if "audio_tower" in n)
    assert json.loads((folder / LORA_CONFIG_FILE).read_text())["r"] == 4


def test_the_cli_writes_an_adapter_and_with_merged_a_checkpoint(tiny_dir, demo, tmp_path, capsys):
    out = tmp_path / "cli-head"
    assert main(["finetune", str(demo["train"]), "--model", str(tiny_dir), "--out", str(out), "--epochs", "1",
                 "--validation-fraction", "0", "--quiet"]) == 0
    assert read_manifest(out).mode == "head"
    assert not (out / "model.safetensors").exists()
    assert f"omni doctor --adapter {out}" in capsys.readouterr().err
    merged = tmp_path / "cli-merged"
    assert main(["finetune", str(demo["train"]), "--model", str(tiny_dir), "--out", str(merged), "--epochs", "1",
                 "--validation-fraction", "0", "--quiet", "--merged"]) == 0
    assert not (merged / MANIFEST_FILE).exists()
    ClefModel.load(merged)          # a whole checkpoint, strictly loaded


# -------------------------------------------------------------------------------------------- export --merge
@pytest.mark.parametrize("mode", ["head", "lora"])
def test_a_merged_adapter_answers_as_the_trained_model_did(trained, tiny_dir, demo, tmp_path, mode):
    model, folder = trained[mode]
    out = tmp_path / "merged"
    assert main(["export", "--merge", str(folder), "--base", str(tiny_dir), "--out", str(out)]) == 0
    records = load_dataset(demo["test"]) + load_dataset(demo["train"])[:2]
    reloaded = ClefModel.load(out)
    assert probabilities(reloaded, records) == pytest.approx(probabilities(model, records), abs=1e-5)
    base = ClefModel.load(tiny_dir)
    assert max(abs(a - b) for a, b in zip(probabilities(base, records), probabilities(reloaded, records),
                                          strict=True)) > 1e-4          # the adapter changed something
    same_thinker = (out / "model.safetensors").read_bytes() == (tiny_dir / "model.safetensors").read_bytes()
    assert same_thinker == (mode == "head")


def test_merging_onto_another_base_is_refused_naming_both_fingerprints(trained, tiny_dir, tmp_path, capsys):
    _, folder = trained["head"]
    other = tmp_path / "other-base"
    shutil.copytree(tiny_dir, other)
    (other / "joint_head_config.json").write_text((tiny_dir / "joint_head_config.json").read_text() + " ")
    other_sha = ClefModel.load(other).sha256
    with pytest.raises(AdapterError) as raised:
        merge_adapter(folder, other, tmp_path / "out")
    assert read_manifest(folder).base_sha256 in raised.value.cause
    assert other_sha in raised.value.cause
    assert raised.value.adapter == "head"
    assert not (tmp_path / "out").exists()
    assert main(["export", "--merge", str(folder), "--base", str(other), "--out", str(tmp_path / "out")]) == 2
    assert "not its base" in capsys.readouterr().err


def test_merging_a_damaged_adapter_or_into_a_full_directory_is_refused(trained, tiny_dir, tmp_path):
    folder = copy(trained["lora"][1], tmp_path)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("x")
    with pytest.raises(AdapterError, match="not an empty directory"):
        merge_adapter(folder, tiny_dir, taken)
    weights = folder / LORA_WEIGHTS_FILE
    weights.write_bytes(weights.read_bytes()[:-8])
    with pytest.raises(AdapterError, match=f"{LORA_WEIGHTS_FILE} has .* bytes.*truncated"):
        merge_adapter(folder, tiny_dir, tmp_path / "out")


# ------------------------------------------------------------------------------------------ doctor --adapter
def statuses(report) -> dict[str, str]:
    return {f.check: f.status for f in report.findings}


def test_doctor_passes_a_whole_adapter(trained, tiny_dir, tmp_path, capsys):
    for _, folder in trained.values():
        report = check_adapter(folder, tiny_dir, tmp_path)
        assert report.exit_code == 0, [f.detail for f in report.findings]
    lora = statuses(check_adapter(trained["lora"][1], tiny_dir, tmp_path))
    assert lora["lora"] == "ok"
    assert lora["base"] == "ok"
    assert lora["joint head"] == "ok"
    assert main(["doctor", "--adapter", str(trained["lora"][1]), "--model", str(tiny_dir), "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["ok"]
    assert {f["check"] for f in body["adapter"]["findings"]} >= {"manifest", "files", "lora", "base"}


def test_doctor_finds_a_truncated_file(trained, tiny_dir, tmp_path, capsys):
    folder = copy(trained["lora"][1], tmp_path)
    weights = folder / LORA_WEIGHTS_FILE
    weights.write_bytes(weights.read_bytes()[:-100])
    report = check_adapter(folder, tiny_dir, tmp_path)
    found = statuses(report)
    assert found["files"] == found["weight files"] == found["lora"] == "fail"
    assert report.exit_code == 1
    detail = next(f.detail for f in report.findings if f.check == "weight files")
    assert detail.startswith("adapter 'lora':")
    assert "truncated" in detail
    assert main(["doctor", "--adapter", str(folder), "--model", str(tiny_dir)]) == 1
    assert "adapter 'lora': adapter_model.safetensors has" in capsys.readouterr().out


def test_doctor_finds_a_mis_shaped_head_tensor(trained, tiny_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    from omni.model.adapter_format import write_manifest

    folder = copy(trained["head"][1], tmp_path)
    state = load_file(str(folder / HEAD_FILE))
    state["question_projection.weight"] = state["question_projection.weight"][:, :-1].contiguous()
    save_file(state, str(folder / HEAD_FILE))
    write_manifest(folder, read_manifest(folder))           # the files are whole: only the shape is wrong
    report = check_adapter(folder, tiny_dir, tmp_path)
    found = statuses(report)
    assert found["files"] == "ok"
    assert found["joint head"] == "fail"
    detail = next(f.detail for f in report.findings if f.check == "joint head")
    assert "adapter 'head':" in detail
    assert "question_projection.weight (file [32, 63] vs config [32, 64])" in detail
    with pytest.raises(AdapterError, match="question_projection.weight"):
        merge_adapter(folder, tiny_dir, tmp_path / "out")


def test_doctor_finds_a_lora_that_does_not_fit_the_base(trained, tiny_dir, tmp_path):
    wider = tmp_path / "wider"          # another base: the same layers, a wider key/value projection
    from omni.model.tiny import write_checkpoint

    write_checkpoint(wider, seed=0, text={"num_key_value_heads": 4})
    report = check_adapter(trained["lora"][1], wider, tmp_path)
    found = statuses(report)
    assert found["lora"] == "fail"
    assert found["base"] == "fail"
    detail = next(f.detail for f in report.findings if f.check == "lora")
    assert "k_proj.lora_B.weight (file [32, 4] vs config [64, 4])" in detail


def test_doctor_finds_a_wrong_base(trained, tiny_dir, tmp_path):
    other = tmp_path / "other-base"
    shutil.copytree(tiny_dir, other)
    (other / "joint_head_config.json").write_text((tiny_dir / "joint_head_config.json").read_text() + " ")
    report = check_adapter(trained["head"][1], other, tmp_path)
    assert statuses(report)["base"] == "fail"
    assert report.exit_code == 1
    detail = next(f.detail for f in report.findings if f.check == "base")
    assert read_manifest(trained["head"][1]).base_sha256 in detail
    assert "not its base" in detail


def test_doctor_stops_at_a_manifest_that_does_not_read(tmp_path, tiny_dir):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / MANIFEST_FILE).write_text(json.dumps({"format": "omni-adapter/1", "mode": "full"}))
    report = check_adapter(folder, tiny_dir, tmp_path)
    assert [(f.check, f.status) for f in report.findings] == [("manifest", "fail")]
    assert "adapter 'broken': adapter.json: mode must be one of head, lora" in report.findings[0].detail


# ----------------------------------------------------------------------------------------------- bytes
def test_adapter_bytes_equal_what_the_files_hold(trained, tiny_dir):
    config = layout.read_backbone_config(tiny_dir)
    head_config = read_manifest(trained["head"][1]).head_config
    head_only = adapter_bytes(config, head_config)
    assert head_only.lora_bytes == 0
    assert head_only.total_bytes == tensor_bytes(trained["head"][1] / HEAD_FILE)
    lora = adapter_bytes(config, head_config, rank=4, targets=QKVO)
    folder = trained["lora"][1]
    assert lora.lora_bytes == tensor_bytes(folder / LORA_WEIGHTS_FILE) > 0
    assert lora.total_bytes == tensor_bytes(folder / HEAD_FILE) + tensor_bytes(folder / LORA_WEIGHTS_FILE)
    # what LoraSlots keeps resident for it is the same count
    from omni.model.lora import LoraSlots

    model = ClefModel.load(tiny_dir)
    assert LoraSlots(model.backbone.thinker).add("k", folder, "lora") == lora.lora_bytes


def test_the_docs_state_the_real_size_bytes_adapter_bytes_computes():
    text = DOCS.read_text()
    config = real_backbone_config()
    thinker = layout.meta_model(config).thinker
    for dtype, name in ((torch.float32, "float32"), (torch.bfloat16, "bfloat16")):
        head = adapter_bytes(config, REAL_HEAD, head_dtype=dtype, lora_dtype=dtype, thinker=thinker)
        lora = adapter_bytes(config, REAL_HEAD, rank=16, targets=QKVO, head_dtype=dtype, lora_dtype=dtype,
                             thinker=thinker)
        row = re.search(rf"^\| {name} \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \|", text, re.MULTILINE)
        assert row is not None, f"docs/adapters.md has no {name} row"
        assert [int(g.replace(",", "")) for g in row.groups()] == [head.total_bytes, lora.lora_bytes,
                                                                   lora.total_bytes]
    assert f"{head.head_params:,}" in text
    assert f"{lora.lora_params:,}" in text


def test_a_safetensors_header_is_what_the_doctor_reads(trained):
    # the doctor's raw header reader and safetensors agree on the adapter's own files
    path = trained["lora"][1] / LORA_WEIGHTS_FILE
    (length,) = struct.unpack("<Q", path.read_bytes()[:8])
    assert path.stat().st_size == 8 + length + tensor_bytes(path)
