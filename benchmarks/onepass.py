"""onepass: what answering N typed questions in ONE prefill buys over the two obvious alternatives.

For 1, 8 and 64 moderation-style questions (a mix of noul / choice / score) about one ~500-token state, on a small
random Qwen3-Omni MoE checkpoint written by `omni.model.tiny.write_checkpoint` into a temp dir, it times

  (a) joint   — one `DecisionEngine.decide` with every question (the product path: one prefill + the joint head);
  (b) split   — one `decide` per question, each request holding that question alone (the honest per-question
                baseline: same state, same prompt style, one prefill each);
  (c) json    — the same prompt ending with an instruction to answer as a JSON object, one prefill with a KV cache,
                then greedy decoding with the backbone's own LM head (the kept `lexical_table`) for exactly as many
                tokens as the JSON answer object needs (counted with the checkpoint's tokenizer, plus <|im_end|>).
                The random model neither writes valid JSON nor stops, so the token count is fixed in advance.

and prints JSON lines, a stage breakdown (prompt encoding, backbone, head, answers; prefill vs decode for (c)), a
multiply-accumulate model of the same three workloads, and a table of the ratios (b)/(a) and (c)/(a), all measured in
the same run. Rounds interleave (a, b, c, a, b, c, ...) so load from other processes on a shared CPU hits all three
alike; the headline is the best round (noise only ever adds time), the median is printed beside it.

What it must not know: the answers' meaning (the weights are random, so only time is measured, never quality), the
serving path (HTTP, admission, micro-batcher) and any real checkpoint. (a) and (b) go only through the public
`DecisionEngine.decide`; only (c), the stage breakdown and the bookkeeping outside the timing (token counts through
`engine.model.prepare`, the loaded checkpoint's shapes) reach into `engine.model` for pieces the engine has no public
door to (the thinker with a cache, the lexical table, the head alone). The workload and the MAC model live in
`onepass_workload.py`, the JSON lines and tables in `onepass_report.py` (both beside this script).

    .venv/bin/python benchmarks/onepass.py [--counts 1,8,64] [--repeats 3] [--max-rounds 15] [--budget-s 10]
                                           [--threads 1] [--state-tokens 500] [--no-torch-profile]

About 3-5 minutes on a shared 2-core CPU, most of it the 64-question rounds (mostly (c)'s 1,167 decode steps).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from onepass_report import emit, machine, print_tables, result_row
from onepass_workload import AREAS, HEAD, JSON_INSTRUCTION, TEXT, build_state, json_answer, moderation_body, state_sweep
from tqdm import tqdm

from omni.contract.answers import build_answers
from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.contract.types import DecisionRequest
from omni.model.head import option_probabilities
from omni.model.tiny import write_checkpoint
from omni.serve.engine import DecisionEngine


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


class JsonGenerator:
    """(c): prefill the JSON-instruction prompt with a KV cache, then greedy-decode `n_new` tokens."""

    def __init__(self, engine: DecisionEngine):
        from transformers.cache_utils import DynamicCache

        self.cache_class = DynamicCache
        self.encoder = engine.model.prompt_encoder
        self.tokenizer = engine.model.parts.tokenizer
        self.backbone = engine.model.backbone
        self.text_model = self.backbone.thinker.model          # embeddings + decoder + final norm
        self.lm_head = self.backbone.lexical_table             # [V, H]; thinker.lm_head is Identity in the engine
        self.instruction_ids = self.tokenizer(JSON_INSTRUCTION, add_special_tokens=False)["input_ids"]

    def prompt_ids(self, request: DecisionRequest) -> list[int]:
        """The engine's prompt for `request` with its answer suffix replaced by the JSON instruction."""
        ids = self.encoder.encode(request).input_ids
        suffix = list(self.encoder.suffix_ids)
        assert ids[-len(suffix):] == suffix, "the reference prompt no longer ends with its suffix"
        return ids[:-len(suffix)] + self.instruction_ids

    @torch.inference_mode()
    def __call__(self, request: DecisionRequest, n_new: int) -> dict:
        """Encode, prefill and decode `n_new` tokens -> token counts, ids, text and the three stage times in ms."""
        t0 = time.perf_counter()
        ids = self.prompt_ids(request)
        device = self.backbone.device
        length = len(ids)
        mask = torch.ones(1, length + n_new, dtype=torch.long, device=device)
        cache = self.cache_class(config=self.backbone.thinker.config.text_config)
        positions = torch.arange(length, device=device).view(1, 1, -1).expand(3, 1, -1)
        t1 = time.perf_counter()
        out = self.text_model(input_ids=torch.tensor([ids], device=device), attention_mask=mask[:, :length],
                              position_ids=positions, past_key_values=cache, use_cache=True)
        token = F.linear(out.last_hidden_state[:, -1], self.lm_head).argmax(-1)      # logits of the last position only
        generated = [int(token)]
        t2 = time.perf_counter()
        for step in range(1, n_new):                          # the token fed here sits at index length + step - 1
            out = self.text_model(input_ids=token.view(1, 1), attention_mask=mask[:, :length + step],
                                  position_ids=torch.full((3, 1, 1), length + step - 1, device=device),
                                  past_key_values=cache, use_cache=True)
            token = F.linear(out.last_hidden_state[:, -1], self.lm_head).argmax(-1)
            generated.append(int(token))
        text = self.tokenizer.decode(generated)
        t3 = time.perf_counter()
        assert cache.get_seq_length() == length + n_new - 1
        return {"prompt_tokens": length, "new_tokens": len(generated), "token_ids": generated, "text": text,
                "encode_ms": (t1 - t0) * 1e3, "prefill_ms": (t2 - t1) * 1e3, "decode_ms": (t3 - t2) * 1e3}


# ------------------------------------------------------------------------------------------------ stage breakdown
@torch.inference_mode()
def staged_decide(engine: DecisionEngine, request: DecisionRequest) -> dict[str, float]:
    """`engine.decide` cut into its stages (same calls as DecisionEngine._run / ClefModel.logits), in ms."""
    model = engine.model
    t0 = time.perf_counter()
    record = engine.model.prepare(request)
    t1 = time.perf_counter()
    batch = model.backbone.collate([(record.input_ids, record.position_ids, record.media.tensors)])
    hidden = model.backbone.hidden_states(batch)
    t2 = time.perf_counter()
    logits = model.head(hidden[0], record.input_ids, model.backbone.lexical_table, record.prompt.spans)
    t3 = time.perf_counter()
    probabilities = option_probabilities(logits)
    build_answers(request.questions, [p.tolist() for p in probabilities], confidence=engine.config.confidence,
                  decimals=engine.config.probability_decimals)
    t4 = time.perf_counter()
    return {"prepare": (t1 - t0) * 1e3, "backbone": (t2 - t1) * 1e3, "head": (t3 - t2) * 1e3,
            "answers": (t4 - t3) * 1e3, "tokens": record.num_tokens}


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


def engine_split(total_ms: float, decisions) -> dict[str, float]:
    """The engine's own timings of a timed call: encode (media + prompt), forward (backbone + head), other."""
    encode = sum(d.timings_ms.get("encode", 0.0) + d.timings_ms.get("decode", 0.0) for d in decisions)
    forward = sum(d.timings_ms["forward"] for d in decisions)
    return {"total": total_ms, "encode": encode, "forward": forward, "other": total_ms - encode - forward}


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
def parse_args() -> tuple[argparse.Namespace, list[int]]:
    """The command line -> (flags, question counts); exits with a usage error on bad values."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,8,64", help="question counts, comma-separated")
    parser.add_argument("--repeats", type=int, default=3,
                        help="least timed rounds per count (best and median reported)")
    parser.add_argument("--max-rounds", type=int, default=15, help="most timed rounds per count")
    parser.add_argument("--budget-s", type=float, default=10.0,
                        help="keep adding rounds (up to --max-rounds) while a count has run for less than this")
    parser.add_argument("--state-tokens", type=int, default=500)
    parser.add_argument("--breakdown-runs", type=int, default=3, help="untimed staged runs per count (minimum kept)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads; 0 = torch's default (one per core). 1 by default: on a shared "
                             "2-core machine two intra-op threads stall on each other whenever another process runs, "
                             "and rounds swing 5-20x; one thread keeps a, b and c comparable")
    parser.add_argument("--quiet-wait-s", type=float, default=15.0,
                        help="before each round wait up to this long for other processes to leave the CPUs idle")
    parser.add_argument("--quiet-budget-s", type=float, default=60.0, help="most waiting for quiet in the whole run")
    parser.add_argument("--no-torch-profile", action="store_true", help="skip the torch.profiler op table")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    if args.repeats < 3:
        parser.error("--repeats must be at least 3")
    if min(counts) < 1 or max(counts) > 4 * len(AREAS):
        parser.error(f"question counts must lie in 1..{4 * len(AREAS)}")
    return args, counts


def load_engine(tmp: Path, seed: int, started: float) -> DecisionEngine:
    """Write the random checkpoint into `tmp`, load an engine on it, check its shapes and emit them."""
    directory = write_checkpoint(tmp / "ckpt", seed=seed, text=TEXT, head=HEAD)
    engine = DecisionEngine(EngineConfig(model_path=str(directory), max_context_tokens=64_000)).load()
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
    return engine


@dataclass
class Setup:
    """What every count shares: the moderation state, the largest request, and the (c) generator."""

    state: dict
    state_tokens: int
    full: DecisionRequest
    generator: JsonGenerator

    def request(self, n: int) -> DecisionRequest:
        """The joint request: the same state with the first `n` questions."""
        return DecisionRequest(state=self.state, questions=self.full.questions[:n], model=self.full.model)


def build_setup(engine: DecisionEngine, state_tokens: int, most: int) -> Setup:
    """Build the ~`state_tokens` state and the request with `most` questions; emit the workload line."""
    state, state_tokens = build_state(engine.model.parts.tokenizer, state_tokens)
    full = parse_request({**moderation_body(most), "state": state}, engine.config)
    generator = JsonGenerator(engine)
    emit({"event": "workload", "state_tokens": state_tokens, "messages": len(state["messages"]),
          "question_types": {t: sum(q.type == t for q in full.questions) for t in ("noul", "choice", "score")}})
    return Setup(state, state_tokens, full, generator)


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
    """The requests and token counts of (a), (b) and (c) for `n` questions."""
    request = setup.request(n)
    singles = [DecisionRequest(state=setup.state, questions=(q,), model=setup.full.model) for q in request.questions]
    answer_text = json_answer(request.questions)
    tokenizer = engine.model.parts.tokenizer
    n_new = len(tokenizer(answer_text, add_special_tokens=False)["input_ids"]) + 1   # + <|im_end|>
    return Workload(request=request, singles=singles, answer_text=answer_text, n_new=n_new,
                    tokens_a=engine.model.prepare(request).num_tokens,
                    tokens_b=[engine.model.prepare(r).num_tokens for r in singles],
                    tokens_c=len(setup.generator.prompt_ids(request)))


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


def run_rounds(engine: DecisionEngine, generator: JsonGenerator, work: Workload, args: argparse.Namespace,
               quiet: QuietWait) -> Rounds:
    """Rounds interleaving a, b, c: at least --repeats of them, more while this count is under --budget-s."""
    rounds = Rounds(load_before=os.getloadavg()[0], times={"a": [], "b": [], "c": []}, gen=[], per_pass=[],
                    split_a=[], split_b=[])
    times = rounds.times
    count_started = time.perf_counter()
    progress = tqdm(desc=f"{len(work.request.questions):>2} questions", unit="round", file=sys.stderr, leave=False,
                    total=args.max_rounds)
    while len(times["a"]) < args.repeats or (len(times["a"]) < args.max_rounds
                                              and time.perf_counter() - count_started < args.budget_s):
        rounds.waited += quiet()
        ms, decision = timed(joint, engine, work.request)
        times["a"].append(ms)
        rounds.split_a.append(engine_split(ms, [decision]))
        rounds.per_pass.append([])
        ms, decisions = timed(split, engine, work.singles, rounds.per_pass[-1])
        times["b"].append(ms)
        rounds.split_b.append(engine_split(ms, decisions))
        started_c = time.perf_counter()
        rounds.gen.append(generator(work.request, work.n_new))
        times["c"].append((time.perf_counter() - started_c) * 1e3)
        progress.update()
        progress.set_postfix(a=f"{min(times['a']):.0f}ms", b=f"{min(times['b']):.0f}ms", c=f"{min(times['c']):.0f}ms")
    progress.close()
    return rounds


def stage_breakdown(engine: DecisionEngine, work: Workload, runs: int,
                    quiet: QuietWait) -> tuple[list[dict], list[dict]]:
    """`runs` untimed staged runs after the timed rounds -> (stages of (a), summed stages of (b)) per run."""
    stages_a, stages_b = [], []
    for _ in range(runs):
        quiet()
        stages_a.append(staged_decide(engine, work.request))
        per_q = [staged_decide(engine, r) for r in work.singles]
        stages_b.append({k: sum(x[k] for x in per_q) for k in per_q[0]})
    return stages_a, stages_b


def measure_count(engine: DecisionEngine, setup: Setup, n: int, args: argparse.Namespace,
                  quiet: QuietWait) -> dict:
    """Time (a), (b), (c) for `n` questions, break them into stages, emit the result line and return it."""
    work = count_workload(engine, setup, n)
    rounds = run_rounds(engine, setup.generator, work, args, quiet)
    stages_a, stages_b = stage_breakdown(engine, work, args.breakdown_runs, quiet)
    schema_chars = sum(len(text) for q in work.request.questions
                       for _, text in engine.model.prompt_encoder.schema_segments((q,)))
    row = result_row(work, rounds, stages_a, stages_b, schema_chars,
                     engine.model.backbone.thinker.config.text_config.vocab_size)
    emit(row)
    return {**row, "_tokens_b": work.tokens_b}


# ---------------------------------------------------------------------------------------------------------- main
def main() -> None:
    """Load the random checkpoint, measure every count, emit the JSON lines, then print the tables."""
    args, counts = parse_args()
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    info = machine()
    emit({"event": "machine", **info})
    quiet = QuietWait(args.quiet_wait_s, args.quiet_budget_s)

    with tempfile.TemporaryDirectory(prefix="onepass-") as tmp:
        started = time.perf_counter()
        engine = load_engine(Path(tmp), args.seed, started)
        setup = build_setup(engine, args.state_tokens, max(counts))
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

    print_tables(info, setup.state_tokens, rows, args.breakdown_runs)


if __name__ == "__main__":
    main()
