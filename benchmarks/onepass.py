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
`DecisionEngine.decide`; only (c) and the stage breakdown reach into `engine.model` for pieces the engine has no
public door to (the thinker with a cache, the lexical table, the head alone).

    .venv/bin/python benchmarks/onepass.py [--counts 1,8,64] [--repeats 3] [--max-rounds 15] [--budget-s 10]
                                           [--threads 1] [--state-tokens 500] [--no-torch-profile]

About 3-5 minutes on a shared 2-core CPU, most of it the 64-question rounds (mostly (c)'s 1,167 decode steps).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from omni.contract.answers import build_answers
from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.contract.types import DecisionRequest
from omni.model.head import option_probabilities
from omni.model.tiny import write_checkpoint
from omni.serve.engine import DecisionEngine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from onepass_workload import (
    AREAS,
    HEAD,
    JSON_INSTRUCTION,
    REAL_TEXT,
    TEXT,
    build_state,
    json_answer,
    macs,
    moderation_body,
)


# ------------------------------------------------------------------------------------------------- the three modes
def joint(engine: DecisionEngine, request: DecisionRequest):
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
        ids = self.encoder.encode(request).input_ids
        suffix = list(self.encoder.suffix_ids)
        assert ids[-len(suffix):] == suffix, "the reference prompt no longer ends with its suffix"
        return ids[:-len(suffix)] + self.instruction_ids

    @torch.inference_mode()
    def __call__(self, request: DecisionRequest, n_new: int) -> dict:
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
    batch = model.backbone.collate([(record.input_ids, record.position_ids, record.media)])
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


# ---------------------------------------------------------------------------------------------------------- main
def timed(fn, *args):
    started = time.perf_counter()
    result = fn(*args)
    return (time.perf_counter() - started) * 1e3, result


def engine_split(total_ms: float, decisions) -> dict[str, float]:
    """The engine's own timings of a timed call: encode (media + prompt), forward (backbone + head), other."""
    encode = sum(d.timings_ms.get("encode", 0.0) + d.timings_ms.get("decode", 0.0) for d in decisions)
    forward = sum(d.timings_ms["forward"] for d in decisions)
    return {"total": total_ms, "encode": encode, "forward": forward, "other": total_ms - encode - forward}


def _cpu_times() -> tuple[int, int]:
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


def emit(record: dict) -> None:
    tqdm.write(json.dumps(record, separators=(",", ":")), file=sys.stdout)


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import transformers

    return {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


def main() -> None:
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
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    info = machine()
    emit({"event": "machine", **info})
    quiet_left = [args.quiet_budget_s]

    def quiet() -> float:
        waited = wait_for_quiet(min(args.quiet_wait_s, quiet_left[0]))
        quiet_left[0] -= waited
        return waited

    with tempfile.TemporaryDirectory(prefix="onepass-") as tmp:
        started = time.perf_counter()
        directory = write_checkpoint(Path(tmp) / "ckpt", seed=args.seed, text=TEXT, head=HEAD)
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

        tokenizer = engine.model.parts.tokenizer
        state, state_tokens = build_state(tokenizer, args.state_tokens)
        full = parse_request({**moderation_body(max(counts)), "state": state}, engine.config)
        generator = JsonGenerator(engine)
        emit({"event": "workload", "state_tokens": state_tokens, "messages": len(state["messages"]),
              "question_types": {t: sum(q.type == t for q in full.questions) for t in ("noul", "choice", "score")}})

        # warm-up: every mode once on the smallest and largest request (allocator, sdpa and MoE paths)
        for n in sorted({min(counts), max(counts)}):
            request = DecisionRequest(state=state, questions=full.questions[:n], model=full.model)
            joint(engine, request)
            split(engine, [DecisionRequest(state=state, questions=full.questions[:1], model=full.model)])
            generator(request, 8)

        rows = []
        for n in counts:
            request = DecisionRequest(state=state, questions=full.questions[:n], model=full.model)
            singles = [DecisionRequest(state=state, questions=(q,), model=full.model) for q in request.questions]
            answer_text = json_answer(request.questions)
            n_new = len(tokenizer(answer_text, add_special_tokens=False)["input_ids"]) + 1   # + <|im_end|>
            tokens_a = engine.model.prepare(request).num_tokens
            tokens_b = [engine.model.prepare(r).num_tokens for r in singles]
            tokens_c = len(generator.prompt_ids(request))
            load_before = os.getloadavg()[0]
            times: dict[str, list[float]] = {"a": [], "b": [], "c": []}
            gen, per_pass, waited = [], [], 0.0
            split_a, split_b = [], []
            count_started = time.perf_counter()
            progress = tqdm(desc=f"{n:>2} questions", unit="round", file=sys.stderr, leave=False,
                            total=args.max_rounds)
            # rounds interleave a, b, c; at least --repeats of them, more while this count is under --budget-s
            while len(times["a"]) < args.repeats or (len(times["a"]) < args.max_rounds
                                                      and time.perf_counter() - count_started < args.budget_s):
                waited += quiet()
                ms, decision = timed(joint, engine, request)
                times["a"].append(ms)
                split_a.append(engine_split(ms, [decision]))
                per_pass.append([])
                ms, decisions = timed(split, engine, singles, per_pass[-1])
                times["b"].append(ms)
                split_b.append(engine_split(ms, decisions))
                started_c = time.perf_counter()
                gen.append(generator(request, n_new))
                times["c"].append((time.perf_counter() - started_c) * 1e3)
                progress.update()
                progress.set_postfix(a=f"{min(times['a']):.0f}ms", b=f"{min(times['b']):.0f}ms",
                                     c=f"{min(times['c']):.0f}ms")
            progress.close()
            stages_a, stages_b = [], []
            for _ in range(args.breakdown_runs):              # stage breakdown, after the timed rounds
                quiet()
                stages_a.append(staged_decide(engine, request))
                per_q = [staged_decide(engine, r) for r in singles]
                stages_b.append({k: sum(x[k] for x in per_q) for k in per_q[0]})
            median = {k: statistics.median(v) for k, v in times.items()}
            best = {k: min(v) for k, v in times.items()}
            b_sum_of_min = sum(min(run[i] for run in per_pass) for i in range(n))   # each pass at its best
            lowest = lambda runs, key: round(min(r[key] for r in runs), 2)
            row = {
                "event": "result", "questions": n, "rounds": len(times["a"]),
                "tokens": {"a": tokens_a, "b_total": sum(tokens_b), "b_mean": round(sum(tokens_b) / n, 1),
                           "c_prompt": tokens_c, "c_new": n_new},
                "ms_best": {k: round(v, 1) for k, v in best.items()},
                "ms_median": {k: round(v, 1) for k, v in median.items()},
                "ms_all": {k: [round(x, 1) for x in v] for k, v in times.items()},
                "ratio_best": {"b/a": round(best["b"] / best["a"], 2), "c/a": round(best["c"] / best["a"], 2)},
                "ratio_median": {"b/a": round(median["b"] / median["a"], 2),
                                 "c/a": round(median["c"] / median["a"], 2)},
                "b_sum_of_per_pass_best_ms": round(b_sum_of_min, 1),
                "ratio_b_sum_of_per_pass_best/a_best": round(b_sum_of_min / best["a"], 2),
                "token_ratio_b/a": round(sum(tokens_b) / tokens_a, 2),
                "best_round_a_ms": {k: round(v, 1) for k, v in min(split_a, key=lambda x: x["total"]).items()},
                "best_round_b_ms": {k: round(v, 1) for k, v in min(split_b, key=lambda x: x["total"]).items()},
                "best_round_c_ms": {k: round(v, 1) for k, v in min(gen, key=lambda g: g["encode_ms"] + g["prefill_ms"]
                                                                   + g["decode_ms"]).items()
                                    if k.endswith("_ms")},
                "stages_a_ms_min": {k: lowest(stages_a, k) for k in ("prepare", "backbone", "head", "answers")},
                "stages_b_ms_min": {k: lowest(stages_b, k) for k in ("prepare", "backbone", "head", "answers")},
                "stages_c_ms_min": {"encode": lowest(gen, "encode_ms"), "prefill": lowest(gen, "prefill_ms"),
                                    "decode": lowest(gen, "decode_ms"),
                                    "per_token": round(min(g["decode_ms"] for g in gen) / max(1, n_new - 1), 3)},
                "json_answer_chars": len(answer_text),
                "schema_chars_per_question": round(sum(len(text) for q in request.questions for _, text in
                                                       engine.model.prompt_encoder.schema_segments((q,))) / n),
                "mac_model": {"this_checkpoint": macs(TEXT | {"vocab_size": text_config.vocab_size}, tokens_a,
                                                      tokens_b, tokens_c, n_new),
                              "qwen3_omni_30b_a3b_same_tokens": macs(REAL_TEXT, tokens_a, tokens_b, tokens_c, n_new)},
                "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                "waited_for_quiet_s": round(waited, 1),
            }
            emit(row)
            rows.append({**row, "_tokens_b": tokens_b})

        # what-if, arithmetic only: the largest count's prompts with a longer state (e.g. media), both shapes
        last = rows[-1]
        sweep = []
        for state_size in (500, 2000, 8000, 32000):
            grow = state_size - state_tokens
            b_tokens = [t + grow for t in last["_tokens_b"]]
            sweep.append({"state_tokens": state_size, "tokens_a": last["tokens"]["a"] + grow,
                          "this_checkpoint": macs(TEXT | {"vocab_size": text_config.vocab_size},
                                                  last["tokens"]["a"] + grow, b_tokens,
                                                  last["tokens"]["c_prompt"] + grow, last["tokens"]["c_new"]),
                          "qwen3_omni_30b_a3b": macs(REAL_TEXT, last["tokens"]["a"] + grow, b_tokens,
                                                     last["tokens"]["c_prompt"] + grow, last["tokens"]["c_new"])})
        emit({"event": "mac_model_state_sweep", "questions": last["questions"], "rows": sweep})

        if not args.no_torch_profile:
            request = DecisionRequest(state=state, questions=full.questions[:max(counts)], model=full.model)
            emit({"event": "torch_profile", "questions": max(counts), "top_self_cpu": torch_profile(engine, request)})
        emit({"event": "done", "loadavg": [round(x, 2) for x in os.getloadavg()],
              "total_s": round(time.perf_counter() - started, 1)})

    print()
    print(f"onepass — {info['cpu']}, {info['cores']} cores, torch {info['torch']} ({info['torch_threads']} threads), "
          f"transformers {info['transformers']}, {info['date']}; state {state_tokens} tokens; "
          "best of the rounds (median in brackets)")
    print()
    print("| questions | rounds | tokens (a) | tokens (b), all passes | prompt + new tokens (c) | (a) joint ms "
          "| (b) split ms | (c) json ms | (b)/(a) | (c)/(a) | token ratio (b)/(a) | MAC model (b)/(a), (c)/(a) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        m, b, q, rm, rb = r["ms_median"], r["ms_best"], r["tokens"], r["ratio_median"], r["ratio_best"]
        mac = r["mac_model"]["this_checkpoint"]
        print(f"| {r['questions']} | {r['rounds']} | {q['a']} | {q['b_total']} | {q['c_prompt']} + {q['c_new']} "
              f"| {b['a']:.0f} ({m['a']:.0f}) | {b['b']:.0f} ({m['b']:.0f}) | {b['c']:.0f} ({m['c']:.0f}) "
              f"| {rb['b/a']:.1f}× ({rm['b/a']:.1f}×) | {rb['c/a']:.1f}× ({rm['c/a']:.1f}×) "
              f"| {r['token_ratio_b/a']:.1f}× | {mac['b/a']:.2f}×, {mac['c/a']:.2f}× |")
    print()
    print("where the time goes, ms, in each mode's best round (engine timings: encode = prompt + media, forward = "
          f"backbone + head + softmax, other = the rest); head share of backbone + head from {args.breakdown_runs} "
          "separate staged runs (minimum)")
    print()
    print("| questions | (a) encode | (a) forward | (a) other | (b) Σ encode | (b) Σ forward | (b) Σ other "
          "| (c) encode | (c) prefill | (c) decode | (c) ms/token | head share (a), (b) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ba, bb, bc = r["best_round_a_ms"], r["best_round_b_ms"], r["best_round_c_ms"]
        sa, sb = r["stages_a_ms_min"], r["stages_b_ms_min"]
        share = lambda st: st["head"] / (st["head"] + st["backbone"])
        print(f"| {r['questions']} | {ba['encode']:.1f} | {ba['forward']:.1f} | {ba['other']:.1f} "
              f"| {bb['encode']:.1f} | {bb['forward']:.1f} | {bb['other']:.1f} "
              f"| {bc['encode_ms']:.1f} | {bc['prefill_ms']:.1f} | {bc['decode_ms']:.1f} "
              f"| {bc['decode_ms'] / max(1, r['tokens']['c_new'] - 1):.2f} | {share(sa):.0%}, {share(sb):.0%} |")


if __name__ == "__main__":
    main()
