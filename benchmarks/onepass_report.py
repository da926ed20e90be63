"""onepass report: the machine line, the JSON-line writer, each count's "result" line and the two markdown tables
that `benchmarks/onepass.py` prints.

Used by `benchmarks/onepass.py`; knows nothing of the model or of how the figures were timed — it turns the figures
it is handed into result rows (adding the MAC model from `onepass_workload`) and tables.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import sys
from pathlib import Path

import torch
from onepass_workload import REAL_TEXT, TEXT, macs
from tqdm import tqdm


def emit(record: dict) -> None:
    """One compact JSON line on stdout (through tqdm, so a progress bar on stderr is not torn)."""
    tqdm.write(json.dumps(record, separators=(",", ":")), file=sys.stdout)


def machine() -> dict:
    """CPU model, core and thread counts, library versions, date and load average of this run."""
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


def lowest(runs: list[dict], key: str) -> float:
    """The smallest `key` over `runs`, rounded to 0.01."""
    return round(min(r[key] for r in runs), 2)


def result_row(work, rounds, schema_chars: int, vocab_size: int) -> dict:
    """The "result" JSON line of one count: tokens, best / median / all ms, ratios, stage splits, MAC model.

    `work` is onepass's Workload (requests, answer text, token counts), `rounds` its Rounds (the timed figures and
    the engine's stage splits of every round); `schema_chars` the question schemas' length; `vocab_size` the
    checkpoint's.
    """
    n, times, gen, tokens_a, tokens_b, n_new = (len(work.request.questions), rounds.times, rounds.gen, work.tokens_a,
                                                work.tokens_b, work.n_new)
    median = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    b_sum_of_min = sum(min(run[i] for run in rounds.per_pass) for i in range(n))   # each pass at its best
    return {
        "event": "result", "questions": n, "rounds": len(times["a"]),
        "tokens": {"a": tokens_a, "b_total": sum(tokens_b), "b_mean": round(sum(tokens_b) / n, 1),
                   "c_prompt": work.tokens_c, "c_new": n_new},
        "ms_best": {k: round(v, 1) for k, v in best.items()},
        "ms_median": {k: round(v, 1) for k, v in median.items()},
        "ms_all": {k: [round(x, 1) for x in v] for k, v in times.items()},
        "ratio_best": {"b/a": round(best["b"] / best["a"], 2), "c/a": round(best["c"] / best["a"], 2)},
        "ratio_median": {"b/a": round(median["b"] / median["a"], 2), "c/a": round(median["c"] / median["a"], 2)},
        "b_sum_of_per_pass_best_ms": round(b_sum_of_min, 1),
        "ratio_b_sum_of_per_pass_best/a_best": round(b_sum_of_min / best["a"], 2),
        "token_ratio_b/a": round(sum(tokens_b) / tokens_a, 2),
        "best_round_a_ms": {k: round(v, 1) for k, v in min(rounds.split_a, key=lambda x: x["total"]).items()},
        "best_round_b_ms": {k: round(v, 1) for k, v in min(rounds.split_b, key=lambda x: x["total"]).items()},
        "best_round_c_ms": {k: round(v, 1) for k, v in min(gen, key=lambda g: g["encode_ms"] + g["prefill_ms"]
                                                           + g["decode_ms"]).items()
                            if k.endswith("_ms")},
        "head_share_best_round": {"a": head_share(min(rounds.split_a, key=lambda x: x["total"])),
                                  "b": head_share(min(rounds.split_b, key=lambda x: x["total"]))},
        "stages_c_ms_min": {"encode": lowest(gen, "encode_ms"), "prefill": lowest(gen, "prefill_ms"),
                            "decode": lowest(gen, "decode_ms"),
                            "per_token": round(min(g["decode_ms"] for g in gen) / max(1, n_new - 1), 3)},
        "json_answer_chars": len(work.answer_text),
        "schema_chars_per_question": round(schema_chars / n),
        "mac_model": {"this_checkpoint": macs(TEXT | {"vocab_size": vocab_size}, tokens_a, tokens_b, work.tokens_c,
                                              n_new),
                      "qwen3_omni_30b_a3b_same_tokens": macs(REAL_TEXT, tokens_a, tokens_b, work.tokens_c, n_new)},
        "loadavg_1m": [round(rounds.load_before, 2), round(os.getloadavg()[0], 2)],
        "waited_for_quiet_s": round(rounds.waited, 1),
    }


def print_tables(info: dict, state_tokens: int, rows: list[dict]) -> None:
    """The headline: a title line, the ratio table and the where-the-time-goes table, from the result rows."""
    print()
    print(f"onepass — {info['cpu']}, {info['cores']} cores, torch {info['torch']} ({info['torch_threads']} threads), "
          f"transformers {info['transformers']}, {info['date']}; state {state_tokens} tokens; "
          "best of the rounds (median in brackets)")
    print()
    print_ratio_table(rows)
    print()
    print("where the time goes, ms, in each mode's best round (the engine's timings: encode = prompt + media, "
          "forward = backbone + head, other = answers and the rest; backbone = the thinker's transformer inside the "
          "forward, head = the rest of the forward: collate, joint head, softmax)")
    print()
    print_stage_table(rows)


def print_ratio_table(rows: list[dict]) -> None:
    """Per question count: tokens, best (median) ms of (a) / (b) / (c), measured ratios and the MAC model's."""
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


def head_share(split: dict[str, float]) -> float:
    """The head's share of the forward (backbone + head) in one round's split, rounded to 0.001."""
    return round(split["head"] / split["forward"], 3) if split["forward"] > 0 else 0.0


def print_stage_table(rows: list[dict]) -> None:
    """Per question count: each mode's best round split into its stages, and the head's share of the forward."""
    print("| questions | (a) encode | (a) backbone | (a) head | (a) other | (b) Σ encode | (b) Σ backbone "
          "| (b) Σ head | (b) Σ other | (c) encode | (c) prefill | (c) decode | (c) ms/token | head share (a), (b) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ba, bb, bc = r["best_round_a_ms"], r["best_round_b_ms"], r["best_round_c_ms"]
        share = r["head_share_best_round"]
        per_token = bc["decode_ms"] / max(1, r["tokens"]["c_new"] - 1)
        print(f"| {r['questions']} | {ba['encode']:.1f} | {ba['backbone']:.1f} | {ba['head']:.1f} | {ba['other']:.1f} "
              f"| {bb['encode']:.1f} | {bb['backbone']:.1f} | {bb['head']:.1f} | {bb['other']:.1f} "
              f"| {bc['encode_ms']:.1f} | {bc['prefill_ms']:.1f} | {bc['decode_ms']:.1f} "
              f"| {per_token:.2f} | {share['a']:.0%}, {share['b']:.0%} |")
