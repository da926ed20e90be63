"""Quantized backbones on the embedded demo checkpoint: each scheme that runs on CPU quantizes exactly the text
layers (the fused experts included) through its library, answers close to the unquantized model, the same batched as
alone; a pre-quantized export loads back answering as the in-process quantized model did; and every bad input (a
scheme needing a GPU, a library missing, a disagreeing or truncated or foreign pre-quantized checkpoint) is one line
and exit 2."""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from api.cli.main import main
from fixtures.inspection import write_inspection_set
from omni.contract.config import QUANTIZE_CHOICES, EngineConfig
from omni.contract.errors import ConfigError
from omni.learn.dataset import load_dataset
from omni.model import quantize
from omni.model.checkpoint import DEMO_CHECKPOINT_DIR
from omni.model.clef import ClefModel
from omni.model.doctor.directory import check_directory

pytest.importorskip("torchao")
pytest.importorskip("bitsandbytes")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")
CPU_SCHEMES = ("int8", "fp8", "nf4")
EXAMPLE = str(Path(__file__).resolve().parents[3] / "examples" / "inspection.json")
QUANTIZED_TYPES = {"int8": "Int8Tensor", "fp8": "Float8Tensor", "nf4": "Params4bit"}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    demo = write_inspection_set(tmp_path_factory.mktemp("demo") / "set", n_train=1, n_test=3, seed=5)
    return [r.request for r in load_dataset(demo["test"])]


@pytest.fixture(scope="module")
def models():
    return {name: ClefModel.load(DEMO_CHECKPOINT_DIR, quantization=name) for name in ("none", *CPU_SCHEMES)}


def answers(model, requests, together=True):
    """Per request, per question: the probabilities (one forward of all, or one each)."""
    prepared = [model.prepare(r) for r in requests]
    if together:
        return model.probabilities(prepared)
    return [model.probabilities([p])[0] for p in prepared]


def max_delta(a, b):
    return max(float((x - y).abs().max()) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


def test_the_choices_are_the_schemes():
    assert tuple(quantize.SCHEMES) == QUANTIZE_CHOICES
    with pytest.raises(ConfigError, match="quantize must be one of none, int8, fp8, nf4, int4"):
        EngineConfig(quantize="int3")


@pytest.mark.parametrize("name", CPU_SCHEMES)
def test_only_the_text_layers_are_quantized_experts_included(models, name):
    thinker = models[name].backbone.thinker
    layer = thinker.model.language_model.layers[0]
    quantized = QUANTIZED_TYPES[name]
    for projection in ("q_proj", "k_proj", "v_proj", "o_proj"):
        assert type(getattr(layer.self_attn, projection).weight).__name__ == quantized
    experts = layer.mlp.experts
    for param in quantize.EXPERT_PARAMS:
        if name == "nf4":       # bitsandbytes' parametrization over packed uint8
            assert nn.utils.parametrize.is_parametrized(experts, param)
            assert experts.parametrizations[param].original.dtype == torch.uint8
        else:
            assert type(getattr(experts, param)).__name__ == quantized
    # what keeps its dtype: router, embeddings, lexical table, towers, head
    kept = {"router": layer.mlp.gate.weight, "embeddings": thinker.model.language_model.embed_tokens.weight,
            "lexical table": models[name].backbone.lexical_table,
            "audio tower": thinker.model.audio_tower.layers[0].self_attn.q_proj.weight,
            "vision tower": thinker.model.visual.blocks[0].attn.qkv.weight,
            "head": models[name].head.hidden_norm.weight}
    for part, weight in kept.items():
        assert type(weight) in (torch.Tensor, nn.Parameter) and weight.dtype == torch.float32, part
    assert models[name].backbone.quantization == name


def test_quantized_weights_are_smaller_by_their_bits(models):
    def text_layer_bytes(model):
        return quantize.weight_bytes(model.backbone.thinker.model.language_model.layers)

    none = text_layer_bytes(models["none"])
    # float32 here: int8/fp8 a quarter plus scales, nf4 an eighth plus absmax (the router and norms stay float32)
    assert text_layer_bytes(models["int8"]) < 0.40 * none
    assert text_layer_bytes(models["fp8"]) < 0.40 * none
    assert text_layer_bytes(models["nf4"]) < 0.25 * none


@pytest.mark.parametrize("name", CPU_SCHEMES)
def test_answers_stay_close_and_batching_does_not_change_them(models, records, name):
    base = answers(models["none"], records)
    together, alone = answers(models[name], records), answers(models[name], records, together=False)
    assert max_delta(together, alone) <= 1e-5          # one packed pass == each alone, quantized too
    for record in together:
        for p in record:
            assert abs(float(p.sum()) - 1) < 1e-5
    # the tiny model is far more sensitive than a 30B one (64-wide rows); benchmarks/quantization.py measures it
    assert max_delta(together, base) < 0.02      # measured: int8 0.001, fp8 0.0007, nf4 0.004


def test_the_audit_record_names_the_scheme(models, records):
    prepared = models["nf4"].prepare(records[0])
    assert models["nf4"].evidence(prepared).quantization == "nf4"
    assert models["none"].evidence(models["none"].prepare(records[0])).quantization == "none"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("prequantized")
    for name in ("int8", "nf4"):
        assert main(["export", "checkpoint", str(DEMO_CHECKPOINT_DIR), "--quantize", name, "--out",
                     str(out / name)]) == 0
    return out


@pytest.mark.parametrize("name", ["int8", "nf4"])
def test_a_pre_quantized_export_loads_back_as_it_was(exported, models, records, name):
    directory = exported / name
    assert json.loads((directory / "config.json").read_text())["architectures"] == \
        ["Qwen3OmniMoeForConditionalGeneration"]
    loaded = ClefModel.load(directory)              # no --quantize: the scheme is in its config.json
    assert loaded.backbone.quantization == name
    assert max_delta(answers(loaded, records), answers(models[name], records)) <= 1e-6
    backbone = next(f for f in check_directory(directory).findings if f.check == "backbone")
    assert backbone.status == "ok" and f"pre-quantized as {name}" in backbone.detail


def run_cli(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().err.strip().splitlines()


def test_a_scheme_that_needs_a_gpu_is_refused_plainly_on_cpu(capsys):
    code, err = run_cli(capsys, "decide", EXAMPLE, "--quantize", "int4", "--device", "cpu")
    assert code == 2 and re.search(r"--quantize int4 needs a CUDA GPU .*use --quantize nf4", err[-1])


@pytest.mark.parametrize(("scheme", "library"), [("nf4", "bitsandbytes"), ("int8", "torchao")])
def test_a_missing_library_is_named_with_the_install_command(capsys, monkeypatch, scheme, library):
    monkeypatch.setitem(sys.modules, library, None)       # import fails as when it is not installed
    code, err = run_cli(capsys, "decide", EXAMPLE, "--quantize", scheme)
    assert code == 2 and f"--quantize {scheme} needs {library}, which is not installed" in err[-1]
    assert "pip install 'omni-decide[quantize]'" in err[-1]


def test_a_pre_quantized_checkpoint_refuses_another_scheme(capsys, exported):
    code, err = run_cli(capsys, "decide", EXAMPLE, "--model", str(exported / "int8"),
                        "--quantize", "nf4")
    assert code == 2 and "is quantized as int8 (its config.json), but --quantize nf4 was asked" in err[-1]
    assert "omit --quantize or pass --quantize int8" in err[-1]


def test_a_truncated_pre_quantized_checkpoint_says_export_again(capsys, exported, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(exported / "int8", broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    code, err = run_cli(capsys, "decide", EXAMPLE, "--model", str(broken))
    assert code == 2 and "could not load the backbone (int8)" in err[-1]
    assert "export it again (omni export checkpoint SOURCE --quantize int8 --out DIR)" in err[-1]


def test_a_foreign_quantization_is_named(capsys, exported, tmp_path):
    foreign = tmp_path / "foreign"
    shutil.copytree(exported / "int8", foreign)
    config = json.loads((foreign / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    (foreign / "config.json").write_text(json.dumps(config))
    code, err = run_cli(capsys, "decide", EXAMPLE, "--model", str(foreign))
    assert code == 2 and "names a quantization omni does not serve (gptq" in err[-1]


def test_exporting_needs_an_unquantized_source(capsys, exported, tmp_path):
    code, err = run_cli(capsys, "export", "checkpoint", str(exported / "nf4"), "--quantize", "int8",
                        "--out", str(tmp_path / "again"))
    assert code == 2 and "is already quantized (nf4); export from the unquantized checkpoint" in err[-1]
    assert not (tmp_path / "again").exists()


def test_serve_refuses_before_it_starts(capsys, exported, monkeypatch):
    for name in [k for k in os.environ if k.startswith("OMNI_")]:
        monkeypatch.delenv(name)
    code, err = run_cli(capsys, "serve", "--quantize", "int4", "--port", "1")
    assert code == 2 and err[-1].startswith("omni serve: --quantize int4 needs a CUDA GPU")
    code, err = run_cli(capsys, "serve", "--model", str(exported / "int8"), "--quantize", "nf4", "--port", "1")
    assert code == 2 and "is quantized as int8 (its config.json), but --quantize nf4 was asked" in err[-1]
    monkeypatch.setenv("OMNI_QUANTIZE", "fp8")
    monkeypatch.setitem(sys.modules, "torchao", None)
    code, err = run_cli(capsys, "serve", "--port", "1")
    assert code == 2 and "--quantize fp8 needs torchao, which is not installed" in err[-1]
