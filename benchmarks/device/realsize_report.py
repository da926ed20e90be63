"""realsize_report: realsize.py's results, from one case's timings to the report files.

`result_row` turns a case's round latencies, the engine's split and its last decision into one JSON-ready row (p50
and p99 by nearest rank, prefill tokens/s, MFU against --peak-tflops, peak memory) next to ANCHORS, the published
hosted latencies and this project's goal; `markdown` renders the table, `write_report` rewrites realsize.json and
realsize.md, `environment` says what ran where.

What it must not know: how the model is built, how the rounds are timed or budgeted, and the cases' bodies and inputs.
"""
from __future__ import annotations

import json
import math
import resource
import statistics
from pathlib import Path

import torch
from realsize_flops import FlopModel
from realsize_model import GiB

from omni.model.backbone import Backbone

# Published hosted latencies (Cloudflare's Clef blog) and this project's goal on one H200, in ms.
ANCHORS = {"a": (130, 20), "b": (150, 60), "c": ("a few 100", None), "d": (1500, 300), "e": (None, None),
           "f": (1500, 300)}


def nearest_rank(values: list[float], q: float) -> float:
    """The q-quantile by nearest rank (p99 of fewer than 100 values is their maximum)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def result_row(case, args, latencies: list[float], parts: dict, caches: set, decision, total_flops: float,
               prefilled: int) -> dict:
    """One case's JSON-ready figures (None where nothing was measured); `case`: realsize.py's Case (its key,
    title and planned rounds)."""
    row = {"case": case.key, "title": case.title, "rounds": len(latencies), "rounds_planned": case.rounds,
           "input_tokens": decision.usage.input_tokens, "prefill_tokens": prefilled,
           "tokens_by_modality": decision.tokens_by_modality, "caches": sorted(caches), "tflop": total_flops / 1e12,
           "cloudflare_ms": ANCHORS[case.key][0], "goal_ms": ANCHORS[case.key][1]}
    if not latencies:
        return {**row, "skipped": "budget"}
    p50 = statistics.median(latencies)
    forward = statistics.median(parts["forward"]) / 1e3
    peak = args.peak_tflops * 1e12
    row.update(p50_ms=p50 * 1e3, p99_ms=nearest_rank(latencies, 0.99) * 1e3, mean_ms=statistics.fmean(latencies) * 1e3,
               media_ms=statistics.median(parts["decode"]), prompt_ms=statistics.median(parts["encode"]),
               forward_ms=forward * 1e3, prefill_tok_s=prefilled / p50, mfu=total_flops / p50 / peak,
               mfu_forward=total_flops / forward / peak if forward > 0 else None)
    if args.device.startswith("cuda"):
        row["peak_gib"] = torch.cuda.max_memory_allocated() / GiB
    else:
        row["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GiB
    return row


def fmt(value, spec: str = ".1f") -> str:
    """A table cell: — for None, strings as they are, numbers in `spec`."""
    if value is None:
        return "—"
    return format(value, spec) if isinstance(value, (int, float)) else str(value)


def millions(n: float) -> str:
    """A parameter count in B or M."""
    return f"{n / 1e9:.3f} B" if n >= 1e9 else f"{n / 1e6:.3f} M"


def markdown(env: dict, rows: list[dict], skipped: list[str]) -> str:
    """The report: environment, one table row per case, what was skipped, how MFU was counted."""
    params = env["params"]
    about = (f"thinker {millions(params['thinker'])} params ({millions(params['active_per_token_decoder'])} active "
             f"per token in the decoder layers), head {millions(params['head'])}; weights "
             f"{fmt(env.get('weights_gib'), '.1f')} GiB; build {env['build_s']:.1f} s; experts "
             f"{env['experts_implementation']}, attention {env['attn_implementation']}; torch {env['torch']}, "
             f"transformers {env['transformers']}; peak {env['peak_tflops']:g} TFLOP/s")
    columns = ("| case | input tok (state) | prefill tok | p50 ms | p99 ms | media / prompt / forward ms (p50) "
               "| prefill tok/s | TFLOP | MFU e2e | MFU fwd | peak GiB | Cloudflare ms | goal ms | caches |")
    lines = [f"# realsize ({env['size']} shapes, {env['inputs']} inputs, {env['device_name']}, {env['dtype']})", "",
             about, "", columns,
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        split = f"{fmt(r.get('media_ms'))} / {fmt(r.get('prompt_ms'))} / {fmt(r.get('forward_ms'))}"
        peak = r.get("peak_gib", r.get("peak_rss_gib"))
        scheme = f" [{r['quantize']}, weights {fmt(r.get('weights_gib'), '.2f')} GiB]" if "quantize" in r else ""
        lines.append(f"| ({r['case']}) {r['title']}{scheme} | {r['input_tokens']} ({r['state_tokens']}) | "
                     f"{r['prefill_tokens']} | "
                     f"{fmt(r.get('p50_ms'))} | {fmt(r.get('p99_ms'))} | {split} | "
                     f"{fmt(r.get('prefill_tok_s'), ',.0f')} | "
                     f"{r['tflop']:.3g} | {fmt(r.get('mfu'), '.2%')} | {fmt(r.get('mfu_forward'), '.2%')} | "
                     f"{fmt(peak, '.1f')}{'' if 'peak_gib' in r else ' (RSS)'} | {fmt(r['cloudflare_ms'], '')} | "
                     f"{fmt(r['goal_ms'], '')} | {' '.join(r['caches'])} |")
    lines += ["", "Skipped: " + ("; ".join(skipped) if skipped else "nothing"), "",
              "p50/p99 over the rounds (nearest rank: p99 is the maximum below 100 rounds) of end-to-end "
              "`decide(parse_request(body))`, CUDA-synchronised. MFU e2e = FLOPs / p50 / peak; MFU fwd = FLOPs / "
              "the engine's forward p50 / peak. FLOPs: " + " ".join(FlopModel.__doc__.split("\n\n")[1].split())]
    return "\n".join(lines) + "\n"


def write_report(out: Path, env: dict, rows: list[dict], skipped: list[str]) -> str:
    """Rewrite realsize.json and realsize.md (after every case: a run cut short keeps what it measured)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "realsize.json").write_text(json.dumps({"env": env, "cases": rows, "skipped": skipped}, indent=1) + "\n")
    text = markdown(env, rows, skipped)
    (out / "realsize.md").write_text(text)
    return text


def environment(args, flops: FlopModel, backbone: Backbone, build_s: float, weights_gib: float | None) -> dict:
    """What ran where: shapes, inputs, device, dtypes, versions, parameter counts, build time, implementations."""
    import transformers

    config = backbone.thinker.config
    return {"size": args.size, "inputs": args.inputs, "device": args.device, "dtype": args.dtype,
            "head_dtype": args.head_dtype, "torch_threads": args.torch_threads,
            "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
            "torch": torch.__version__, "transformers": transformers.__version__, "build_s": build_s,
            "weights_gib": weights_gib, "params": flops.params, "peak_tflops": args.peak_tflops,
            "experts_implementation": getattr(config.text_config, "_experts_implementation", None),
            "attn_implementation": getattr(config, "_attn_implementation", None), "budget_s": args.budget_s}
