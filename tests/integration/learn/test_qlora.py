"""QLoRA on the tiny checkpoint: LoRA + head trained over an nf4 base write an adapter that records the scheme, loads on
a fresh nf4 base and answers as the trained model did; the LoRA moved, the quantized base did not; the gradient
through the 4-bit base is the float one; LoRA adapters served on int8 / fp8 bases; what cannot be done is refused."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from peft import get_peft_model
from safetensors.torch import load_file
from torch import nn

from api.cli.main import main
from fixtures.inspection import write_keyword_task
from omni.contract.errors import AdapterError
from omni.learn.dataset import load_dataset
from omni.learn.training import _check_mergeable, batch_loss, finetune, trainable_parameters
from omni.learn.training_config import TrainingConfig
from omni.model.adapter_format import HEAD_FILE, LORA_WEIGHTS_FILE, MANIFEST_FILE, read_manifest
from omni.model.adapters import Selection
from omni.model.clef import ClefModel
from omni.model.lora import lora_config
from omni.model.qlora import check_servable, check_trainable
from omni.model.quantize import QuantizationError

pytest.importorskip("bitsandbytes")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning", "ignore::DeprecationWarning")

CONFIG = TrainingConfig(mode="lora", epochs=2, batch_records=4, learning_rate=1e-2, backbone_learning_rate=1e-2,
                        lora_rank=4, patience_epochs=50, seed=0)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return load_dataset(write_keyword_task(tmp_path_factory.mktemp("task") / "task.jsonl", 8, seed=0))


def base_weights(model: ClefModel) -> dict[str, torch.Tensor]:
    """The quantized text layers as stored: 4-bit codes, their absmax, the experts' parametrized originals."""
    from bitsandbytes.nn import Linear4bit

    weights = {}
    for name, module in model.backbone.thinker.named_modules():
        if type(module) is Linear4bit:          # named ….base_layer once LoRA wraps it
            weights[f"{name.removesuffix('.base_layer')}.codes"] = module.weight.data.clone()
            weights[f"{name.removesuffix('.base_layer')}.absmax"] = module.weight.quant_state.absmax.clone()
        for param, original in getattr(module, "parametrizations", {}).items():
            weights[f"{name}.{param}"] = original.original.detach().clone()
    return weights


@pytest.fixture(scope="module")
def qlora(tiny_dir, records, tmp_path_factory):
    """(the model trained over nf4, in memory; its adapter folder; the quantized base before; after)."""
    model = ClefModel.load(tiny_dir, quantization="nf4")
    before = base_weights(model)
    out = tmp_path_factory.mktemp("qlora") / "adapter"
    finetune(model, tiny_dir, records, out, CONFIG, progress=False)
    return model, out, before, base_weights(model)


def probabilities(model, records, selection=None) -> list[float]:
    prepared = [model.prepare(r.request, selection=selection) for r in records]
    return [v for per_record in model.probabilities(prepared) for p in per_record for v in p.tolist()]


def test_qlora_writes_an_adapter_that_records_nf4_and_answers_as_trained(qlora, tiny_dir, records):
    model, out, before, after = qlora
    manifest = read_manifest(out)
    assert (manifest.mode, manifest.base_quantization) == ("lora", "nf4")
    assert json.loads((out / MANIFEST_FILE).read_text())["base_quantization"] == "nf4"
    assert manifest.base_sha256 == ClefModel.load(tiny_dir).sha256      # the same checkpoint on disk
    lora = load_file(str(out / LORA_WEIGHTS_FILE))
    assert lora and all(v.abs().max() > 0 for k, v in lora.items() if "lora_B" in k)   # B starts at zero: it moved
    assert len(before) > 8 and before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)         # the 4-bit base did not
    served = ClefModel.load(tiny_dir, quantization="nf4")
    served.use_adapter(out)
    assert probabilities(served, records[:4]) == pytest.approx(probabilities(model, records[:4]), abs=1e-5)
    # rows mixed in one forward: an adapter row and a base row (peft's adapter_names through bitsandbytes' layer)
    plain = ClefModel.load(tiny_dir, quantization="nf4")
    mixed = [served.prepare(records[0].request), served.prepare(records[1].request, selection=Selection())]
    adapter_row, base_row = served.probabilities(mixed)
    assert torch.cat(adapter_row).tolist() == pytest.approx(probabilities(model, records[:1]), abs=1e-5)
    assert torch.cat(base_row).tolist() == pytest.approx(probabilities(plain, records[1:2]), abs=1e-5)


def test_the_gradient_through_the_4bit_base_is_the_float_gradient(tiny_dir, records):
    """bitsandbytes repacks a 4-bit weight for a kernel without backward once the layer answers in eval mode on a
    CPU with AVX512-BF16: LoRA's gradient through the base then silently loses those paths. The base answers first."""
    quantized, reference = ClefModel.load(tiny_dir, quantization="nf4"), ClefModel.load(tiny_dir)
    quantized.probabilities([quantized.prepare(r.request) for r in records[:2]])     # an answer before training
    trainable_parameters(quantized, CONFIG)
    modules = dict(quantized.backbone.thinker.named_modules())
    with torch.no_grad():        # the reference: the float thinker with the 4-bit weights dequantized
        for name, module in reference.backbone.thinker.named_modules():
            if isinstance(module, nn.Linear) and f"{name}.base_layer" in modules:
                module.weight.copy_(dequantized(modules[f"{name}.base_layer"].weight))
            for param in ("gate_up_proj", "down_proj") if name.endswith("mlp.experts") else ():
                getattr(module, param).copy_(getattr(modules[name], param))
    trainable_parameters(reference, CONFIG)
    quantized.probabilities([quantized.prepare(r.request) for r in records[:2]])     # a validation pass
    params = dict(quantized.backbone.thinker.named_parameters())
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():        # the same LoRA weights in both (B nonzero, so that every path carries a gradient)
        for name, param in reference.backbone.thinker.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
                params[name].copy_(param)
        reference.head.load_state_dict(quantized.head.state_dict())
    grads = []
    for model in (quantized, reference):
        prepared = [model.prepare(r.request) for r in records[:4]]
        with torch.enable_grad():
            batch_loss([r.request.questions for r in records[:4]], model.logits(prepared),
                       [r.labels for r in records[:4]], CONFIG).backward()
        grads.append({n: p.grad for n, p in model.backbone.thinker.named_parameters() if "lora_" in n})
    assert len(grads[1]) == 4 * 2 * 2          # q, k, v, o × A, B × 2 layers
    for name, expected in grads[1].items():
        assert grads[0][name] == pytest.approx(expected, abs=1e-5 * float(expected.abs().max()) + 1e-9), name


def dequantized(weight) -> torch.Tensor:
    import bitsandbytes.functional as bnb_functional

    return bnb_functional.dequantize_4bit(weight.data, weight.quant_state).float()


@pytest.mark.parametrize("scheme", ["int8", "fp8"])
def test_a_lora_adapter_served_on_a_torchao_base_answers_as_the_training_model_would(qlora, tiny_dir, records,
                                                                                     scheme):
    """LoraSlots over torchao's Int8Tensor / Float8Tensor equals peft's LoRA as training builds it on that base."""
    pytest.importorskip("torchao")
    _, out, _, _ = qlora
    served = ClefModel.load(tiny_dir, quantization=scheme)
    served.use_adapter(out)
    trained = ClefModel.load(tiny_dir, quantization=scheme)
    # peft's LoRA over the quantized thinker as fine-tuning builds it (fp8 itself cannot be trained over)
    get_peft_model(trained.backbone.thinker, lora_config(CONFIG.lora_rank, CONFIG.lora_alpha, CONFIG.lora_targets))
    params = dict(trained.backbone.thinker.named_parameters())
    with torch.no_grad():
        for name, tensor in load_file(str(out / LORA_WEIGHTS_FILE)).items():
            params[name.removeprefix("base_model.model.").replace(".weight", ".default.weight")].copy_(tensor)
    trained.head.load_state_dict(load_file(str(out / HEAD_FILE)))
    assert probabilities(served, records[:3]) == pytest.approx(probabilities(trained, records[:3]), abs=1e-5)


def test_the_merged_qlora_is_the_unquantized_base_with_its_adapter(qlora, tiny_dir, records, tmp_path):
    """--merged over nf4: the adapter merged into the unquantized weights read from disk (quantized weights cannot
    take it back): the same answers as the unquantized base serving the adapter."""
    _, out, _, _ = qlora
    merged = tmp_path / "merged"
    finetune(ClefModel.load(tiny_dir, quantization="nf4"), tiny_dir, records, merged, CONFIG, progress=False,
             merged=True)
    assert not (merged / MANIFEST_FILE).exists()
    assert "quantization_config" not in json.loads((merged / "config.json").read_text())
    unquantized = ClefModel.load(tiny_dir)
    unquantized.use_adapter(out)                    # a QLoRA adapter on the unquantized base is allowed
    assert probabilities(ClefModel.load(merged), records[:3]) == pytest.approx(
        probabilities(unquantized, records[:3]), abs=1e-5)
    stored = tmp_path / "stored"
    stored.mkdir()
    (stored / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "bitsandbytes"}}))
    with pytest.raises(ValueError, match="stored quantized"):
        _check_mergeable(stored, "nf4")


@pytest.mark.parametrize(("flags", "words"), [
    (["--mode", "full", "--quantize", "nf4"], ["--mode full", "nf4", "--mode lora"]),
    (["--mode", "full", "--quantize", "int8"], ["--mode full", "int8", "--quantize none"]),
    (["--mode", "lora", "--quantize", "fp8"], ["fp8", "no backward", "--quantize nf4 or int8"]),
])
def test_what_cannot_be_trained_is_exit_2_naming_the_scheme_and_the_fix(tiny_dir, tmp_path, capsys, flags, words):
    data = write_keyword_task(tmp_path / "task.jsonl", 4, seed=0)
    assert main(["finetune", str(data), "--model", str(tiny_dir), "--out", str(tmp_path / "out"), "--quiet",
                 *flags]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(word in err for word in words), err
    assert not (tmp_path / "out").exists()


def test_a_lora_adapter_on_an_int4_base_is_refused_naming_the_scheme_and_the_fix():
    with pytest.raises(AdapterError, match=r"int4 .*Int4Tensor.*--quantize nf4, int8, fp8 or none"):
        check_servable("int4", "line-3")
    for scheme in ("none", "nf4", "int8", "fp8"):
        check_servable(scheme, "line-3")
    with pytest.raises(QuantizationError, match="--mode lora cannot train over a base quantized as int4"):
        check_trainable("lora", "int4")


def test_an_adapter_without_base_quantization_still_reads_and_a_bad_one_is_refused(qlora, tmp_path):
    _, out, _, _ = qlora
    old = shutil.copytree(out, tmp_path / "old")
    raw = json.loads((old / MANIFEST_FILE).read_text())
    del raw["base_quantization"]
    (old / MANIFEST_FILE).write_text(json.dumps(raw))
    assert read_manifest(old).base_quantization is None
    (old / MANIFEST_FILE).write_text(json.dumps({**raw, "base_quantization": 4}))
    with pytest.raises(AdapterError, match="base_quantization"):
        read_manifest(old)
