"""realsize: end-to-end decision latency of the REAL-size model on one GPU, through the product path.

Device call: ONE `run` on a lent H200. Its image lacks transformers 5.23, av and soundfile: first, here (PyPI must
be reachable), `bash benchmarks/device/fetch_wheels.sh` fills .whl/ (as for run.sh). Then, as one line:
    command: python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site
             .whl/*.whl || exit 1; export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1;
             python3 benchmarks/device/realsize.py 2>&1 | tee $OUT/realsize.txt
    carry: [".whl"]    timeout_s: 540
No new round starts after --budget-s (420 s from the script's start, model build included; the wheels take well
under a minute more). It writes $OUT/realsize.json and $OUT/realsize.md (rewritten after every case, so a run cut
short keeps what it measured) and prints the same: one JSON line per case, then the table. `REALSIZE=1 bash
benchmarks/device/run.sh` runs it after run.sh's own steps, in the time they leave of one 600 s call.
Dry run here (scaled-down shapes and inputs on CPU, under a minute; also what a machine without CUDA gets):
    .venv/bin/python benchmarks/device/realsize.py --dry-run [--dtype bfloat16] [--inputs real]
Smoke run (the dry run's shapes with the smallest inputs, one round per case: a check that the script runs):
    .venv/bin/python benchmarks/device/realsize.py --smoke
Adapters (issue 32; `--adapters 8`, the default, 0 turns it off): after the cases, if the budget leaves 120 s (10 s
dry), 8 head-only adapters with random heads of the head's shape (the real 109 M-parameter head on the GPU) are
written, served beside the model (`EngineConfig(adapters=...)`, `start()` / `submit`), and a stream of case (a)'s
requests spread over all 8 is timed against the same stream all to one (realsize_adapters.py): one JSON line
(`"adapters_case": true`) and $OUT/realsize_adapters.json. A device call for it alone, after the wheels as above:
    python3 benchmarks/device/realsize.py --cases a --adapters 8 2>&1 | tee $OUT/realsize.txt
Quantization (issue 33; `--quantize none,int8,fp8,nf4,int4`, default none): each scheme in turn is built, its text
layers quantized in place by the libraries loading would use (`omni.model.quantize.quantize_built`: torchao's
`quantize_`, bitsandbytes' Linear4bit and `replace_parameter_4bit` for the fused experts), and the cases run on it
within an equal share of the budget left; each row names its scheme and the weights' GiB (memory allocated after
quantizing). A scheme this machine cannot run (int4 without CUDA, a library missing) is listed as skipped. For
bf16 vs int8 vs nf4 vs fp8 side by side on the H200, after the wheels (torchao and bitsandbytes among them) as above:
    python3 benchmarks/device/realsize.py --cases ad --adapters 0 --quantize none,int8,fp8,nf4 2>&1 | tee $OUT/q.txt

What it builds: the Qwen3-Omni-30B-A3B thinker with the released shapes (clef-reference §1.2, qwen-omni-notes §5:
48 MoE layers of hidden 2048, 128 experts top-8, vocab 152,064; the 27-block vision and 32-layer audio towers;
31.7 B parameters, 59 GiB in bf16) and the joint-schema head with the reference's presumed omni shapes (§1.4:
width 1024, 2 routing + 4 decoder layers, 16 heads, feedforward 4096; 109.2 M parameters), with random weights
made on the device (no download, no checkpoint files). Tokenizer and processor settings come from the tiny
checkpoint `omni.model.tiny.write_checkpoint` writes (small vocabulary, every Qwen special token); the thinker's
special-token ids are that tokenizer's, so every id it produces is a valid embedding row. The model is put together
as `ClefModel.load` would (lm_head swapped for the lexical table, strict shapes) and measured through
`DecisionEngine.decide(parse_request(body))`: media decoding, prompt encoding, the prefill, the head, the answers.

What it measures, per case (a)-(f): p50/p99 of end-to-end `decide` (CUDA-synchronised before and after; the
script also synchronises at the end of `model.probabilities` so the engine's own forward timing is real), the
engine's media / prompt / forward split, input and prefilled tokens, prefill tokens/s, an analytic FLOP count and
MFU against --peak-tflops, and peak GPU memory. Prefilled tokens and FLOPs count what the thinker's forwards were
given in the last timed round (`realsize_model.ForwardLog`, forward pre-hooks on `backbone.thinker.model`). Cold cases send a new state each round (prefix-cache miss) through
an engine whose media cache is off (every round decodes its media); case (f) repeats (d)'s state and video with new
questions through an engine with both caches on (media and prefix hits).

What it must not know: anything about answer quality (the weights are random: time only), the HTTP edge and the
micro-batcher (one request at a time, `decide`), the model's internals (it uses the engine's `decide` and
`Decision`, and the public `ClefModel` constructor, `Backbone` and `JointSchemaHead`), and any real checkpoint or
network.

Where things are (run as a script, its folder comes first on the import path: they import as top-level modules):
realsize_model.py holds the shapes, the random model and engines built on the device, and the clock (`log`);
realsize_flops.py the analytic FLOP model; realsize_report.py the result rows, the table and the report files. This
file keeps the flags, the plans, the inputs and cases, running them within the budget, and `main`.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from realsize_adapters import mixed_vs_one
from realsize_flops import FlopModel
from realsize_model import SHAPES, STARTED, ForwardLog, GiB, build_model, log, make_engine, real_shapes_on_meta, sync
from realsize_report import environment, result_row, write_report

from fixtures.media import image_bytes, video_bytes, wav_bytes
from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.model import quantize
from omni.model.clef import ClefModel
from omni.model.tiny import write_checkpoint
from omni.serve.engine import DecisionEngine
from preprocess.loader import load_processor_parts


@dataclass(frozen=True)
class Plan:
    """Input sizes and round counts of one run."""

    state_tokens: int = 300
    image_side: int = 1024             # a square photo; 1024 px -> 32 x 32 = 1,024 image tokens
    audio_seconds: float = 30.0
    video: tuple[float, int, int] = (21.0, 1280, 720)   # seconds, width, height (25 fps, H.264 + stereo AAC)
    long_state_tokens: int = 8000
    long_questions: int = 64
    rounds: dict = field(default_factory=lambda: {"a": 20, "b": 20, "c": 20, "d": 5, "e": 5, "f": 10})
    warmups: int = 2
    adapter_requests: int = 32         # the adapters case: requests per stream (case (a)'s text), and its rounds
    adapter_rounds: int = 3


PLANS = {"real": Plan(), "dry": Plan(image_side=512, audio_seconds=10.0, video=(4.0, 640, 360), long_state_tokens=1500,
                                     rounds=dict.fromkeys("abcdef", 3), warmups=1,
                                     adapter_requests=8, adapter_rounds=2),
         "smoke": Plan(state_tokens=60, image_side=128, audio_seconds=1.0, video=(1.0, 160, 96), long_state_tokens=200,
                       long_questions=6, rounds=dict.fromkeys("abcdef", 1), warmups=1, adapter_requests=4,
                       adapter_rounds=1)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Flags, with the defaults resolved: device, dry run (forced without CUDA), dtype, budget, output folder."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="scaled-down shapes and inputs (automatic without CUDA)")
    parser.add_argument("--smoke", action="store_true",
                        help="a check that the script runs: the dry run's shapes, the smallest inputs, one round each")
    parser.add_argument("--device", default="auto", help="auto: cuda if available, else cpu")
    parser.add_argument("--dtype", default="auto", help="thinker dtype; auto: bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--head-dtype", default=EngineConfig.head_dtype, help="the engine's default: float32")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak for MFU (H200: 989)")
    parser.add_argument("--budget-s", type=float, default=None, help="no new rounds after this (real 420, dry 600)")
    parser.add_argument("--rounds-scale", type=float, default=1.0, help="multiply every case's rounds")
    parser.add_argument("--cases", default="abcdef", help="which cases to run, e.g. abd")
    parser.add_argument("--inputs", choices=("auto", "real", "dry", "smoke"), default="auto",
                        help="input sizes and rounds; auto: those of the shapes (real inputs + dry shapes checks here "
                             "the real token counts and media times)")
    parser.add_argument("--adapters", type=int, default=8,
                        help="after the cases: N head-only adapters of the head's shape served beside the model, a "
                             "stream spread over them vs all to one (issue 32); 0: off")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="CPU threads for torch; default 0 (torch's own) with CUDA, 1 on CPU (a shared CPU stalls "
                             "spinning threads)")
    parser.add_argument("--quantize", default="none", type=schemes, metavar="SCHEMES",
                        help="comma list of --quantize schemes, each built, quantized and measured in turn (e.g. "
                             "none,int8,fp8,nf4; int4 needs CUDA); default none")
    parser.add_argument("--out", default=os.environ.get("OUT"), help="output folder (default $OUT, else a temp dir)")
    args = parser.parse_args(argv)
    args.device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    args.dry_run = args.dry_run or args.smoke
    if not args.device.startswith("cuda") and not args.dry_run:
        log("no CUDA device: running the dry run (scaled-down shapes and inputs)")
        args.dry_run = True
    args.size = "dry" if args.dry_run else "real"
    args.inputs = ("smoke" if args.smoke else args.size) if args.inputs == "auto" else args.inputs
    args.dtype = ("bfloat16" if args.device.startswith("cuda") else "float32") if args.dtype == "auto" else args.dtype
    if args.torch_threads is None:
        args.torch_threads = 0 if args.device.startswith("cuda") else 1
    args.budget_s = args.budget_s or (600.0 if args.dry_run else 420.0)
    args.out = Path(args.out or tempfile.mkdtemp(prefix="realsize-"))
    return args


def schemes(text: str) -> list[str]:
    """`none,int8,nf4` -> the schemes, each one of omni.model.quantize.SCHEMES (argparse's type)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in quantize.SCHEMES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma list of {', '.join(quantize.SCHEMES)}")
    return names


# --------------------------------------------------------------------------------------------------- the workload
FILLER = ("Customer reports that the rooftop unit at the north warehouse started rattling after the storm. The "
          "technician replaced the fan belt, checked the refrigerant pressure and cleaned the condenser coil. Orders "
          "for spare parts are stuck at checkout and the billing team has not answered the last two emails. ")


def state_text(tokenizer, tokens: int, nonce: str) -> str:
    """About `tokens` tokens of ticket text (the checkpoint's tokenizer), starting with `nonce`."""
    ids = tokenizer(FILLER * (tokens // 8 + 1), add_special_tokens=False)["input_ids"][:tokens]
    return f"Ticket {nonce}. " + tokenizer.decode(ids)


QUESTION_TEXT = {"noul": "Is the model and serial number label visible in the photo?",
                 "choice": "Which team should handle this?", "score": "How urgent is this?"}


def questions(n: int, tag: str) -> dict:
    """`n` questions cycling noul / choice / score (3 and 4 options); `tag` goes into every id and instruction, so
    a new tag makes new questions."""
    out = {}
    for k in range(n):
        kind = ("noul", "choice", "score")[k % 3]
        q = {"type": kind, "instructions": f"{tag} {k + 1}: {QUESTION_TEXT[kind]}"}
        if kind == "choice":
            q["criteria"] = {"billing": None, "technical": "Send a technician.", "sales": None}
        elif kind == "score":
            q["criteria"] = ["can wait", "this week", "today", "right now"]
        out[f"{tag}_{k + 1:02d}"] = q
    return out


def data_url(mime: str, data: bytes) -> str:
    """Bytes as the base64 data URL a System One body carries."""
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def make_media(plan: Plan) -> dict[str, str]:
    """The cases' media as data URLs (fixtures.media: real PNG, WAV, MP4 files)."""
    seconds, width, height = plan.video
    media = {"image": data_url("image/png", image_bytes("PNG", "RGB", plan.image_side, plan.image_side)),
             "audio": data_url("audio/wav", wav_bytes(plan.audio_seconds)),
             "video": data_url("video/mp4", video_bytes("mp4", "libx264", "aac", seconds, width, height, 25))}
    log("media: " + ", ".join(f"{k} {len(v) * 3 // 4 / 1e6:.2f} MB" for k, v in media.items()))
    return media


@dataclass
class Case:
    """One measured request kind."""

    key: str
    title: str
    body: Callable[[int], dict]       # round -> request body (negative rounds: warm-ups)
    rounds: int
    warm: bool = False                # through the engine with media + prefix caches on


def make_cases(plan: Plan, tokenizer, media: dict[str, str], selected: str, scale: float) -> list[Case]:
    """(a)-(f). Cold cases put the round into the state (a new prefix each time); (f) keeps (d)'s state and video and
    asks new questions each round."""
    seconds, width, height = plan.video
    short = "Review the installation: photo, recording and video of the unit."
    video_state = "Review the installation video of the fan and its sound."

    def body(state: str, tag: str, n: int = 5, **slots) -> dict:
        return {"state": state, "questions": questions(n, tag), **{k: [media[v]] for k, v in slots.items()}}

    def nonce(r: int) -> str:
        return f"{r + 100:04d}"

    specs = [
        ("a", f"text: {plan.state_tokens}-token state, 5 questions",
         lambda r: body(state_text(tokenizer, plan.state_tokens, nonce(r)), "a")),
        ("b", f"image: {plan.image_side}x{plan.image_side} photo, 5 questions",
         lambda r: body(f"Ticket {nonce(r)}. {short}", "b", images="image")),
        ("c", f"audio: {plan.audio_seconds:g} s clip, 5 questions",
         lambda r: body(f"Ticket {nonce(r)}. {short}", "c", audio="audio")),
        ("d", f"video: {seconds:g} s {width}x{height} with sound, 5 questions",
         lambda r: body(f"Ticket {nonce(r)}. {video_state}", "d", videos="video")),
        ("e", f"long: {plan.long_questions} questions over a {plan.long_state_tokens}-token state",
         lambda r: body(state_text(tokenizer, plan.long_state_tokens, nonce(r)), "e", plan.long_questions)),
        ("f", "video (d) warm: same state + video, new questions",
         lambda r: body(f"Ticket 0001. {video_state}", f"f{nonce(r)}", videos="video")),
    ]
    return [Case(key, title, make, max(1, round(plan.rounds[key] * scale)), warm=key == "f")
            for key, title, make in specs if key in selected]


# ---------------------------------------------------------------------------------------------------- measuring
def time_left(budget_s: float) -> float:
    """Seconds of the budget left (counted from the script's start)."""
    return budget_s - (time.monotonic() - STARTED)


def run_case(case: Case, engine: DecisionEngine, forwards: ForwardLog, flops: FlopModel, tokenizer, args,
             warmups: int) -> dict:
    """Warm up, then time `case.rounds` decides (fewer if the budget runs low); one result row. FLOPs and prefilled
    tokens: what the thinker's forwards were given in the last timed round."""
    device = args.device
    state_tokens = len(tokenizer(case.body(0)["state"], add_special_tokens=False)["input_ids"])
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    first = time.monotonic()
    for w in range(warmups):
        decision = engine.decide(parse_request(case.body(-1 - w), engine.config))
    sync(device)
    per_round = (time.monotonic() - first) / max(1, warmups)
    latencies, parts, caches, ran = [], {"decode": [], "encode": [], "forward": []}, set(), []
    for r in range(case.rounds):
        if time_left(args.budget_s) < 1.5 * per_round:
            break
        request = parse_request(case.body(r), engine.config)
        sync(device)
        forwards.recording()
        started = time.perf_counter()
        decision = engine.decide(request)
        sync(device)
        latencies.append(time.perf_counter() - started)
        ran = forwards.stop()
        per_round = max(per_round, latencies[-1])
        for key, values in parts.items():
            values.append(decision.timings_ms.get(key, 0.0))
        caches.add(",".join(f"{k}:{v}" for k, v in sorted(decision.cache.items())) or "off")
    total_flops, prefilled = flops.forwards(ran)
    return {**result_row(case, args, latencies, parts, caches, decision, total_flops, prefilled),
            "state_tokens": state_tokens}


# -------------------------------------------------------------------------------------------------------- the run
def build(args, directory: Path, scheme: str = "none") -> tuple[DecisionEngine, DecisionEngine, FlopModel, ForwardLog,
                                                                dict, object]:
    """The random model (its text layers quantized with `scheme`), the cold and warm engines, the FLOP model, the
    forward log, the environment line and the checkpoint's tokenizer."""
    parts = load_processor_parts(write_checkpoint(directory))
    started = time.monotonic()
    backbone, head = build_model(args, SHAPES[args.size], parts)
    quantize.quantize_built(backbone.thinker, scheme, backbone.dtype)     # the libraries loading would use
    backbone.quantization = scheme
    build_s = time.monotonic() - started
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
        weights = torch.cuda.memory_allocated() / GiB
    else:
        weights = quantize.weight_bytes(backbone.thinker) / GiB
    flops = FlopModel(backbone.thinker, head, backbone.lexical_table)
    forwards = ForwardLog(backbone.thinker.model)
    base = EngineConfig(device=args.device, dtype=args.dtype, head_dtype=args.head_dtype,
                        torch_threads=args.torch_threads)
    try:   # the engine's own warm-up request is the first forward: the one place a kernel choice can fail
        cold = make_engine(backbone, head, parts, directory, replace(base, media_cache_mb=0), args.device)
    except Exception:   # noqa: BLE001 - one fallback, then whatever happens is reported
        traceback.print_exc()
        log("the first forward failed: retrying once with experts_implementation='eager' (a loop over experts)")
        backbone.thinker.set_experts_implementation("eager")
        cold = make_engine(backbone, head, parts, directory, replace(base, media_cache_mb=0), args.device)
    warm = make_engine(backbone, head, parts, directory, base, args.device)
    env = {**environment(args, flops, backbone, build_s, weights), "quantize": scheme}
    log(f"built in {build_s:.1f} s: {json.dumps(env)}")
    return cold, warm, flops, forwards, env, parts.tokenizer


def run_all(cases: list[Case], cold: DecisionEngine, warm: DecisionEngine, flops: FlopModel, forwards: ForwardLog,
            tokenizer, env: dict, args, warmups: int) -> tuple[list[dict], list[str]]:
    """Every case in turn while the budget lasts; a JSON line and rewritten reports after each. A case that fails is
    reported and skipped (the device run happens once: one failure must not cost the other cases)."""
    rows, skipped = [], []
    for case in cases:
        if time_left(args.budget_s) < (5 if args.dry_run else 20):
            skipped.append(f"({case.key}) entirely (budget)")
            log(f"({case.key}) skipped: budget")
            continue
        log(f"({case.key}) {case.title}: {warmups + case.warm} warm-up + {case.rounds} rounds")
        try:
            row = run_case(case, warm if case.warm else cold, forwards, flops, tokenizer, args, warmups + case.warm)
        except Exception as exc:   # noqa: BLE001 - reported, and the remaining cases still run
            traceback.print_exc()
            skipped.append(f"({case.key}) failed: {type(exc).__name__}: {exc}")
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
            continue
        if row["rounds"] < case.rounds:
            skipped.append(f"({case.key}) {case.rounds - row['rounds']} of {case.rounds} rounds (budget)")
        rows.append(row)
        print(json.dumps(row), flush=True)
        write_report(args.out, env, rows, skipped)
    return rows, skipped


def run_adapters(cold: DecisionEngine, tokenizer, plan: Plan, args, directory: Path) -> dict | None:
    """The adapters case (realsize_adapters.mixed_vs_one) on the cold engine's model, if the budget leaves time for
    writing and loading the adapters (each head is 0.4 GB at real size); a JSON line and realsize_adapters.json."""
    if time_left(args.budget_s) < (10 if args.dry_run else 120):
        log("adapters case skipped: budget")
        return None
    model = cold.model
    assert isinstance(model, ClefModel)

    def engine_for(config: EngineConfig) -> DecisionEngine:
        return make_engine(model.backbone, model.head, model.parts, directory, config, args.device)

    def body(r: int) -> dict:
        return {"state": state_text(tokenizer, plan.state_tokens, f"adapters {r}"), "questions": questions(5, "g")}

    log(f"adapters: {args.adapters} head-only, {plan.adapter_requests} requests a stream, "
        f"{plan.adapter_rounds} rounds")
    try:
        row = mixed_vs_one(cold, engine_for, body, directory / "adapters", args.adapters, plan.adapter_requests,
                           plan.adapter_rounds)
    except Exception as exc:   # noqa: BLE001 - reported; the cases above are already written
        traceback.print_exc()
        row = {"adapters": args.adapters, "failed": f"{type(exc).__name__}: {exc}"}
    row = {"adapters_case": True, "size": args.size, "device": args.device, **row}
    print(json.dumps(row), flush=True)
    (args.out / "realsize_adapters.json").write_text(json.dumps(row, indent=1) + "\n")
    return row


def usable_here(scheme: str, device: str) -> str | None:
    """Why `scheme` is skipped on `device` (its library missing, or a GPU it needs), None when it runs."""
    try:
        quantize.check_usable(scheme, device)
    except quantize.QuantizationError as exc:
        log(f"[{scheme}] skipped: {exc}")
        return f"[{scheme}] entirely: {exc}"
    return None


def share_of_budget(budget_s: float, schemes_left: int) -> float:
    """The budget deadline for the next scheme: an equal share of the time left among the schemes still to run."""
    return budget_s - time_left(budget_s) + time_left(budget_s) / max(1, schemes_left)


def free(device: str) -> None:
    """Let a scheme's model go before the next is built (its engines are the last references)."""
    import gc

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    """Build, run every case, print and write the report."""
    args = parse_args(argv)
    plan = PLANS[args.inputs]
    log(f"{args.size} shapes, {args.inputs} inputs on {args.device} ({args.dtype}); budget {args.budget_s:g} s; "
        f"output {args.out}")
    if args.dry_run:
        real_shapes_on_meta()
    rows: list[dict] = []
    skipped = [why for why in map(usable_here, args.quantize, [args.device] * len(args.quantize)) if why]
    runnable = [scheme for scheme in args.quantize if not any(why.startswith(f"[{scheme}]") for why in skipped)]
    with tempfile.TemporaryDirectory(prefix="realsize-ckpt-") as tmp:
        for number, scheme in enumerate(runnable):
            cold, warm, flops, forwards, env, tokenizer = build(args, Path(tmp), scheme)
            cases = make_cases(plan, tokenizer, make_media(plan), args.cases, args.rounds_scale)
            budget, args.budget_s = args.budget_s, share_of_budget(args.budget_s, len(runnable) - number)
            scheme_rows, scheme_skipped = run_all(cases, cold, warm, flops, forwards, tokenizer, env, args,
                                                  plan.warmups)
            args.budget_s = budget
            rows += [{**row, "quantize": scheme, "weights_gib": env["weights_gib"]} for row in scheme_rows]
            skipped += [f"[{scheme}] {line}" for line in scheme_skipped]
            print(write_report(args.out, env, rows, skipped), flush=True)
            if args.adapters and number == 0:
                run_adapters(cold, tokenizer, plan, args, Path(tmp))
            del cold, warm, forwards
            free(args.device)
    log(f"done in {time.monotonic() - STARTED:.0f} s; wrote {args.out / 'realsize.json'} and "
        f"{args.out / 'realsize.md'}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
