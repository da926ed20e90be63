"""`omni doctor --model DIR` on the embedded tiny checkpoint and on broken copies of it: the head file removed, one
tensor rewritten in the wrong shape, a shard cut short, a shard the index names gone, a directory that is no
checkpoint at all. Each broken one exits 1 and says, in the failing line, which file or tensor is wrong; nothing is
loaded (the weights are only read as headers).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from api.cli.main import main
from omni.model.checkpoint import DEMO_CHECKPOINT_DIR

WRONG = "thinker.model.layers.0.self_attn.q_proj.weight"      # [64, 64] in the tiny checkpoint


@pytest.fixture
def tiny_copy(tmp_path) -> Path:
    target = tmp_path / "ckpt"
    shutil.copytree(DEMO_CHECKPOINT_DIR, target)
    return target


def doctor(capsys, *argv: str) -> tuple[int, list[str], str]:
    """(exit code, stdout lines, stderr) of `omni doctor ARGV` run in-process."""
    code = main(["doctor", *argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def row(lines: list[str], check: str) -> tuple[str, str]:
    """(status, detail) of the line of `check`."""
    for text in lines:
        parts = text.split(None, 1)
        if len(parts) == 2 and parts[0] in ("ok", "info", "warn", "fail") and parts[1].startswith(check + " "):
            return parts[0], parts[1][len(check):].strip()
    raise AssertionError(f"no line for {check!r} in:\n" + "\n".join(lines))


def test_the_tiny_checkpoint_is_ready_on_one_screen(capsys):
    code, lines, err = doctor(capsys, "--model", str(DEMO_CHECKPOINT_DIR), "--device", "cpu")
    assert code == 0, "\n".join(lines) + err
    assert len(lines) <= 40 and lines[-1].startswith("ready: nothing failed")
    for check in ("files", "weight files", "backbone", "joint head", "tokenizer", "memory fit"):
        assert row(lines, check)[0] == "ok", check
    assert "129 tensors match config.json" in row(lines, "backbone")[1]
    assert "72 tensors match joint_head_config.json" in row(lines, "joint head")[1]
    assert row(lines, "memory need")[1].startswith("≈ ") and "float32" in row(lines, "memory need")[1]
    for check in ("omni-decide", "torch", "transformers", "PyAV / FFmpeg", "decoders", "CUDA devices", "bfloat16",
                  "Chromium", "Ray"):
        row(lines, check)


def test_json_carries_every_finding_and_the_estimate(capsys):
    code, lines, _ = doctor(capsys, "--model", str(DEMO_CHECKPOINT_DIR), "--device", "cpu", "--json")
    report = json.loads("\n".join(lines))
    assert code == 0 and report["ok"] is True and report["exit_code"] == 0 and report["device"] == "cpu"
    findings = {f["check"]: f for f in report["checkpoint"]["findings"]}
    estimate = findings["memory need"]["data"]
    assert estimate["tokens"] == 64_000 and estimate["dtype"] == "float32"
    # the tiny thinker's 2 layers x 2 KV heads x 16 dims, keys and values, float32, for 64,000 tokens
    assert estimate["kv_bytes"] == 2 * 2 * 2 * 16 * 64_000 * 4
    assert estimate["total_bytes"] == sum(estimate[k] for k in ("weights_bytes", "kv_bytes", "activation_bytes",
                                                                "prefix_cache_bytes", "runtime_bytes", "slack_bytes"))
    assert findings["memory fit"]["data"]["available_bytes"] > 0
    assert {f["check"] for f in report["system"]} >= {"torch", "transformers", "decoders", "CUDA devices", "Ray"}


def test_a_missing_head_is_named(capsys, tiny_copy):
    (tiny_copy / "joint_head.safetensors").unlink()
    code, lines, _ = doctor(capsys, "--model", str(tiny_copy), "--device", "cpu")
    assert code == 1 and lines[-1].endswith("(exit 1)")
    status, detail = row(lines, "files")
    assert status == "fail" and "joint_head.safetensors" in detail and "without Clef's joint-schema head" in detail
    status, detail = row(lines, "joint head")
    assert status == "fail" and detail.startswith("joint_head.safetensors missing")
    assert row(lines, "backbone")[0] == "ok"            # the rest is still checked


def test_a_tensor_of_the_wrong_shape_is_named_with_both_shapes(capsys, tiny_copy):
    weights = load_file(str(tiny_copy / "model.safetensors"))
    assert tuple(weights[WRONG].shape) == (64, 64)
    weights[WRONG] = torch.zeros(64, 32)
    save_file(weights, str(tiny_copy / "model.safetensors"), metadata={"format": "pt"})
    code, lines, _ = doctor(capsys, "--model", str(tiny_copy), "--device", "cpu")
    assert code == 1
    assert row(lines, "weight files")[0] == "ok"        # the file itself is whole
    status, detail = row(lines, "backbone")
    assert status == "fail" and f"shape-mismatched 1: {WRONG} (file [64, 32] vs config [64, 64])" in detail
    assert lines[-1].startswith("1 check failed: backbone")


def test_a_head_tensor_of_the_wrong_shape_is_named(capsys, tiny_copy):
    head = load_file(str(tiny_copy / "joint_head.safetensors"))
    head["type_embedding.weight"] = torch.zeros(4, 32)
    save_file(head, str(tiny_copy / "joint_head.safetensors"))
    code, lines, _ = doctor(capsys, "--model", str(tiny_copy), "--device", "cpu")
    status, detail = row(lines, "joint head")
    assert code == 1 and status == "fail" and "type_embedding.weight (file [4, 32] vs config [3, 32])" in detail


def test_a_truncated_shard_is_found_from_its_header(capsys, tiny_copy):
    shard = tiny_copy / "model.safetensors"
    size = shard.stat().st_size
    with shard.open("r+b") as handle:
        handle.truncate(size - 1000)
    code, lines, _ = doctor(capsys, "--model", str(tiny_copy), "--device", "cpu")
    assert code == 1
    status, detail = row(lines, "weight files")
    assert status == "fail" and f"model.safetensors is truncated: {size - 1000:,} bytes" in detail
    assert "1,000 missing" in detail
    assert row(lines, "backbone") == ("fail", "tensors not compared: the weight files cannot be read (above)")


def split_into_shards(directory: Path) -> list[str]:
    """model.safetensors rewritten as two shards and an index, as released checkpoints are."""
    weights = load_file(str(directory / "model.safetensors"))
    (directory / "model.safetensors").unlink()
    names = sorted(weights)
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    for file, part in zip(files, halves, strict=True):
        save_file({k: weights[k] for k in part}, str(directory / file))
    weight_map = {name: file for file, part in zip(files, halves, strict=True) for name in part}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return files


def test_a_sharded_checkpoint_is_checked_through_its_index(capsys, tiny_copy):
    split_into_shards(tiny_copy)
    code, lines, _ = doctor(capsys, "--model", str(tiny_copy), "--device", "cpu")
    assert code == 0, "\n".join(lines)
    assert row(lines, "weight files")[1].startswith("2 files")
    assert "129 tensors match" in row(lines, "backbone")[1]


def test_a_truncated_shard_among_several_leaves_the_others_compared(capsys, tiny_copy):
    first, second = split_into_shards(tiny_copy)
    with (tiny_copy / second).open("r+b") as handle:
        handle.truncate(100)
    code, lines, _ = doctor(capsys, "--model", str(tiny_copy), "--device", "cpu")
    assert code == 1
    status, detail = row(lines, "weight files")
    assert status == "fail" and second in detail and first not in detail
    assert row(lines, "backbone")[0] == "ok"            # the first shard's tensors are all as promised


def test_a_shard_the_index_names_but_the_directory_lacks(capsys, tiny_copy):
    _, second = split_into_shards(tiny_copy)
    (tiny_copy / second).unlink()
    code, lines, _ = doctor(capsys, "--model", str(tiny_copy), "--device", "cpu")
    status, detail = row(lines, "weight files")
    assert code == 1 and status == "fail" and f"{second} is missing (the index names it)" in detail


def test_unexpected_tensors_fail_but_talker_ones_are_only_counted(capsys, tiny_copy):
    weights = load_file(str(tiny_copy / "model.safetensors"))
    weights["talker.model.norm.weight"] = torch.ones(8)
    save_file(weights, str(tiny_copy / "model.safetensors"))
    code, lines, _ = doctor(capsys, "--model", str(tiny_copy), "--device", "cpu")
    assert code == 0 and "1 talker/code2wav tensors not loaded" in row(lines, "backbone")[1]
    weights["thinker.model.extra.weight"] = torch.ones(8)
    save_file(weights, str(tiny_copy / "model.safetensors"))
    code, lines, _ = doctor(capsys, "--model", str(tiny_copy), "--device", "cpu")
    status, detail = row(lines, "backbone")
    assert code == 1 and status == "fail" and "unexpected 1: thinker.model.extra.weight" in detail


def test_a_directory_that_is_not_a_checkpoint(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    code, lines, err = doctor(capsys, "--model", str(tmp_path), "--device", "cpu")
    assert code == 1 and err == ""
    status, detail = row(lines, "files")
    assert status == "fail" and detail == ("not a checkpoint directory: no config.json, no *.safetensors (it holds "
                                           "notes.txt)")
    assert row(lines, "weight files") == ("fail", "no model.safetensors nor model.safetensors.index.json")
    assert row(lines, "backbone") == ("fail", "config.json missing: the backbone's shapes are unknown")
    assert row(lines, "joint head")[0] == "fail"
    assert lines[-1] == "4 checks failed: files, weight files, backbone, joint head (exit 1)"
    assert len(lines) <= 40


def test_a_checkpoint_without_its_tokenizer_is_named(capsys, tiny_copy):
    (tiny_copy / "tokenizer_config.json").unlink()
    (tiny_copy / "tokenizer.json").unlink()
    code, lines, _ = doctor(capsys, "--model", str(tiny_copy), "--device", "cpu")
    assert code == 1 and "missing: tokenizer_config.json" in row(lines, "files")[1]
    assert row(lines, "tokenizer")[0] == "fail"


def test_a_config_that_builds_no_model_is_a_finding_not_a_traceback(capsys, tiny_copy):
    config = json.loads((tiny_copy / "config.json").read_text())
    config["thinker_config"]["text_config"].update(num_attention_heads=5, head_dim=None)    # 64 hidden / 5 heads
    (tiny_copy / "config.json").write_text(json.dumps(config))
    code, lines, err = doctor(capsys, "--model", str(tiny_copy), "--device", "cpu")
    status, detail = row(lines, "backbone")
    assert code == 1 and err == "" and status == "fail" and detail.startswith("config.json does not build the model")
    assert row(lines, "joint head")[0] == "ok"


def test_a_garbled_tokenizer_is_a_finding_not_a_traceback(capsys, tiny_copy):
    (tiny_copy / "tokenizer.json").write_text('{"model": "garbled"}')
    code, lines, err = doctor(capsys, "--model", str(tiny_copy), "--device", "cpu")
    status, detail = row(lines, "tokenizer")
    assert code == 1 and err == "" and status == "fail" and detail.startswith("cannot load the tokenizer/processor")
    assert lines[-1] == "1 check failed: tokenizer (exit 1)"


def test_a_config_of_another_model_is_refused(capsys, tiny_copy):
    (tiny_copy / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 64}))
    code, lines, _ = doctor(capsys, "--model", str(tiny_copy), "--device", "cpu")
    status, detail = row(lines, "backbone")
    assert code == 1 and status == "fail" and "describes a 'bert' model, not 'qwen3_omni_moe'" in detail


def test_a_request_too_long_for_memory_does_not_fit(capsys):
    code, lines, _ = doctor(capsys, "--model", str(DEMO_CHECKPOINT_DIR), "--device", "cpu",
                            "--max-context-tokens", str(10 ** 10))
    status, detail = row(lines, "memory fit")
    assert code == 1 and status == "fail" and detail.startswith("does not fit: needs ") and "--dtype bfloat16" in detail


@pytest.mark.parametrize("path", ["does/not/exist/here", "/nonexistent-omni-dir"])
def test_a_path_that_is_no_directory_is_a_usage_error(capsys, path):
    code, lines, err = doctor(capsys, "--model", path)
    assert code == 2 and lines == [] and "no such directory" in err


def test_a_file_is_a_usage_error(capsys):
    code, _, err = doctor(capsys, "--model", str(DEMO_CHECKPOINT_DIR / "config.json"))
    assert code == 2 and "is a file, not a checkpoint directory" in err


def test_a_hub_id_is_looked_up_in_the_cache_only(capsys):
    code, _, err = doctor(capsys, "--model", "nobody-here/no-such-model")
    assert code == 2 and "neither a directory nor a hub id in the local cache" in err and "hf download" in err


def test_bad_flags_are_usage_errors(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["doctor", "--device", "gpu0"])
    assert stopped.value.code == 2 and "expected auto, cpu, cuda or cuda:N" in capsys.readouterr().err
    code, _, err = doctor(capsys, "--max-context-tokens", "0")
    assert code == 2 and "max_context_tokens must be >= 1" in err


def test_the_estimate_is_for_the_settings_omni_serve_would_use(capsys, monkeypatch):
    monkeypatch.setenv("OMNI_MAX_CONTEXT_TOKENS", "1000")
    monkeypatch.setenv("OMNI_PREFIX_CACHE_MB", "0")
    code, lines, _ = doctor(capsys, "--model", str(DEMO_CHECKPOINT_DIR), "--device", "cpu", "--json")
    estimate = {f["check"]: f for f in json.loads("\n".join(lines))["checkpoint"]["findings"]}["memory need"]["data"]
    assert code == 0 and estimate["tokens"] == 1000 and estimate["prefix_cache_bytes"] == 0
    code, lines, _ = doctor(capsys, "--model", str(DEMO_CHECKPOINT_DIR), "--device", "cpu", "--json",
                            "--max-context-tokens", "2000")                       # the flag wins
    assert json.loads("\n".join(lines))["checkpoint"]["findings"][-2]["data"]["tokens"] == 2000
    monkeypatch.setenv("OMNI_MAX_CONTEXT_TOKENS", "many")
    code, lines, err = doctor(capsys)
    assert code == 2 and lines == [] and "OMNI_MAX_CONTEXT_TOKENS: expected int, got 'many'" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_cuda_asked_for_on_a_cpu_machine_fails(capsys):
    code, lines, _ = doctor(capsys, "--device", "cuda")
    assert code == 1 and row(lines, "CUDA devices")[0] == "fail"
    if torch.version.cuda is None:
        assert row(lines, "torch")[0] == "fail" and "needs a CUDA build of torch" in row(lines, "torch")[1]


def test_the_installed_command_exits_with_the_verdict(tiny_copy):
    (tiny_copy / "joint_head.safetensors").unlink()
    omni = Path(sys.executable).parent / "omni"
    done = subprocess.run([str(omni), "doctor", "--model", str(tiny_copy), "--device", "cpu", "--json"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert not report["ok"] and [f["check"] for f in report["checkpoint"]["findings"] if f["status"] == "fail"] \
        == ["files", "joint head"]
