"""onepass: what answering N typed questions in ONE prefill buys over the two obvious alternatives.

For 1, 8 and 64 moderation-style questions (a mix of noul / choice / score) about one ~500-token state, on a small
random Qwen3-Omni MoE checkpoint written by `omni.model.tiny.write_checkpoint` into a temp dir, it times

  (a) joint   — one `DecisionEngine.decide` with every question (the product path: one prefill + the joint head);
  (b) split   — one `decide` per question, each request holding that question alone (the honest per-question
                baseline: same state, same prompt style, one prefill each);
  (c) json    — the same prompt ending with an instruction to answer as a JSON object, one prefill with a KV cache,
                then greedy decoding with the thinker's own LM head for exactly as many tokens as the JSON answer
                object needs (counted with the checkpoint's tokenizer, plus <|im_end|>), in plain transformers (the
                same weights loaded on their own, stock SDPA attention). The random model neither writes valid JSON
                nor stops, so the token count is fixed in advance.

and prints JSON lines, a stage breakdown (prompt encoding, backbone, head, the rest; prefill vs decode for (c)), a
multiply-accumulate model of the same three workloads, and a table of the ratios (b)/(a) and (c)/(a), all measured in
the same run. Rounds interleave (a, b, c, a, b, c, ...) so load from other processes on a shared CPU hits all three
alike; the headline is the best round (noise only ever adds time), the median is printed beside it.

The engine runs with its media and prefix caches off: every `decide` prefills its whole prompt, which is what (b)
stands for (with the prefix cache on, (b)'s passes would share the state's prefix and (a)'s repeated rounds would hit
it; benchmarks/cache.py measures that).

What it must not know: the answers' meaning (the weights are random, so only time is measured, never quality), the
serving path (HTTP, admission, micro-batcher), any real checkpoint, and the model's internals. (a) and (b) go only
through the public `DecisionEngine.decide`; their stages come from what the engine reports (`Decision.timings_ms`:
decode, encode, forward) plus the time the thinker's transformer spends inside that forward, read by torch forward
hooks on `engine.model.backbone.thinker.model` (transformers' module, which every prefill goes through): head =
forward - backbone. Token counts come from `engine.model.prepare(request).num_tokens`. (c) is transformers' own API
on the checkpoint's thinker loaded on its own (its lm_head checked equal to `backbone.lexical_table`) with a
`DynamicCache`; its prompt is built by `omni.model.prompt.PromptEncoder` with the checkpoint's tokenizer (loaded here
with `AutoTokenizer`), checked to have as many tokens as the engine's prompt. Beside this script: the workload and
the MAC model in `onepass_workload.py`, (c) in `onepass_json.py`, the JSON lines and tables in `onepass_report.py`.

    .venv/bin/python benchmarks/onepass.py [--counts 1,8,64] [--repeats 3] [--max-rounds 15] [--budget-s 10]
                                           [--threads 1] [--state-tokens 500] [--no-torch-profile] [--smoke]

About 3-5 minutes on a shared 2-core CPU, most of it the 64-question rounds (mostly (c)'s 1,167 decode steps).
`--smoke`: the same code path at tiny sizes (1 and 2 questions, a ~60-token state, 3 rounds, no waiting for quiet),
a few seconds after the imports; its figures mean nothing.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from onepass_json import JsonGenerator
from onepass_report import emit, machine, print_tables, result_row
from onepass_workload import AREAS, HEAD, TEXT, build_state, json_answer, moderation_body, state_sweep
from smoke import parse_with_smoke
from tqdm import tqdm

from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.contract.types import DecisionRequest
from omni.model.prompt import PromptEncoder
from omni.model.tiny import write_checkpoint
from omni.serve.engine import DecisionEngine

MAX_CONTEXT_TOKENS = 64_000
# --smoke: the same code path at tiny sizes (explicit flags still win)
SMOKE = {"counts": "1,2", "repeats": 3, "max_rounds": 3, "budget_s": 0.0, "state_tokens": 60, "quiet_wait_s": 0.0,
         "quiet_budget_s": 0.0}


# ----------------------------------------------------------------------------------------- what the engine reports
class BackboneClock:
    """Milliseconds spent inside the thinker's transformer (`backbone.thinker.model`, transformers' module that every
    prefill, chunk and continuation calls), read by torch forward hooks while `measuring()`; a pure observer."""

    def __init__(self, module: torch.nn.Module):
        self.ms = 0.0
        self.active = False
        self.entered: float | None = None
        module.register_forward_pre_hook(self.enter)
        module.register_forward_hook(self.leave)

    def enter(self, module, args) -> None:
        if self.active:
            self.entered = time.perf_counter()

    def leave(self, module, args, output) -> None:
        if self.active and self.entered is not None:
            self.ms += (time.perf_counter() - self.entered) * 1e3
            self.entered = None

    @contextmanager
    def measuring(self):
        """Count from zero for the block's duration."""
        self.ms, self.active = 0.0, True
        try:
            yield self
        finally:
            self.active = False


def engine_split(total_ms: float, decisions, backbone_ms: float) -> dict[str, float]:
    """A timed call's stages from the engine's own timings: encode (media + prompt), forward (the model's turn,
    chunks included) = backbone (measured inside it) + head (collate, head, softmax), other (answers, the rest)."""
    encode = sum(d.timings_ms.get("encode", 0.0) + d.timings_ms.get("decode", 0.0) for d in decisions)
    forward = sum(d.timings_ms["forward"] + d.timings_ms.get("prefill_chunks", 0.0) for d in decisions)
    return {"total": total_ms, "encode": encode, "forward": forward, "backbone": backbone_ms,
            "head": forward - backbone_ms, "other": total_ms - encode - forward}


# ------------------------------------------------------------------------------------------------- the three modes
def joint(engine: DecisionEngine, request: DecisionRequest):
    """(a): one `decide` with every question."""
    return engine.decide(request)


def split(engine: DecisionEngine, singles: list[DecisionRequest], per_pass_ms: list[float] | None = None):
    """`singles` holds one request per question (built outside the timing: same state, that question alone)."""
    decisions = []
    for r in singles:
        started = time.perf_counter()
        decisions.append(engine.decide(r))
        if per_pass_ms is not None:
            per_pass_ms.append((time.perf_counter() - started) * 1e3)
    return decisions


def torch_profile(engine: DecisionEngine, request: DecisionRequest, top: int = 8) -> list[dict]:
    """Top ops by self CPU time for one joint decide."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        engine.decide(request)
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return [{"op": e.key, "self_ms": round(e.self_cpu_time_total / 1e3, 2), "calls": e.count} for e in events]


# ------------------------------------------------------------------------------------------------------- timing
def timed(fn, *args):
    """Call `fn(*args)` -> (milliseconds it took, its result)."""
    started = time.perf_counter()
    result = fn(*args)
    return (time.perf_counter() - started) * 1e3, result


def _cpu_times() -> tuple[int, int]:
    """Jiffies since boot from /proc/stat: (all, idle + iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields), fields[3] + fields[4]                     # total, idle + iowait


def wait_for_quiet(max_wait_s: float, busy_limit: float = 0.3, sample_s: float = 0.4) -> float:
    """Wait (at most `max_wait_s`) until the other processes leave the CPUs mostly idle; returns seconds waited.

    Called between rounds, while this process is idle, so whatever /proc/stat counts as busy is someone else.
    """
    if max_wait_s <= 0 or not Path("/proc/stat").exists():
        return 0.0
    started = time.perf_counter()
    while True:
        total0, idle0 = _cpu_times()
        time.sleep(sample_s)
        total1, idle1 = _cpu_times()
        busy = 1.0 - (idle1 - idle0) / max(1, total1 - total0)
        waited = time.perf_counter() - started
        if busy <= busy_limit or waited >= max_wait_s:
            return waited


class QuietWait:
    """`wait_for_quiet` before each round, at most `per_wait_s` each time and `budget_s` over the whole run."""

    def __init__(self, per_wait_s: float, budget_s: float):
        self.per_wait_s = per_wait_s
        self.left = budget_s

    def __call__(self) -> float:
        waited = wait_for_quiet(min(self.per_wait_s, self.left))
        self.left -= waited
        return waited


# ------------------------------------------------------------------------------------------------------- setup
def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[int]]:
    """The command line -> (flags, question counts); exits with a usage error on bad values. With --smoke the
    SMOKE sizes are the defaults (flags given explicitly still win)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,8,64", help="question counts, comma-separated")
    parser.add_argument("--repeats", type=int, default=3,
                        help="least timed rounds per count (best and median reported)")
    parser.add_argument("--max-rounds", type=int, default=15, help="most timed rounds per count")
    parser.add_argument("--budget-s", type=float, default=10.0,
                        help="keep adding rounds (up to --max-rounds) while a count has run for less than this")
    parser.add_argument("--state-tokens", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads; 0 = torch's default (one per core). 1 by default: on a shared "
                             "2-core machine two intra-op threads stall on each other whenever another process runs, "
                             "and rounds swing 5-20x; one thread keeps a, b and c comparable")
    parser.add_argument("--quiet-wait-s", type=float, default=15.0,
                        help="before each round wait up to this long for other processes to leave the CPUs idle")
    parser.add_argument("--quiet-budget-s", type=float, default=60.0, help="most waiting for quiet in the whole run")
    parser.add_argument("--no-torch-profile", action="store_true", help="skip the torch.profiler op table")
    args = parse_with_smoke(parser, SMOKE, argv)
    counts = [int(c) for c in args.counts.split(",")]
    if args.repeats < 3:
        parser.error("--repeats must be at least 3")
    if min(counts) < 1 or max(counts) > 4 * len(AREAS):
        parser.error(f"question counts must lie in 1..{4 * len(AREAS)}")
    return args, counts


def load_engine(tmp: Path, seed: int, started: float) -> tuple[DecisionEngine, PromptEncoder, Path]:
    """Write the random checkpoint into `tmp`, load an engine on it (caches off), check its shapes and emit them;
    also the reference prompt encoder with the checkpoint's own tokenizer (for (c) and the schema's length)."""
    from transformers import AutoTokenizer

    directory = write_checkpoint(tmp / "ckpt", seed=seed, text=TEXT, head=HEAD)
    engine = DecisionEngine(EngineConfig(model_path=str(directory), max_context_tokens=MAX_CONTEXT_TOKENS,
                                         media_cache_mb=0, prefix_cache_mb=0)).load()
    encoder = PromptEncoder(AutoTokenizer.from_pretrained(directory, local_files_only=True), MAX_CONTEXT_TOKENS)
    text_config = engine.model.backbone.thinker.config.text_config
    loaded = {k: getattr(text_config, k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                   "num_key_value_heads", "head_dim", "num_experts",
                                                   "num_experts_per_tok", "moe_intermediate_size", "vocab_size")}
    loaded["mrope_section"] = text_config.rope_parameters["mrope_section"]
    head = engine.model.head
    loaded_head = {"width": head.width, "routing_layers": len(head.evidence_layers), "layers": len(head.layers)}
    assert all(loaded[k] == v for k, v in TEXT.items() if k in loaded), (loaded, TEXT)
    assert loaded_head["width"] == HEAD["width"] and loaded_head["layers"] == HEAD["layers"]
    emit({"event": "checkpoint", "backbone": loaded, "head": loaded_head,
          "parameters_m": round(sum(p.numel() for p in engine.model.backbone.thinker.model.language_model
                                    .parameters()) / 1e6, 2),
          "setup_s": round(time.perf_counter() - started, 2)})
    return engine, encoder, directory


@dataclass
class Setup:
    """What every count shares: the moderation state, the largest request, the (c) generator, the backbone clock."""

    state: dict
    state_tokens: int
    full: DecisionRequest
    generator: JsonGenerator
    clock: BackboneClock

    def request(self, n: int) -> DecisionRequest:
        """The joint request: the same state with the first `n` questions."""
        return DecisionRequest(state=self.state, questions=self.full.questions[:n], model=self.full.model)


def build_setup(engine: DecisionEngine, encoder: PromptEncoder, directory: Path, state_tokens: int,
                most: int) -> Setup:
    """Build the ~`state_tokens` state and the request with `most` questions; emit the workload line."""
    state, state_tokens = build_state(encoder.tokenizer, state_tokens)
    full = parse_request({**moderation_body(most), "state": state}, engine.config)
    emit({"event": "workload", "state_tokens": state_tokens, "messages": len(state["messages"]),
          "question_types": {t: sum(q.type == t for q in full.questions) for t in ("noul", "choice", "score")}})
    return Setup(state, state_tokens, full, JsonGenerator(engine, encoder, directory),
                 BackboneClock(engine.model.backbone.thinker.model))


def warm_up(engine: DecisionEngine, setup: Setup, counts: list[int]) -> None:
    """Every mode once on the smallest and largest request (allocator, sdpa and MoE paths); nothing is kept."""
    for n in sorted({min(counts), max(counts)}):
        request = setup.request(n)
        joint(engine, request)
        split(engine, [setup.request(1)])
        setup.generator(request, 8)


# --------------------------------------------------------------------------------------------------- one count
@dataclass
class Workload:
    """One count's requests (joint and one per question) and each mode's token counts, built outside the timing."""

    request: DecisionRequest
    singles: list[DecisionRequest]
    answer_text: str
    n_new: int
    tokens_a: int
    tokens_b: list[int]
    tokens_c: int


def count_workload(engine: DecisionEngine, setup: Setup, n: int) -> Workload:
    """The requests and token counts of (a), (b) and (c) for `n` questions; (c)'s prompt is checked to differ from
    the engine's only by its ending."""
    request = setup.request(n)
    singles = [DecisionRequest(state=setup.state, questions=(q,), model=setup.full.model) for q in request.questions]
    answer_text = json_answer(request.questions)
    generator = setup.generator
    n_new = len(generator.encoder.tokenizer(answer_text, add_special_tokens=False)["input_ids"]) + 1  # + <|im_end|>
    tokens_a = engine.model.prepare(request).num_tokens
    tokens_c = len(generator.prompt_ids(request))
    ending = len(generator.instruction_ids) - len(generator.encoder.suffix_ids)
    assert tokens_c == tokens_a + ending, f"(c)'s prompt ({tokens_c}) is not the engine's ({tokens_a}) re-ended"
    return Workload(request=request, singles=singles, answer_text=answer_text, n_new=n_new, tokens_a=tokens_a,
                    tokens_b=[engine.model.prepare(r).num_tokens for r in singles], tokens_c=tokens_c)


@dataclass
class Rounds:
    """The timed rounds of one count: ms per mode, (c)'s stage times, (b)'s per-pass ms, the engine's splits."""

    load_before: float
    times: dict[str, list[float]]
    gen: list[dict]
    per_pass: list[list[float]]
    split_a: list[dict[str, float]]
    split_b: list[dict[str, float]]
    waited: float = 0.0


def run_rounds(engine: DecisionEngine, setup: Setup, work: Workload, args: argparse.Namespace,
               quiet: QuietWait) -> Rounds:
    """Rounds interleaving a, b, c: at least --repeats of them, more while this count is under --budget-s."""
    rounds = Rounds(load_before=os.getloadavg()[0], times={"a": [], "b": [], "c": []}, gen=[], per_pass=[],
                    split_a=[], split_b=[])
    times, clock = rounds.times, setup.clock
    count_started = time.perf_counter()
    progress = tqdm(desc=f"{len(work.request.questions):>2} questions", unit="round", file=sys.stderr, leave=False,
                    total=args.max_rounds)
    while len(times["a"]) < args.repeats or (len(times["a"]) < args.max_rounds
                                              and time.perf_counter() - count_started < args.budget_s):
        rounds.waited += quiet()
        with clock.measuring():
            ms, decision = timed(joint, engine, work.request)
        times["a"].append(ms)
        rounds.split_a.append(engine_split(ms, [decision], clock.ms))
        rounds.per_pass.append([])
        with clock.measuring():
            ms, decisions = timed(split, engine, work.singles, rounds.per_pass[-1])
        times["b"].append(ms)
        rounds.split_b.append(engine_split(ms, decisions, clock.ms))
        started_c = time.perf_counter()
        rounds.gen.append(setup.generator(work.request, work.n_new))
        times["c"].append((time.perf_counter() - started_c) * 1e3)
        progress.update()
        progress.set_postfix(a=f"{min(times['a']):.0f}ms", b=f"{min(times['b']):.0f}ms", c=f"{min(times['c']):.0f}ms")
    progress.close()
    return rounds


def measure_count(engine: DecisionEngine, setup: Setup, n: int, args: argparse.Namespace,
                  quiet: QuietWait) -> dict:
    """Time (a), (b), (c) for `n` questions, emit the result line and return it."""
    work = count_workload(engine, setup, n)
    rounds = run_rounds(engine, setup, work, args, quiet)
    schema_chars = sum(len(text) for q in work.request.questions
                       for _, text in setup.generator.encoder.schema_segments((q,)))
    row = result_row(work, rounds, schema_chars, engine.model.backbone.thinker.config.text_config.vocab_size)
    emit(row)
    return {**row, "_tokens_b": work.tokens_b}


# ---------------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    """Load the random checkpoint, measure every count, emit the JSON lines, then print the tables."""
    args, counts = parse_args(argv)
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    info = machine()
    emit({"event": "machine", **info, "smoke": args.smoke})
    quiet = QuietWait(args.quiet_wait_s, args.quiet_budget_s)

    with tempfile.TemporaryDirectory(prefix="onepass-") as tmp:
        started = time.perf_counter()
        engine, encoder, directory = load_engine(Path(tmp), args.seed, started)
        setup = build_setup(engine, encoder, directory, args.state_tokens, max(counts))
        warm_up(engine, setup, counts)
        rows = [measure_count(engine, setup, n, args, quiet) for n in counts]
        vocab_size = engine.model.backbone.thinker.config.text_config.vocab_size
        emit({"event": "mac_model_state_sweep", "questions": rows[-1]["questions"],
              "rows": state_sweep(rows[-1], setup.state_tokens, vocab_size)})
        if not args.no_torch_profile:
            emit({"event": "torch_profile", "questions": max(counts),
                  "top_self_cpu": torch_profile(engine, setup.request(max(counts)))})
        emit({"event": "done", "loadavg": [round(x, 2) for x in os.getloadavg()],
              "total_s": round(time.perf_counter() - started, 1)})

    print_tables(info, setup.state_tokens, rows)


if __name__ == "__main__":
    main()
