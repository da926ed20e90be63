"""`omni doctor --plan`'s arithmetic checked against what torch reports on the tiny checkpoint: each scheme's weight
bytes (the quantized text layers and the rest apart) against the loaded model's storages, and one request's peak
(text, a photo, the demo inspection media; a batch of 1 and 2; chunked prefill on and off) against the most bytes
torch's ops held alive at once (fixtures.live_bytes). Then the CLI: text, JSON, --model, bad directories; and the
figures docs/memory-plan.md states for the released config.
"""
from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from api.cli.doctor_plan import settings_text
from api.cli.main import main
from fixtures.live_bytes import LiveBytes
from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.model import quantize
from omni.model.backbone import Backbone
from omni.model.checkpoint import DEMO_CHECKPOINT_DIR
from omni.model.clef import ClefModel
from omni.model.doctor import layout, plan_peak
from omni.model.doctor.plan import make_plan, plan_model
from omni.model.doctor.plan_weights import is_quantized, weight_bytes

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
DOCS = ROOT / "docs" / "memory-plan.md"
WITHIN = 0.10
QUESTIONS = {"q": {"type": "noul", "instructions": "Is it fine?"}}


@pytest.fixture(scope="module")
def tiny():
    config = layout.read_backbone_config(DEMO_CHECKPOINT_DIR)
    return plan_model(config, layout.read_head_config(DEMO_CHECKPOINT_DIR))


def storages(tensors) -> int:
    """Bytes of the distinct storages behind `tensors`, looking through tensor subclasses' components (an independent
    count beside `quantize.weight_bytes`)."""
    seen, total = set(), 0
    stack = list(tensors)
    while stack:
        tensor = stack.pop()
        if type(tensor) not in (torch.Tensor, nn.Parameter) and hasattr(tensor, "__tensor_flatten__"):
            stack += [getattr(tensor, name) for name in tensor.__tensor_flatten__()[0]]
            continue
        state = getattr(tensor, "quant_state", None)          # bitsandbytes Params4bit
        if state is not None:
            stack += [state.absmax, state.code]
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total


def parts(backbone: Backbone) -> tuple[int, int, int]:
    """(quantized text layers, the rest incl. the lexical table, an independent count of the whole) as loaded."""
    thinker = backbone.thinker
    quantized_tensors = []
    for name, module in thinker.named_modules():
        for param_name, param in list(module.named_parameters(recurse=False)) + [
                (p, getattr(module.parametrizations, p).original) for p in getattr(module, "parametrizations", {})]:
            if is_quantized(f"{name}.{param_name}"):
                quantized_tensors.append(param)
                for parametrization in getattr(getattr(module, "parametrizations", {}), param_name, []):
                    quantized_tensors += [parametrization.quant_state.absmax, parametrization.quant_state.code]
    whole = quantize.weight_bytes(thinker) + backbone.lexical_table.untyped_storage().nbytes()
    quantized = storages(quantized_tensors)
    independent = storages([*thinker.parameters(), *thinker.buffers(), *quantized_tensors, backbone.lexical_table])
    return quantized, whole - quantized, independent


@pytest.mark.parametrize("scheme", ["none", "int8", "fp8", "nf4"])
def test_weight_bytes_per_scheme_are_what_the_loaded_model_holds(tiny, scheme):
    backbone = Backbone.load(DEMO_CHECKPOINT_DIR, dtype="float32", device="cpu", quantization=scheme)
    quantized, rest, independent = parts(backbone)
    planned = weight_bytes(tiny.tensors, scheme, torch.float32, torch.float32)
    print(f"{scheme}: text layers measured {quantized:,} planned {planned.quantized_bytes:,}; the rest measured "
          f"{rest:,} planned {planned.rest_bytes:,}")
    assert quantized_ok(planned.quantized_bytes, quantized), (scheme, planned, quantized)
    assert abs(planned.rest_bytes - rest) <= WITHIN * rest, (scheme, planned, rest)
    assert independent == quantized + rest                   # weight_bytes and the independent count agree


def quantized_ok(planned: int, measured: int) -> bool:
    return measured > 0 and abs(planned - measured) <= WITHIN * measured


def data_url(kind: str, path: Path) -> str:
    return f"data:{kind};base64," + base64.b64encode(path.read_bytes()).decode()


def request(kind: str) -> dict:
    if kind == "text":
        return {"state": "word " * 600, "questions": QUESTIONS}
    photo = [data_url("image/png", EXAMPLES / "inspection" / "unit.png")]
    if kind == "photo":
        return {"state": "Is the label visible?", "questions": QUESTIONS, "images": photo}
    body = json.loads((EXAMPLES / "inspection.json").read_text())
    return {**body, "images": photo, "audio": [data_url("audio/wav", EXAMPLES / "inspection" / "hum.wav")],
            "videos": [data_url("video/mp4", EXAMPLES / "inspection" / "fan.mp4")]}


def planned_media(record) -> plan_peak.Media:
    tensors = record.media.tensors
    visual = sum(int(grid.prod()) for key in ("image_grid_thw", "video_grid_thw") for grid in tensors.get(key, []))
    features = tensors.get("input_features")
    return plan_peak.Media(len(tensors.get("pixel_values", [])), len(tensors.get("pixel_values_videos", [])),
                           0 if features is None else features.shape[0] * features.shape[-1], visual // 4)


def planned_peak(tiny, records, chunk: int, keep: bool) -> int:
    """What plan_peak says the forward of `records` peaks at (float32)."""
    record, width = records[0], max(len(r.input_ids) for r in records)
    media = planned_media(record)
    if chunk and record.prefix_len > 2 * chunk:
        first = max(chunk, record.prompt.media_end)
        return plan_peak.chunked_peak(tiny.shape, 4, record.prefix_len, len(record.input_ids) - record.prefix_len,
                                      chunk, first, plan_peak.media_bytes(tiny.shape, tiny.towers, 4, media, first,
                                                                          batched=False)).total_bytes
    peak = plan_peak.forward_peak(tiny.shape, 4, len(records), width, keep).total_bytes
    return peak + len(records) * plan_peak.media_bytes(tiny.shape, tiny.towers, 4, media, width)


@pytest.fixture(scope="module")
def models():
    return {(chunk, prefix): ClefModel.load(DEMO_CHECKPOINT_DIR, dtype="float32", device="cpu",
                                            prefix_cache_bytes=prefix, prefill_chunk_tokens=chunk)
            for chunk, prefix in ((0, 0), (0, 1 << 30), (128, 1 << 30))}


CASES = [("text", 1, 0, 0), ("text", 2, 0, 1 << 30), ("text", 1, 128, 1 << 30),
         ("photo", 1, 0, 0), ("photo", 2, 0, 1 << 30),
         ("inspection", 1, 0, 0), ("inspection", 2, 0, 1 << 30), ("inspection", 1, 128, 1 << 30)]


@pytest.mark.parametrize(("kind", "batch", "chunk", "prefix"), CASES)
def test_one_requests_peak_is_what_torch_allocates(tiny, models, kind, batch, chunk, prefix):
    model = models[(chunk, prefix)]
    model.forget_prefixes()
    records = [model.prepare(parse_request(request(kind), EngineConfig())) for _ in range(batch)]
    with model.grad_off(), LiveBytes() as live:
        for record in records:
            while model.needs_chunks(record) and not model.prefill_step(record):
                pass
        model.logits(records)
    planned = planned_peak(tiny, records, chunk, prefix > 0)
    print(f"{kind} batch {batch} chunk {chunk} prefix {prefix > 0}: {len(records[0].input_ids)} tokens, "
          f"measured {live.peak_bytes:,} planned {planned:,} ({planned / live.peak_bytes:.3f})")
    assert abs(planned - live.peak_bytes) <= WITHIN * live.peak_bytes
    assert not chunk or records[0].prefix_len > 2 * chunk                                     # really chunked


def doctor(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["doctor", "--plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_plan_on_one_screen_and_as_json(capsys, tiny):
    code, out, err = doctor(capsys, "--model", str(DEMO_CHECKPOINT_DIR))
    lines = out.splitlines()
    assert code == 0, err
    assert len(lines) <= 30
    assert all(len(line) <= 160 for line in lines)
    for scheme in ("none float32", "none bfloat16", "int8 bfloat16", "fp8 bfloat16", "nf4 bfloat16", "int4 bfloat16"):
        assert any(line.strip().startswith(scheme) for line in lines), scheme
    assert [line.split()[0] for line in lines if re.match(r"^\s+\d+ GB", line)] == ["24", "32", "48", "80", "96", "141"]
    code, out, _ = doctor(capsys, "--json")
    body = json.loads(out)
    assert code == 0
    expected = make_plan(tiny, EngineConfig(), torch.bfloat16, torch.float32).to_json()
    assert {k: body[k] for k in expected} == json.loads(json.dumps(expected))
    assert body["directory"].endswith("tiny-inspection-v1")


@pytest.mark.parametrize("make", [lambda tmp: tmp / "absent", lambda tmp: tmp])
def test_a_bad_directory_is_one_line_and_exit_2(capsys, tmp_path, make):
    code, out, err = doctor(capsys, "--model", str(make(tmp_path)))
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "no such directory" in err or "config.json missing" in err, err


def test_the_docs_state_the_plan_of_the_released_config():
    from omni.model.doctor.adapter_size import REAL_HEAD, real_backbone_config

    plan = make_plan(plan_model(real_backbone_config(), REAL_HEAD), EngineConfig(), torch.bfloat16, torch.float32)
    text = DOCS.read_text()
    for w in plan.weights:
        assert (f"| {w.scheme} | {w.dtype} | {w.quantized_bytes:,} | {w.rest_bytes:,} | {w.head_bytes:,} | "
                f"{w.total_bytes:,} |") in text, w
    for fit in plan.gpus:
        fits = "yes" if fit.scheme else "no"
        assert (f"| {fit.gpu_gb} | {fits} | {fit.scheme or '-'} | {fit.need_bytes / 1e9:.1f} | "
                f"{fit.max_context_tokens:,} | {fit.max_batch_records} | {settings_text(fit.settings)} |") in text, fit
    peak = plan.request.peak
    assert f"activations {peak.activation_bytes:,}\nbytes + keys/values {peak.kv_bytes:,} bytes" in text
    assert f"{plan.request.visual_tokens:,} image tokens" in text


def test_a_card_that_fits_only_with_changed_settings_fits_with_them():
    from omni.model.doctor.adapter_size import REAL_HEAD, real_backbone_config
    from omni.model.doctor.plan import usable

    plan = make_plan(plan_model(real_backbone_config(), REAL_HEAD), EngineConfig(), torch.bfloat16, torch.float32)
    changed = [fit for fit in plan.gpus if fit.settings]
    assert changed, "the released config at the default limits needs changed settings on some card"
    for fit in changed:
        assert fit.scheme is not None and fit.need_bytes <= usable(fit.gpu_gb)
        assert fit.settings["prefix_cache_mb"] == 0
        assert 1024 <= fit.settings["max_context_tokens"] == fit.max_context_tokens < EngineConfig().max_context_tokens
    assert all(fit.scheme is None or fit.need_bytes <= usable(fit.gpu_gb) for fit in plan.gpus)
