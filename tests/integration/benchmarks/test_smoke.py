"""Every benchmark runs: each script in benchmarks/ and benchmarks/device/ in smoke mode (`--smoke`: the same code
path at tiny sizes), checked for its exit code and the shape of what it prints.

The scripts are discovered (every `.py` there with a `__main__` block, every `.sh`), so a new one fails here until it
has a smoke mode and a check below (or, for a helper that is no benchmark, a reason in NOT_BENCHMARKS). Each runs in
a subprocess of this interpreter from the repository root, without the caller's OMNI_* settings; the timeout only
guards against a hang: nothing here is timed. The checks parse the JSON lines and tables a script prints and look at
their keys, that figures are finite and positive where they must be, and at what the tiny run must show (every
request answered, cache hits where the script expects them). `scale.py` needs the [cluster] extra: without it that
case skips, unless OMNI_REQUIRE_CLUSTER is set (CI), where it fails.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.benchmarks.banks_check import check_banks
from tests.integration.benchmarks.evidence_check import check_evidence
from tests.integration.benchmarks.line_check import check_line
from tests.integration.benchmarks.occlusion_check import check_occlusion
from tests.integration.benchmarks.quantization_check import check_quantization
from tests.integration.benchmarks.smoke_helpers import (
    ROOT,
    finite,
    json_lines,
    one,
    positive,
    require_ray,
    run_smoke,
    table,
)

FOLDERS = (ROOT / "benchmarks", ROOT / "benchmarks" / "device")
NOT_BENCHMARKS = {"device/fetch_wheels.sh": "downloads the device machine's wheels from PyPI (needs the network); "
                                            "it measures nothing"}


def discovered() -> list[str]:
    """Every benchmark script, relative to benchmarks/: Python files with a __main__ block, shell scripts."""
    found = []
    for folder in FOLDERS:
        for path in sorted(folder.iterdir()):
            is_main = path.suffix == ".py" and '__name__ == "__main__"' in path.read_text(encoding="utf-8")
            if is_main or path.suffix == ".sh":
                found.append(path.relative_to(ROOT / "benchmarks").as_posix())
    return found


# ------------------------------------------------------------------------------------------------------ checks
def check_onepass(tmp_path: Path) -> None:
    out = run_smoke("onepass.py").stdout
    lines = json_lines(out)
    assert [line["event"] for line in lines] == ["machine", "checkpoint", "workload", "result", "result",
                                                 "mac_model_state_sweep", "torch_profile", "done"]
    assert lines[0]["smoke"] is True
    for line in lines:
        finite(line)
    for n, row in zip((1, 2), [line for line in lines if line["event"] == "result"], strict=True):
        assert row["questions"] == n and row["rounds"] >= 3
        positive(row, "tokens.a", "tokens.b_total", "tokens.c_prompt", "tokens.c_new", "ms_best.a", "ms_best.b",
                 "ms_best.c", "ratio_best.b/a", "ratio_best.c/a", "mac_model.this_checkpoint.b/a",
                 "mac_model.this_checkpoint.c/a", "stages_c_ms_min.prefill", "stages_c_ms_min.decode")
        for mode in ("a", "b"):     # the engine's own timings, the backbone measured inside its forward
            split = row[f"best_round_{mode}_ms"]
            positive(split, "total", "encode", "forward", "backbone", "head")
            assert split["backbone"] < split["forward"] <= split["total"]
            assert 0 < row["head_share_best_round"][mode] < 1
        if n == 1:      # one question: (a) and (b) are the same request
            assert row["tokens"]["b_total"] == row["tokens"]["a"]
        else:           # each split pass repeats the state
            assert row["tokens"]["b_total"] > row["tokens"]["a"]
    assert len(lines[5]["rows"]) == 4 and lines[6]["top_self_cpu"]
    ratios = table(out, "| questions | rounds | tokens (a) |")
    assert [r[0] for r in ratios] == ["1", "2"] and all(r[8].endswith(")") for r in ratios)
    assert len(table(out, "| questions | (a) encode | (a) backbone |")) == 2


def check_load(tmp_path: Path) -> None:
    lines = json_lines(run_smoke("load.py").stdout)
    assert lines[0]["env"]["smoke"] is True
    for mode in ("batching_on", "batching_off"):
        result = one(lines, mode=mode)
        assert result["statuses"] == {"200": result["requests"]}
        positive(result, "throughput_rps", "p50_ms", "p99_ms", "wall_s")
    overhead = next(line["overhead_small_requests"] for line in lines if "overhead_small_requests" in line)
    positive(overhead, "in_process_p50_ms", "httpx_p50_ms", "stdlib_p50_ms", "stdlib_batching_on_p50_ms",
             "ratio_httpx", "ratio_stdlib", "ratio_stdlib_batching_on", "server_stages_p50_ms_stdlib.forward")
    simulated = next(line["batcher_simulated_device"] for line in lines if "batcher_simulated_device" in line)
    positive(simulated, "throughput_ratio_on_off", "batching_on.throughput_rps", "batching_off.throughput_rps")
    summary = lines[-1]["summary"]
    finite(summary)
    positive(summary, "throughput_ratio_on_off", "p50_ratio_on_off", "p99_ratio_on_off", "http_overhead_ratio_httpx",
             "batcher_only_throughput_ratio_on_off")


def check_batch(tmp_path: Path) -> None:
    lines = json_lines(run_smoke("batch.py").stdout)
    assert lines[0]["env"]["smoke"] is True
    round_0 = one(lines, round=0)
    for way in ("in_process", "batch_url", "server_load"):
        result = round_0[way]
        positive(result, "lines", "wall_s", "rps")
        assert result["outcome"] == ({"200": result["lines"]} if way == "server_load" else
                                     {"answered": result["lines"]})
    summary = lines[-1]["summary"]
    positive(summary, "in_process_rps", "batch_url_rps", "server_load_rps", "ratio_in_process_over_batch_url",
             "ratio_in_process_over_server_load")


def check_abuse(tmp_path: Path) -> None:
    lines = json_lines(run_smoke("abuse.py").stdout)
    for server in ("chunked", "unchunked"):
        positive(one(lines, event="fairness_round", server=server), "long_alone_s", "long_with_small_s", "small_s")
    positive(one(lines, event="fairness"), "small_over_long_chunked", "small_over_long_unchunked",
             "long_slowdown_chunked")
    for case in ("fills_context", "body_cap"):
        bounded = one(lines, event="bounded_case", case=case)
        assert bounded["status"] == 200
        positive(bounded, "seconds", "input_tokens", "peak_rss_mib", "rss_before_mib", "rss_after_mib")
    assert one(lines, event="bounded_case", case="body_cap")["truncated_chars"] > 0   # the cap's state is cut
    positive(one(lines, event="bounded"), "time_ratio", "peak_rss_ratio")
    assert set(one(lines, event="summary")) == {"event", "fairness", "bounded"}


def check_cache(tmp_path: Path) -> None:
    lines = json_lines(run_smoke("cache.py").stdout)
    assert one(lines, event="env")["smoke"] is True
    repeat = one(lines, event="repeat_media")
    assert repeat["cache"] == {"media": "hit", "prefix": "hit"}       # warm: both caches answer
    positive(repeat, "ratio_median")
    positive(one(lines, event="isolated_64"), "questions", "ratio_vs_cold_median", "ratio_vs_caches_on_median")
    positive(one(lines, event="same_photo"), "ratio_median")
    memory = one(lines, event="memory")
    samples = memory["requests"] // 10 + 1          # the smoke samples RSS every 10 requests, and once before
    assert len(memory["rss_mib_on"]) == len(memory["rss_mib_off"]) == samples
    assert all(v > 0 for v in memory["rss_mib_on"] + memory["rss_mib_off"])
    assert "omni_cache_" in memory["cache_metrics_on"]
    summary = one(lines, event="summary")
    finite(summary)
    assert set(summary) == {"event", "repeat_media", "isolated_64", "same_photo", "memory"}


def check_adapters(tmp_path: Path) -> None:
    out = run_smoke("adapters.py", "--out", str(tmp_path / "adapters.json")).stdout
    lines = json_lines(out)
    assert one(lines, event="env")["smoke"] is True
    for event in ("head_mixed", "head_mixed_photo", "lora_mixed"):
        positive(one(lines, event=event), "rps_mixed", "rps_one", "ratio_rps_mixed_over_one", "ratio_of_median_rps")
    positive(one(lines, event="head_mixed"), "rps_base")
    positive(one(lines, event="head_mixed_photo"), "rps_base")
    shadow = one(lines, event="shadow")
    assert shadow["shadow_scored"] == shadow["requests_each"] > 0          # every live answer was also scored
    assert shadow["same_forward"] >= shadow["requests_each"]               # head-only: from the same forward
    positive(shadow, "p50_ms_with_shadow", "p50_ms_without", "ratio_p50_with_over_without")
    hot = one(lines, event="hot_load")
    assert hot["failures"] == 0 and hot["clients_in_flight_at_load_min"] > 0   # loaded while requests were in flight
    positive(hot, "register_ms_median", "first_answer_ms_median", "p50_ms_with_load", "p50_ms_without")
    positive(one(lines, event="lora_cost"), "ms_per_token_base", "ms_per_token_one_lora", "ms_per_token_mixed_4_lora",
             "ms_per_token_base_before_lora")
    memory = one(lines, event="memory")
    tiny, real = memory["tiny"], memory["real_size"]
    assert 0 < tiny["head_only_bytes"] < tiny["lora_r16_bytes"] and tiny["stats"]["resident_lora"] == 4
    assert real["head"]["params"] == 109_175_812                           # the real head shape (realsize_model)
    assert real["lora"]["modules"] == 4 * real["text_config"]["num_hidden_layers"] == 192
    assert real["lora"]["params"] == 16 * 48 * (2 * (2048 + 32 * 128) + 2 * (2048 + 4 * 128))   # r (in + out) each
    summary = one(lines, event="summary")
    finite(summary)
    assert set(summary["targets_held"]) == {"head_mixed", "lora_mixed", "shadow"}
    assert len(table(out, "| figure | measured |")) == 9
    assert json.loads((tmp_path / "adapters.json").read_text())["summary"] == summary


def check_audit(tmp_path: Path) -> None:
    lines = json_lines(run_smoke("audit.py").stdout)
    assert one(lines, event="env")["smoke"] is True
    record = one(lines, event="record_cost")
    positive(record, "off.best_ms", "on.best_ms", "ratio_on_over_off_best", "ratio_on_over_off_median",
             "ratio_on_over_off_paired_median")
    log = one(lines, event="log_cost")
    for mode in ("off", "on"):
        assert log[mode]["statuses"] == {"200": log[mode]["requests"]}
        positive(log[mode], "throughput_rps", "p50_ms")
    written = log["log"]["metrics"]['omni_decision_log_records_total{outcome="written"}']
    assert written == log["log"]["records"] > log["on"]["requests"]          # every decision, the warm-up's too
    assert log["log"]["metrics"]['omni_decision_log_records_total{outcome="dropped"}'] == 0
    assert log["log"]["media_files"] == 2                                     # one photo, one clip: kept once each
    summary = one(lines, event="summary")
    finite(summary)
    positive(summary, "record_ratio", "log_ratio_rps")


def check_webhooks(tmp_path: Path) -> None:
    lines = json_lines(run_smoke("webhooks.py").stdout)
    assert one(lines, event="env")["smoke"] is True
    modes = {mode: one(lines, event="mode", mode=mode) for mode in ("none", "fast", "slow")}
    for mode, row in modes.items():
        finite(row)
        assert row["statuses"] == {"200": row["requests"]}                  # every request answered: no 5xx
        assert row["warm_up_statuses"] == {"200": row["sent"] - row["requests"]}
        positive(row, "p50_ms", "p99_ms", "throughput_rps", "server_mean_ms", "sent")
        acts = row["metrics_end_of_load"]
        assert sum(v for k, v in acts.items() if k.startswith("omni_outcomes_total") and 'question="_overall"' in k
                   and 'outcome="act"' in k) == row["sent"]                 # every decision acts, so is sent
        assert not any(k.startswith("omni_webhook_") for k in acts) if mode == "none" else \
            acts['omni_webhook_events_total{event="dropped"}'] == 0
    fast, slow = modes["fast"], modes["slow"]
    assert fast["receiver"]["posts"] == fast["receiver"]["distinct_keys"] == fast["sent"]     # each exactly once
    assert fast["receiver"]["signatures_valid"] == fast["sent"] and fast["receiver"]["key_mismatches"] == 0
    assert fast["receiver"]["outcomes"] == {"act": fast["sent"]} and fast["dead_letters"]["lines"] == 0
    assert fast["metrics_settled"]['omni_webhook_events_total{event="delivered"}'] == fast["sent"]
    assert slow["metrics_end_of_load"]['omni_webhook_events_total{event="delivered"}'] == 0
    assert slow["receiver"]["posts"] > 0 and slow["receiver"]["signatures_valid"] == slow["receiver"]["posts"]
    assert slow["dead_letters"]["lines"] == slow["dead_letters"]["distinct_request_ids"] == slow["sent"]
    assert set(slow["dead_letters"]["reasons"]) <= {"max_tries", "shutdown", "in_flight_at_shutdown"}
    summary = one(lines, event="summary")
    finite(summary)
    assert all(summary["checks"].values()) and len(summary["checks"]) >= 10
    positive(summary, "ratio_p50_fast_over_none", "ratio_p50_slow_over_none", "ratio_rps_fast_over_none",
             "ratio_rps_slow_over_none", "ratio_server_mean_fast_over_none", "ratio_server_mean_slow_over_none")


def check_preprocessing(tmp_path: Path) -> None:
    out = run_smoke("preprocessing.py").stdout
    lines = json_lines(out)
    assert one(lines, event="env")["threads"] == 2
    for clip in ("720p", "1080p", "webm", "720p_high"):
        positive(one(lines, event="clip", clip=clip), "bytes", "seconds")
        positive(one(lines, event="round", clip=clip), "floor_s", "ours_s", "ours_decode_s", "ours_encode_s",
                 "ours_1_thread_s", "stage_decode_as_ours_s", "stage_bicubic_s", "stage_soundtrack_s")
        assert re.search(rf"^{clip}: stages \(CPU s, best\): demux [\d.]+, decode_every_frame", out, re.MULTILINE)
        summary = one(lines, event="summary", clip=clip)
        assert summary["smoke"] is True
        finite(summary)
        positive(summary, "ratio_ours_over_floor_best", "realtime_factor_best", "times.ours_s.best", "media_ids")
        assert summary["tokens"]["video"] > 0 and summary["tokens"]["video_audio"] > 0   # frames and their soundtrack
        assert re.search(rf"^{clip}: ours [\d.]+ s best / [\d.]+ s median \(2 threads\) vs floor", out, re.MULTILINE)
    high = one(lines, event="clip", clip="720p_high")
    assert high["profile"] == "High" and high["frames"]["B"] > 0                       # what the clip is for
    positive(one(lines, event="summary", clip="720p_high"), "ratio_every_frame_over_floor_best")
    memory = one(lines, event="summary", clip="720p")["memory"]
    positive(memory, "uint8_to_device.peak_growth_mib", "float32_on_host.output_tensors_mib")


def check_scale(tmp_path: Path) -> None:
    require_ray()
    lines = json_lines(run_smoke("scale.py").stdout)
    assert lines[0]["env"]["smoke"] is True
    for workload in ("photo_audio", "text"):
        ceiling = one(lines, part="ceiling", workload=workload)
        positive(ceiling, "engines_1.rps", "engines_2.rps", "ratio_two_over_one")
        throughput = one(lines, part="throughput", workload=workload)
        for setup in ("one", "two"):
            assert throughput[setup]["statuses"] == {"200": throughput[setup]["requests"]}
            positive(throughput[setup], "rps", "p50_ms", "cpu_ms_per_request.engine", "cores_busy.ours")
        positive(throughput, "ratio_two_over_one")
    for setup in ("one", "two"):
        affinity = one(lines, part="affinity", setup=setup)
        assert affinity["statuses"] == {"200": affinity["requests"]}
        assert 0 <= affinity["prefix_hit_rate"] <= affinity["best_possible"]
    stopped = [line["stopped"] for line in lines if "stopped" in line]
    # --smoke measures every setup on one server (`two`), started once: its figures mean nothing
    assert [s["server"] for s in stopped] == ["two"] and all(not s["left_running"] for s in stopped)
    summary = lines[-1]["summary"]
    finite(summary)
    for workload in ("photo_audio", "text"):
        positive(summary[workload], "throughput.ratio_two_over_one", "ceiling_no_serving_stack.ratio_two_over_one")
    assert "ratio_two_over_one" in summary["affinity"]


def check_soak(tmp_path: Path) -> None:
    lines = json_lines(run_smoke("soak.py").stdout)
    progress = [line for line in lines if line["event"] == "progress"]
    assert progress and all(line["rss_mib"] > 0 and line["cache_mib"] >= 0 for line in progress)
    summary = one(lines, event="summary")
    assert summary["smoke"] is True
    assert summary["requests"] > 0 and summary["lost"] == 0 and summary["5xx"] == 0 and summary["unexpected"] == {}
    assert all(v > 0 for v in summary["rss_mib_samples"]) and len(summary["rss_mib_samples"]) >= 2
    assert summary["server_log_tracebacks"] == 0


def check_cli_startup(tmp_path: Path) -> None:
    out = run_smoke("cli_startup.py").stdout
    lines = json_lines(out)
    assert lines[0]["env"]["smoke"] is True
    results = [line for line in lines if line.get("result") == "cli_startup"]
    ours = {r["command"]: r for r in results if r["tree"] == "this"}
    assert sorted(ours) == ["omni --help", "omni decide (usage error)", "omni policy check FILE", "omni serve --help"]
    assert all(r["imports_torch"] is False for r in ours.values())     # what the timing is about
    for r in results:
        positive(r, "median_ms", "p90_ms", "over_interpreter", "over_import_torch")
    assert {r["command"] for r in results if r["tree"] == "floor"} == {"python -c pass", "python -c 'import torch'"}
    assert len(table(out, "| tree | command |")) == len(results)


def check_torch_threads(tmp_path: Path) -> None:
    from omni.contract.config import EngineConfig
    from omni.serve.cpus import torch_threads_for, usable_cpus

    out = run_smoke("torch_threads.py").stdout
    lines = json_lines(out)
    assert lines[0]["env"]["smoke"] is True
    rows = {(r["condition"], r["setting"]): r for r in lines if r.get("result") == "torch_threads"}
    cores = os.cpu_count()
    assert sorted(rows) == sorted((c, s) for c in ("idle", "beside one busy process")
                                  for s in ("default", "--torch-threads 1", f"--torch-threads {cores} (every core)"))
    for (_condition, setting), row in rows.items():
        positive(row, "p50_ms", "p95_ms", "mean_ms", "p50_over_one_thread")
        assert row["requests"] == 4
        if setting == "default":    # what each server logged at startup: the sized count, and why
            assert row["torch_threads"] == torch_threads_for(usable_cpus().usable, EngineConfig().decode_threads)
            assert row["why"].startswith("sized: ")
        else:
            assert row["why"] == "as asked"
    assert rows[("idle", "--torch-threads 1")]["p50_over_one_thread"] == 1.0
    assert len(table(out, "| condition | setting |")) == 6


def check_realsize(tmp_path: Path) -> None:
    out = run_smoke("device/realsize.py", "--out", str(tmp_path)).stdout
    rows = {line["case"]: line for line in json_lines(out) if "case" in line}
    assert sorted(rows) == list("abcdef")
    for row in rows.values():
        finite(row)
        assert row["rounds"] == row["rounds_planned"] == 1
        positive(row, "p50_ms", "p99_ms", "forward_ms", "input_tokens", "prefill_tokens", "tflop", "prefill_tok_s")
    assert all(rows[k]["prefill_tokens"] == rows[k]["input_tokens"] for k in "abcde")   # cold: the whole prompt
    assert rows["f"]["prefill_tokens"] < rows["f"]["input_tokens"]                      # warm: after the prefix
    assert rows["f"]["caches"] == ["media:hit,prefix:hit"]
    assert rows["b"]["tflop"] > rows["a"]["tflop"] * rows["b"]["input_tokens"] / rows["a"]["input_tokens"]   # + vision
    assert len(table(out, "| case | input tok (state) |")) == 6
    report = json.loads((tmp_path / "realsize.json").read_text())
    assert [r["case"] for r in report["cases"]] == list("abcdef") and report["skipped"] == []
    adapters = one(json_lines(out), adapters_case=True)         # issue 32: 8 head-only adapters, mixed vs one
    assert adapters["adapters"] == adapters["resident"] == 8 and "failed" not in adapters
    positive(adapters, "rps_mixed", "rps_one", "ratio_rps_mixed_over_one", "p50_ms_mixed", "p50_ms_one",
             "resident_bytes")
    assert json.loads((tmp_path / "realsize_adapters.json").read_text()) == adapters


def check_realsize_quantized(tmp_path: Path) -> None:
    """Issue 33: every scheme built and quantized in turn, each row naming it; int4 (CUDA only) listed as skipped."""
    out = run_smoke("device/realsize.py", "--cases", "a", "--adapters", "0", "--quantize", "none,int8,fp8,nf4,int4",
                    "--out", str(tmp_path)).stdout
    rows = [line for line in json_lines(out) if "case" in line]
    assert [row["case"] for row in rows] == ["a"] * 4
    report = json.loads((tmp_path / "realsize.json").read_text())
    assert [(r["quantize"], r["rounds"]) for r in report["cases"]] == [(s, 1) for s in ("none", "int8", "fp8", "nf4")]
    for row in report["cases"]:
        finite(row)
        positive(row, "p50_ms", "weights_gib")
    assert report["skipped"] == [s for s in report["skipped"] if s.startswith("[int4] entirely: --quantize int4 needs "
                                                                                "a CUDA GPU")] != []
    assert "[nf4, weights" in out


def check_run_sh(tmp_path: Path) -> None:
    """The device harness, statically (its smoke run, `PY=.venv/bin/python bash benchmarks/device/run.sh --smoke`,
    repeats load.py's and realsize.py's smoke runs above, minutes more): valid bash, and every benchmark it calls
    exists and declares every flag it is given."""
    script = ROOT / "benchmarks" / "device" / "run.sh"
    subprocess.run(["bash", "-n", str(script)], check=True, capture_output=True)
    text = script.read_text(encoding="utf-8")
    assert '--smoke) INSTALL=0; SMOKE=(--smoke)' in text
    calls = re.findall(r"\$PY (benchmarks/\S+\.py)([^\n|]*)", text)
    assert {path for path, _ in calls} == {"benchmarks/load.py", "benchmarks/device/realsize.py"}
    for path, flags in calls:
        usage = subprocess.run([sys.executable, path, "--help"], cwd=ROOT, capture_output=True, text=True,
                               check=True, timeout=300).stdout          # what its argument parser takes
        for flag in re.findall(r"--[a-z][a-z-]+", flags) + ["--smoke"]:
            assert flag in usage, f"run.sh passes {flag} to {path}, which does not take it"


CHECKS: dict[str, Callable[[Path], None]] = {
    "abuse.py": check_abuse, "adapters.py": check_adapters, "audit.py": check_audit, "batch.py": check_batch, "cache.py": check_cache,
    "load.py": check_load, "onepass.py": check_onepass, "preprocessing.py": check_preprocessing, "scale.py": check_scale,
    "soak.py": check_soak, "webhooks.py": check_webhooks,
    "device/realsize.py": lambda tmp: (check_realsize(tmp / "all"), check_realsize_quantized(tmp / "quantized")),
    "cli_startup.py": check_cli_startup, "torch_threads.py": check_torch_threads,
    "device/run.sh": check_run_sh, "quantization.py": check_quantization, "occlusion.py": check_occlusion,
    "evidence.py": check_evidence, "line.py": check_line, "banks.py": check_banks,
}


def test_every_benchmark_has_a_smoke_check():
    """A new script needs a smoke mode and a check here (or a reason in NOT_BENCHMARKS)."""
    scripts = set(discovered())
    assert scripts - set(NOT_BENCHMARKS) == set(CHECKS), "benchmarks without a smoke check: " \
        f"{sorted(scripts - set(NOT_BENCHMARKS) - set(CHECKS))}; checks without a script: {sorted(set(CHECKS) - scripts)}"


@pytest.mark.parametrize("script", [s for s in discovered() if s not in NOT_BENCHMARKS])
def test_smoke(script: str, tmp_path: Path):
    """The script runs with --smoke and prints what it should."""
    assert script in CHECKS, f"{script} has no smoke check in this module"
    source = (ROOT / "benchmarks" / script).read_text(encoding="utf-8")
    assert "--smoke" in source.split('"""', 2)[1] if script.endswith(".py") else "--smoke" in source, \
        f"{script}'s docstring / usage does not mention --smoke"
    CHECKS[script](tmp_path)
