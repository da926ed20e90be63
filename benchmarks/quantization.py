"""quantization: how faithful each quantized backbone is to the unquantized one (issue 33 item 2), on the demo
inspection TEST set (fixtures/inspection.py) with the embedded demo checkpoint (tiny-inspection-v1), on this CPU.

Every scheme of `--quantize` that runs on CPU (int8, fp8, nf4; omni/model/quantize.py) is loaded with
`ClefModel.load(dir, quantization=...)` beside `none`, and all answer the same test records (media decoded once and
shared, `collect_logits` in batches as `omni eval` does). Against `none`, per scheme:

1. max and mean |Δp| over every probability of every question, and per question type (noul, choice, score), and the
   share of questions whose most probable answer is the same;
2. policy outcomes: a policy is fitted (`fit_policy`, as `omni policy fit --from ACT_ON.toml --target-precision
   0.97`) on the unquantized model's TRAIN answers, with act_on named for the inspection questions (no examples/
   policy exists for it); the same policy decides both models' test answers (`decide_outcome`): the share of
   decisions whose overall outcome (act / review / pass) agrees and of per-question outcomes that agree;
3. accuracy and ECE side by side (omni.learn.evaluation.compute_metrics, as `omni eval`);
4. weight bytes of the backbone (`quantize.weight_bytes(model.backbone.thinker)`) and of its text decoder layers
   (what the schemes quantize), with their ratios to none;
5. load time (median of `--loads` interleaved loads, after a warm-up load of each) and p50 forward latency (one
   record per forward, rounds rotating the schemes' order) as ratios to none in the same run; CPU, informative
   only. Also the max |Δp| between those one-record forwards and the batched ones (must be ~float noise).

int4 needs a CUDA GPU: it is tried, and listed as not run with the error the loader gives.

The tiny checkpoint (hidden 64, 4 experts, 2 layers) is far more sensitive to quantization per layer than a 30B
one: its per-row (int8, fp8) and per-64-block (nf4) scales cover rows only 64 wide; the 30B one carries its smaller
errors through 48 layers, this one through 2. The figures are no prediction for the real model; nothing here is tuned
to them.

Prints JSON lines, then two markdown tables; `--json OUT` writes the whole result. Not a test: nothing asserted.
What it must not know: the quantizers' internals (it uses `ClefModel.load`, `weight_bytes`, `grad_off`).

    .venv/bin/python benchmarks/quantization.py [--schemes int8,fp8,nf4] [--train 240] [--test 80] [--data DIR]
        [--threads 1] [--loads 3] [--latency-records 8] [--rounds 5] [--json OUT] [--smoke]

`--smoke` runs the same code at tiny sizes (4 train + 4 test records, int8 only, one load, one round, about 20 s);
its figures mean nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from quantization_figures import (
    Key,
    answered_rows,
    by_key,
    cost_table,
    delta_p,
    faithfulness_table,
    outcome_agreement,
    outcomes,
    quality,
)
from smoke import parse_with_smoke

from fixtures.inspection import write_inspection_set
from omni.contract.config import EngineConfig
from omni.contract.errors import OmniError
from omni.contract.policy import Policy, answer_key, parse_policy
from omni.governance.policy_fit import fit_policy
from omni.governance.policy_report import policy_toml
from omni.learn.dataset import LabelledRequest, load_dataset
from omni.learn.evaluation import ScoredQuestion, collect_logits, probabilities_of
from omni.model import quantize
from omni.model.checkpoint import locate_checkpoint
from omni.model.clef import ClefModel
from omni.model.media import RequestMedia

CPU_SCHEMES = ("int8", "fp8", "nf4")
GPU_ONLY = ("int4",)
TYPES = ("noul", "choice", "score")
SMOKE = {"schemes": "int8", "train": 4, "test": 4, "loads": 1, "latency_records": 2, "rounds": 1}
# the answers that call for action on an inspection (policy_fit keeps act_on from this, replaces every auto_at)
ACT_ON = b"""version = "quantization-benchmark"
[questions.label_visible]
auto_at = 1.0
act_on = [false]
[questions.sounds_normal]
auto_at = 1.0
act_on = [false]
[questions.fan_running]
auto_at = 1.0
act_on = [false]
[questions.severity]
auto_at = 1.0
act_on = [2]
[questions.next_step]
auto_at = 1.0
act_on = ["rework", "scrap"]
"""
SENSITIVITY = ("The tiny checkpoint (hidden {hidden}, {experts} experts, {layers} layers) is far more sensitive to "
               "quantization per layer than a 30B one: per-row (int8, fp8) and per-64-block (nf4) scales here cover "
               "rows only {hidden} wide, and its rounding errors average over {hidden}-term dot products instead of "
               "thousands (the 30B model has 48 layers to carry them through, this one {layers}). These figures are no "
               "prediction for the real model; nothing is tuned to them.")


def emit(event: str, **fields: Any) -> dict:
    line = {"event": event, **fields}
    print(json.dumps(line), flush=True)
    return line


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ loading
def load(directory: Path, scheme: str) -> tuple[ClefModel, float]:
    started = time.perf_counter()
    model = ClefModel.load(directory, device="cpu", quantization=scheme)
    return model, time.perf_counter() - started


def load_all(directory: Path, schemes: Sequence[str], loads: int) -> tuple[dict[str, ClefModel], dict[str, list]]:
    """Each scheme loaded once untimed (imports, first-use costs), then `loads` timed rounds, interleaved; the models
    of the last round are kept."""
    for scheme in schemes:
        load(directory, scheme)
    models: dict[str, ClefModel] = {}
    times: dict[str, list[float]] = {scheme: [] for scheme in schemes}
    for _ in range(loads):
        for scheme in schemes:
            models[scheme], seconds = load(directory, scheme)
            times[scheme].append(seconds)
    return models, times


def not_run_here(directory: Path) -> dict[str, str]:
    """The GPU-only schemes, each with the loader's own refusal on this CPU."""
    reasons = {}
    for scheme in GPU_ONLY:
        try:
            ClefModel.load(directory, device="cpu", quantization=scheme)
        except OmniError as exc:
            reasons[scheme] = f"{type(exc).__name__}: {exc}"
        else:
            reasons[scheme] = "loaded on CPU, which the loader should have refused (not measured)"
    return reasons


# ------------------------------------------------------------------------------------------------ answering
def scored_by(model: ClefModel, records: Sequence[LabelledRequest], media: dict[int, RequestMedia],
              batch_size: int) -> list[ScoredQuestion]:
    return collect_logits(model, records, batch_size, progress=False,
                          prepare=lambda record: model.prepare(record.request, media[record.line]))


def fitted_policy(model: ClefModel, train: Sequence[LabelledRequest], media: dict[int, RequestMedia],
                  args: argparse.Namespace, config: EngineConfig) -> tuple[Policy, dict]:
    """The policy fitted on the unquantized model's train answers (act_on from ACT_ON), as the file it writes."""
    rows = answered_rows(scored_by(model, train, media, args.batch_size), train, config)
    fit = fit_policy(rows, args.target_precision, old=parse_policy(ACT_ON, "ACT_ON"))
    policy = parse_policy(policy_toml(fit).encode(), "fitted")
    rules = {qid: {"auto_at": rule.auto_at, "act_on": [answer_key(v) for v in rule.act_on]}
             for qid, rule in policy.questions.items()}
    return policy, {"fitted_on": f"train, {len(train)} records, answers of none", "target_precision":
                    args.target_precision, "rules": rules}


def latencies(models: dict[str, ClefModel], records: Sequence[LabelledRequest], media: dict[int, RequestMedia],
              rounds: int) -> tuple[dict[str, list[float]], dict[str, dict[Key, np.ndarray]]]:
    """Seconds per one-record forward (`model.logits([record])`), rounds rotating the schemes' order; and each
    scheme's probabilities from those forwards, per (record line, question id)."""
    prepared = {name: [model.prepare(r.request, media[r.line]) for r in records] for name, model in models.items()}
    seconds: dict[str, list[float]] = {name: [] for name in models}
    single: dict[str, dict[Key, np.ndarray]] = {name: {} for name in models}
    names = list(models)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            model = models[name]
            for record, inputs in zip(records, prepared[name], strict=True):
                with model.grad_off():
                    started = time.perf_counter()
                    logits = model.logits([inputs])[0]
                    seconds[name].append(time.perf_counter() - started)
                for question, q in zip(record.request.questions, logits, strict=True):
                    single[name][(record.line, question.id)] = torch.softmax(q.double(), -1).numpy()
    return seconds, single


def batched_vs_one(scored: Sequence[ScoredQuestion], single: dict[Key, np.ndarray]) -> float:
    """Max |Δp| between the batched answers and the one-record forwards of the same records."""
    keyed = by_key(scored)
    return max(float(np.abs(probabilities_of(keyed[key]) - p).max()) for key, p in single.items() if key in keyed)


# ------------------------------------------------------------------------------------------------ the run
def dataset(args: argparse.Namespace, scratch: Path, config: EngineConfig) -> dict[str, list[LabelledRequest]]:
    folder = Path(args.data) if args.data else scratch / "set"
    if not args.data:
        write_inspection_set(folder, n_train=args.train, n_test=args.test)
    return {split: load_dataset(folder / f"{split}.jsonl", config) for split in ("train", "test")}


def compare(models: dict[str, ClefModel], data: dict[str, list[LabelledRequest]], args: argparse.Namespace,
            config: EngineConfig) -> tuple[dict[str, dict], dict]:
    base = models["none"]
    media = {split: {r.line: base.encode_media(r.request.media) for r in records} for split, records in data.items()}
    policy, policy_summary = fitted_policy(base, data["train"], media["train"], args, config)
    scored = {name: scored_by(model, data["test"], media["test"], args.batch_size) for name, model in models.items()}
    decided = {name: outcomes(policy, answered_rows(s, data["test"], config)) for name, s in scored.items()}
    rows: dict[str, dict[str, Any]] = {}
    for name in models:
        rows[name] = {"delta_p": delta_p(scored["none"], scored[name]) if name != "none" else {},
                      "outcomes": outcome_agreement(decided["none"], decided[name]),
                      "quality": quality(scored[name])}
    seconds, single = latencies(models, data["test"][:args.latency_records], media["test"], args.rounds)
    for name in models:
        rows[name]["batched_vs_one_max_abs_dp"] = batched_vs_one(scored[name], single[name])
        rows[name]["p50_forward_s"] = statistics.median(seconds[name])
    return rows, policy_summary


def weights(model: ClefModel) -> dict[str, int]:
    thinker = model.backbone.thinker
    return {"backbone_bytes": quantize.weight_bytes(thinker),
            "text_layers_bytes": quantize.weight_bytes(thinker.model.language_model.layers)}


def finish_rows(rows: dict[str, dict], models: dict[str, ClefModel], load_s: dict[str, list[float]]) -> None:
    """Weight bytes, load time and p50 with their ratios to none, into each scheme's row."""
    base_weights, base_load = weights(models["none"]), statistics.median(load_s["none"])
    base_p50 = rows["none"]["p50_forward_s"]
    for name, row in rows.items():
        w = weights(models[name])
        row["weights"] = {**w, "backbone_ratio": w["backbone_bytes"] / base_weights["backbone_bytes"],
                          "text_layers_ratio": w["text_layers_bytes"] / base_weights["text_layers_bytes"]}
        load_median = statistics.median(load_s[name])
        row["timing"] = {"load_s": load_s[name], "load_s_median": load_median, "load_ratio": load_median / base_load,
                         "p50_forward_ms": row.pop("p50_forward_s") * 1e3}
        row["timing"]["p50_ratio"] = row["timing"]["p50_forward_ms"] / (base_p50 * 1e3)


def environment(args: argparse.Namespace, model: ClefModel, load_average: list[float]) -> dict:
    config: Any = model.backbone.thinker.config      # transformers types its nested sub-configs loosely
    text = config.text_config
    return {"smoke": args.smoke, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
            "load_average_start": load_average, "torch": torch.__version__,
            "dtype": str(model.backbone.dtype).removeprefix("torch."), "hidden_size": text.hidden_size,
            "num_experts": text.num_experts, "num_hidden_layers": text.num_hidden_layers,
            "train_records": args.train, "test_records": args.test, "batch_size": args.batch_size}


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schemes", default=",".join(CPU_SCHEMES), help="comma-separated CPU schemes to compare")
    parser.add_argument("--train", type=int, default=240, help="train records (the policy is fitted on them)")
    parser.add_argument("--test", type=int, default=80, help="test records (compared)")
    parser.add_argument("--data", help="an existing inspection set (train.jsonl, test.jsonl) instead of writing one")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--batch-size", type=int, default=4, help="records per forward when answering (as omni eval)")
    parser.add_argument("--loads", type=int, default=3, help="timed loads per scheme (after a warm-up load)")
    parser.add_argument("--latency-records", type=int, default=8, help="test records timed one per forward")
    parser.add_argument("--rounds", type=int, default=5, help="latency rounds")
    parser.add_argument("--target-precision", type=float, default=0.97, help="the fitted policy's target")
    parser.add_argument("--json", metavar="OUT", help="write the whole result as JSON")
    return parse_with_smoke(parser, SMOKE, argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    load_average = [round(v, 2) for v in os.getloadavg()]
    torch.set_num_threads(args.threads)
    schemes = ["none", *[s for s in args.schemes.split(",") if s]]
    directory = locate_checkpoint(None)
    config = EngineConfig()
    with tempfile.TemporaryDirectory() as scratch:
        data = dataset(args, Path(scratch), config)
        args.train, args.test = len(data["train"]), len(data["test"])
        say(f"quantization: loading {', '.join(schemes)}")
        models, load_s = load_all(directory, schemes, args.loads)
        env = emit("env", **environment(args, models["none"], load_average))
        not_run = not_run_here(directory)
        say("quantization: answering")
        rows, policy = compare(models, data, args, config)
    finish_rows(rows, models, load_s)
    emit("policy", **policy)
    for name, row in rows.items():
        emit("scheme", scheme=name, **row)
    note = SENSITIVITY.format(hidden=env["hidden_size"], experts=env["num_experts"], layers=env["num_hidden_layers"])
    summary = emit("summary", schemes=schemes, not_run=not_run, note=note,
                   load_average_end=[round(v, 2) for v in os.getloadavg()])
    print("\n" + faithfulness_table(rows, TYPES) + "\n\n" + cost_table(rows, not_run) + "\n\n" + note)
    if args.json:
        result = {"env": env, "policy": policy, "schemes": rows, "summary": summary}
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
