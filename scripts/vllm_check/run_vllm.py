"""vLLM's side of scripts/vllm-check.sh: loads an exported checkpoint in vLLM's CPU engine, offline, from the local
directory (vLLM routes a Qwen3-Omni config with a joint_head_config.json to its `clef_omni` model), scores the
reference's prompts with the joint-schema pooler and compares each option's logit and probability with ours.

Run with the vLLM venv: `python scripts/vllm_check/run_vllm.py CHECKPOINT_DIR REFERENCE.json`.
Exit 0: loaded and every value within TOLERANCE; 1: vLLM did not load it (its words on stderr); 2: it loaded
but could not score it, or its scores differ from ours.
"""
from __future__ import annotations

import json
import os
import sys
import traceback

TOLERANCE = 1e-4        # float32 both sides; vLLM's CPU kernels sum in another order


def load(directory: str):
    from vllm import LLM

    # media limits left at vLLM's defaults: it then builds the checkpoint's processor (image, video and Whisper
    # parts, from processor_config.json) and runs the vision and audio encoders once while profiling
    return LLM(model=directory, tokenizer=directory, runner="pooling", dtype="float32", enforce_eager=True,
               max_model_len=2048, gpu_memory_utilization=0.1, trust_remote_code=False, seed=0)


def score(llm, cases: list[dict], activation: bool) -> list[list[float]]:
    """Each case's option values from the joint-schema pooler: probabilities within each question, or (activation
    off) the head's logits."""
    from vllm import PoolingParams, TokensPrompt

    prompts = [TokensPrompt(prompt_token_ids=case["prompt_token_ids"]) for case in cases]
    params = [PoolingParams(extra_kwargs={"joint_schema": case["joint_schema"]}, use_activation=activation)
              for case in cases]
    outputs = llm.encode(prompts, pooling_params=params, pooling_task="token_classify", use_tqdm=False)
    return [[float(x) for x in output.outputs.data.flatten().tolist()] for output in outputs]


def compare(what: str, cases: list[dict], scores: list[list[float]]) -> float | None:
    """The largest difference from ours (printed per request), or None when vLLM's values do not line up."""
    worst = 0.0
    for case, got in zip(cases, scores, strict=True):
        want = case[what]
        if len(got) != len(want):
            print(f"vllm-check: {case['questions']}: vLLM gave {len(got)} {what}, we have {len(want)}: {got}",
                  file=sys.stderr)
            return None
        diff = max(abs(a - b) for a, b in zip(got, want, strict=True))
        worst = max(worst, diff)
        print(f"vllm-check:   {what} of {', '.join(case['questions'])}: vLLM {[round(x, 5) for x in got]} vs ours "
              f"{[round(x, 5) for x in want]} (max |diff| {diff:.1e})")
    return worst


def main(directory: str, reference_path: str) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    with open(reference_path, encoding="utf-8") as handle:
        cases = json.load(handle)["cases"]
    try:
        llm = load(directory)
    except Exception:  # noqa: BLE001 - whatever vLLM raises is the finding: print it whole
        traceback.print_exc()
        print("vllm-check: vLLM did not load the checkpoint (its error above)", file=sys.stderr)
        return 1
    config = llm.llm_engine.model_config
    with open(os.path.join(directory, "model.safetensors.index.json"), encoding="utf-8") as handle:
        shards = sorted(set(json.load(handle)["weight_map"].values()))
    print(f"vllm-check: loaded {directory} as {config.architecture} (runner {config.runner_type}, {config.dtype}, "
          f"max_model_len {config.max_model_len}): the backbone from the {len(shards)} shards its index names "
          f"({shards[0]} ...), the head from joint_head.safetensors")
    try:
        found = {what: compare(what, cases, score(llm, cases, activation=what == "probabilities"))
                 for what in ("logits", "probabilities")}
    except Exception:  # noqa: BLE001 - as above: vLLM's own words are the finding
        traceback.print_exc()
        print("vllm-check: vLLM loaded the checkpoint but could not score it (its error above)", file=sys.stderr)
        return 2
    if any(worst is None or worst > TOLERANCE for worst in found.values()):
        print(f"vllm-check: vLLM's scores differ from ours ({found}; tolerance {TOLERANCE:g})", file=sys.stderr)
        return 2
    print(f"vllm-check: ok — every option's logit and probability within {TOLERANCE:g} of ours "
          f"(max {max(v for v in found.values() if v is not None):.1e})")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
