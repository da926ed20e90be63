"""`omni doctor`'s parts without a checkpoint: safetensors headers read raw (and cut short), the released layout at the
real Qwen3-Omni shapes built on the meta device, the memory estimate and its verdicts, the machine probes (CUDA
devices, bfloat16, decoders, optional tools) on a faked torch / PATH, and the one-screen rendering.
"""
from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from api.cli.doctor import screen
from omni.model.doctor import layout, memory, system
from omni.model.doctor.examine import DoctorReport
from omni.model.doctor.findings import Finding, exit_code, gib, some_names
from omni.model.doctor.headers import HeaderError, read_header

GiB = 1024 ** 3
# The released thinker (Qwen3-Omni-30B-A3B, clef-reference §1.2) and the presumed omni head (§1.4).
REAL_TEXT = {"vocab_size": 152064, "hidden_size": 2048, "intermediate_size": 768, "num_hidden_layers": 48,
             "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "moe_intermediate_size": 768,
             "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "norm_topk_prob": True,
             "mlp_only_layers": [], "max_position_embeddings": 65536, "rms_norm_eps": 1e-6,
             "tie_word_embeddings": False,
             "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [24, 20, 20],
                                 "interleaved": True, "mrope_interleaved": True}}
REAL_VISION = {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16, "patch_size": 16,
               "temporal_patch_size": 2, "spatial_merge_size": 2, "in_channels": 3, "num_position_embeddings": 2304,
               "deepstack_visual_indexes": [8, 16, 24], "out_hidden_size": 2048}
REAL_AUDIO = {"num_mel_bins": 128, "encoder_layers": 32, "encoder_attention_heads": 20, "encoder_ffn_dim": 5120,
              "d_model": 1280, "downsample_hidden_size": 480, "n_window": 50, "n_window_infer": 800,
              "max_source_positions": 1500, "conv_chunksize": 500, "output_dim": 2048}
REAL_HEAD = {"hidden_size": 2048, "width": 1024, "routing_layers": 2, "layers": 4, "heads": 16, "feedforward": 4096,
             "dropout": 0.0}


# ------------------------------------------------------------------------------------------------ headers
def test_a_header_is_read_without_the_data(tmp_path):
    path = tmp_path / "w.safetensors"
    save_file({"a": torch.zeros(3, 4), "b": torch.zeros(5, dtype=torch.bfloat16)}, str(path), metadata={"k": "v"})
    header = read_header(path)
    assert {n: (t.dtype, t.shape, t.dtype_name) for n, t in header.tensors.items()} == {
        "a": ("F32", (3, 4), "float32"), "b": ("BF16", (5,), "bfloat16")}
    assert header.metadata == {"k": "v"} and header.size_bytes == path.stat().st_size and header.tensors["a"].numel == 12


def test_a_file_cut_short_or_padded_is_refused_with_the_byte_counts(tmp_path):
    path = tmp_path / "w.safetensors"
    save_file({"a": torch.zeros(100)}, str(path))
    size = path.stat().st_size
    with path.open("r+b") as handle:
        handle.truncate(size - 8)
    with pytest.raises(HeaderError, match=f"w.safetensors is truncated: {size - 8:,} bytes, its header needs "
                                          f"{size:,} \\(8 missing"):
        read_header(path)
    with path.open("ab") as handle:
        handle.write(b"\0" * 16)
    with pytest.raises(HeaderError, match="has 8 bytes after its last tensor"):
        read_header(path)


def write_raw(path: Path, header: bytes, data: bytes = b"") -> Path:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


@pytest.mark.parametrize(("content", "message"), [
    (b"abc", "too short to be a safetensors file"),
    (struct.pack("<Q", 10 ** 12) + b"{}", "announce a 1,000,000,000,000-byte header"),
    (struct.pack("<Q", 4) + b"\xff\xfe{}", "its header is not JSON"),
    (struct.pack("<Q", 2) + b"[]", "its header is not a JSON object"),
])
def test_a_header_that_is_not_one_is_refused(tmp_path, content, message):
    path = tmp_path / "w.safetensors"
    path.write_bytes(content)
    with pytest.raises(HeaderError, match=message):
        read_header(path)


def test_entries_that_disagree_with_their_bytes_are_refused(tmp_path):
    wrong_span = json.dumps({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}).encode()
    with pytest.raises(HeaderError, match=r"a F32\[2, 2\] needs 16 bytes, its offsets span 12"):
        read_header(write_raw(tmp_path / "x.safetensors", wrong_span, b"\0" * 12))
    malformed = json.dumps({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}).encode()
    with pytest.raises(HeaderError, match="header entry 'a' is malformed"):
        read_header(write_raw(tmp_path / "y.safetensors", malformed, b"\0" * 4))


# ------------------------------------------------------------------------------------------- the real layout
@pytest.fixture(scope="module")
def real_config():
    from transformers import Qwen3OmniMoeConfig

    thinker = {"text_config": REAL_TEXT, "vision_config": REAL_VISION, "audio_config": REAL_AUDIO,
               "image_token_id": 151655, "video_token_id": 151656, "audio_token_id": 151675,
               "vision_start_token_id": 151652, "position_id_per_seconds": 13}
    return Qwen3OmniMoeConfig(thinker_config=thinker, enable_audio_output=False)


def test_the_released_names_and_shapes_come_from_the_config_at_real_size(real_config):
    expected = layout.expected_backbone(real_config)
    # 31.72 B thinker parameters, the count benchmarks/RESULTS.md gives for the released shapes
    assert sum(math.prod(s) for s in expected.values()) == 31_719_205_488
    # the checkpoint's names (clef-reference §1.2): experts one by one, the language model not nested
    assert expected["thinker.model.layers.47.mlp.experts.127.gate_proj.weight"] == (768, 2048)
    assert expected["thinker.model.layers.0.mlp.experts.0.down_proj.weight"] == (2048, 768)
    assert expected["thinker.model.layers.0.self_attn.k_proj.weight"] == (512, 2048)
    assert expected["thinker.lm_head.weight"] == (152064, 2048)
    assert not [k for k in expected if "gate_up_proj" in k or "language_model" in k or k.startswith("talker.")]
    head = layout.expected_head(REAL_HEAD)
    assert sum(math.prod(s) for s in head.values()) == 109_175_812          # clef-reference §1.4's omni guess
    shape = layout.model_shape(real_config, expected, REAL_HEAD, head)
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.experts_per_token, shape.expert_width) == (
        48, 4, 128, 8, 768)


def test_comparison_names_missing_mismatched_unexpected_and_ignored():
    from omni.model.doctor.headers import TensorInfo

    expected = {"a": (2, 2), "b": (3,), "c": (1,)}
    found = {"a": TensorInfo("F32", (2, 3)), "b": TensorInfo("F32", (3,)), "talker.x": TensorInfo("F32", (1,)),
             "d": TensorInfo("F32", (1,))}
    comparison = layout.compare_backbone(expected, found)
    assert comparison.missing == ["c"] and comparison.mismatched == ["a (file [2, 3] vs config [2, 2])"]
    assert comparison.unexpected == ["d"] and comparison.ignored == ["talker.x"] and not comparison.matches


def test_a_head_config_the_loader_would_refuse_is_refused(tmp_path):
    from omni.contract.errors import CheckpointError

    (tmp_path / "joint_head_config.json").write_text(json.dumps({**REAL_HEAD, "depth": 3}))
    with pytest.raises(CheckpointError, match="unknown keys: depth"):
        layout.read_head_config(tmp_path)
    with pytest.raises(CheckpointError, match="does not build a head"):
        layout.expected_head({**REAL_HEAD, "heads": 7})     # 1024 is not a multiple of 7


# ---------------------------------------------------------------------------------------------------- memory
def real_shape() -> layout.ModelShape:
    return layout.ModelShape(backbone_params=31_719_205_488, head_params=109_175_812, hidden_size=2048, layers=48,
                             attention_heads=32, kv_heads=4, head_dim=128, experts=128, experts_per_token=8,
                             expert_width=768, head_width=1024)


def test_the_estimate_at_real_size_adds_up_as_documented():
    estimate = memory.estimate_memory(real_shape(), "cuda:0", torch.bfloat16, torch.float32, 64_000, 1024 ** 3)
    assert estimate.weights_bytes == 31_719_205_488 * 2 + 109_175_812 * 4
    assert estimate.kv_bytes == 2 * 48 * 4 * 128 * 64_000 * 2                      # 5.9 GiB
    per_token = 6 * 2048 + (2 * 32 + 2 * 4) * 128 + 128 + 8 * 4 * 2048            # the experts keep 4 rows each
    assert estimate.activation_bytes == 64_000 * (per_token * 2 + (2 * 2048 + 4 * 1024) * 4)
    assert estimate.slack_bytes == int(0.1 * (estimate.total_bytes - estimate.weights_bytes - estimate.slack_bytes))
    # fits one H200 (139 GiB free), not an 80 GB card at 64,000 tokens; bfloat16 halves the weights
    assert 75 * GiB < estimate.total_bytes < 90 * GiB
    f32 = memory.estimate_memory(real_shape(), "cpu", torch.float32, torch.float32, 64_000, 1024 ** 3)
    assert f32.weights_bytes - estimate.weights_bytes == 31_719_205_488 * 2


@pytest.mark.parametrize(("share", "status", "start"), [
    (0.89, "ok", "fits: needs"), (0.95, "warn", "tight: needs"), (1.01, "fail", "does not fit: needs"),
    (None, "warn", "cannot tell")])
def test_the_verdict_leaves_ten_percent_of_headroom(share, status, start):
    """`share`: the estimate as a share of the free memory."""
    estimate = memory.estimate_memory(real_shape(), "cuda:0", torch.bfloat16, torch.float32, 64_000, 1024 ** 3)
    available = None if share is None else int(estimate.total_bytes / share)
    need, fit = memory.memory_findings(estimate, available, "free on cuda:0")
    assert need.status == "info" and need.data["total_bytes"] == estimate.total_bytes
    assert fit.status == status and fit.detail.startswith(start)


def test_host_memory_comes_from_psutil_or_proc_meminfo(monkeypatch, tmp_path):
    free, source = memory.available_bytes("cpu")
    assert free is not None and free > 0 and source.startswith("available host memory")
    monkeypatch.setitem(sys.modules, "psutil", None)              # not installed: /proc/meminfo
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\nMemAvailable:    1000000 kB\n")
    monkeypatch.setattr(memory, "MEMINFO", meminfo)
    assert memory.available_bytes("cpu") == (1_024_000_000, "available host memory (/proc/meminfo)")
    monkeypatch.setattr(memory, "MEMINFO", tmp_path / "absent")
    assert memory.available_bytes("cpu")[0] is None


# ---------------------------------------------------------------------------------------------------- system
@pytest.fixture
def one_gpu(monkeypatch):
    """torch.cuda as one 80 GiB card with 70 GiB free would show it."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index=0: (70 * GiB, 80 * GiB))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H100 80GB HBM3")


def test_cuda_devices_with_their_free_memory(one_gpu):
    finding = system.cuda_devices("cuda")
    assert finding.status == "ok" and finding.detail == "cuda:0 NVIDIA H100 80GB HBM3 70.0 GiB free of 80.0 GiB"
    assert finding.data["devices"][0]["capability"] == "9.0"
    assert system.cuda_devices("cuda:1").status == "fail"
    assert memory.available_bytes("cuda:0") == (70 * GiB, "free on cuda:0")


def test_bfloat16_is_a_failure_only_where_the_weights_would_need_it(one_gpu, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert system.bfloat16("cuda", torch.bfloat16).status == "fail"
    assert "--dtype float16" in system.bfloat16("cuda", torch.bfloat16).detail
    assert system.bfloat16("cuda", torch.float16).status == "info"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert system.bfloat16("cuda", torch.bfloat16).status == "ok"
    assert system.bfloat16("cpu", torch.float32).detail == "CPU: weights load as float32 (dtype auto on CPU)"


def test_a_cpu_build_of_torch_fails_only_when_cuda_is_asked_for(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert system.torch_build("cpu").status in ("ok", "warn")
    assert system.torch_build("cuda").status == "fail" and "needs a CUDA build" in system.torch_build("cuda").detail
    assert system.cuda_devices("cpu") == Finding("CUDA devices", "info", "none (torch is a CPU build)",
                                                 {"devices": []})
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    assert "a CUDA 12.8 build" in system.torch_build("cuda").detail
    assert system.cuda_devices("cuda").detail == "none (no CUDA device is visible)"


def test_a_missing_decoder_fails_and_a_hardware_only_av1_warns(monkeypatch):
    assert system.decoders().status == "ok"                      # PyAV's wheels carry all of them
    monkeypatch.setitem(system.DECODERS, "av1", ("av1",))
    assert system.decoders().status == "warn" and "hardware-only" in system.decoders().detail
    monkeypatch.setitem(system.DECODERS, "opus", ("no-such-decoder",))
    finding = system.decoders()
    assert finding.status == "fail" and finding.detail.startswith("missing opus") and finding.data["decoders"]["opus"] \
        is None


def test_optional_tools_absent_are_information_not_failures(monkeypatch):
    assert system.chromium(which=lambda name: None) == Finding(
        "Chromium", "info", "not installed (only the workbench's browser tests use it)")
    real = system.installed_version
    monkeypatch.setattr(system, "installed_version", lambda name: None if name == "ray" else real(name))
    assert system.ray().status == "info" and system.ray().detail.startswith("not installed")


def test_a_release_outside_the_pins_warns(monkeypatch):
    monkeypatch.setattr(system, "pinned", lambda name: "==5.22.0" if name == "transformers" else None)
    finding = system.transformers_release()
    assert finding.status == "warn" and "(wants ==5.22.0)" in finding.detail
    monkeypatch.setattr(system, "pinned", lambda name: "<2.0" if name == "ray" else None)
    monkeypatch.setattr(system, "installed_version", lambda name: "2.60.0")
    assert system.ray() == Finding("Ray", "warn", "2.60.0 (wants <2.0) (omni serve --ray)", {"version": "2.60.0"})


# --------------------------------------------------------------------------------------------------- printing
def test_one_screen_with_a_verdict_and_the_exit_code():
    report = DoctorReport("cpu", "float32", [Finding("torch", "ok", "2.13.0"), Finding("Ray", "warn", "odd")],
                          Path("/ckpt"), (Finding("files", "fail", "missing x"), Finding("backbone", "fail", "y")))
    lines = screen(report)
    assert lines == ["omni doctor: the model would load on cpu as float32",
                     "  ok    torch          2.13.0",
                     "  warn  Ray            odd",
                     "checkpoint /ckpt",
                     "  fail  files          missing x",
                     "  fail  backbone       y",
                     "2 checks failed: files, backbone; 1 warning (Ray) (exit 1)"]
    assert report.exit_code == 1 and exit_code(report.system) == 0
    assert report.to_json()["checkpoint"]["findings"][0] == {"check": "files", "status": "fail", "detail": "missing x"}
    assert screen(DoctorReport("cpu", "float32", [Finding("torch", "ok", "x")]))[-1] == "ready: nothing failed (exit 0)"


def test_findings_words():
    assert some_names(["a", "b", "c", "d", "e"]) == "a, b, c and 2 more" and some_names(["a"]) == "a"
    assert (gib(3 * GiB), gib(1.5 * 1024 ** 2), gib(2048), gib(12)) == ("3.0 GiB", "1.5 MiB", "2.0 KiB", "12 B")
    with pytest.raises(ValueError, match="status must be one of"):
        Finding("x", "bad", "y")
