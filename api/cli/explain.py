"""`omni explain REQUEST.json [--image/--audio/--video FILE] [--occlude] [--seed N] [--json]`: where each answer came
from (docs/evidence.md), and with `--occlude` whether it matters.

The request is read and its media flags turned into named parts as `omni decide` does (the same helpers), and decided
once in-process with `x_evidence` (the body's own object when it has one, else `true`). Without `--occlude` the
evidence is printed: per question its answer, the share of each part of the input and the top regions of each medium
(`--json`: the `x_evidence` object on one line). With `--occlude`, for every question and every medium with evidence
(each image, audio clip and video, the state), the top region of that question's chosen answer is masked and the
request decided again, then a random region of the same size (seeded by `--seed`); a table shows how far the chosen
answer's probability moved each time (|Δp|), and a summary per medium (`omni.learn.occlusion`; `--json`: one line
per row, then a summary line). A caller's mistake is one line and exit 2, as `omni decide`.

Knows nothing of model internals or HTTP: it uses the engine as `omni decide` does.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from api.cli.decide import add_model_arguments, add_request_arguments

if TYPE_CHECKING:
    from rich.console import Console

    from omni.contract.json_values import JSONValue
    from omni.learn.occlusion import OcclusionRow

REGIONS = {"images": "boxes", "audio": "windows", "videos": "moments"}


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: expected a whole number of at least 1")
    return value


def add_explain_arguments(parser: argparse.ArgumentParser) -> None:
    add_request_arguments(parser)
    parser.add_argument("--occlude", action="store_true",
                        help="mask each medium's top-evidence region, then a random one of the same size, and report "
                             "how far each answer moves (|Δp|)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random regions (default 0)")
    parser.add_argument("--batch-size", type=_positive, default=8, metavar="N",
                        help="masked requests decided per forward (default 8)")
    parser.add_argument("--json", action="store_true",
                        help="JSON: the x_evidence object; with --occlude one line per row and a summary line")
    add_model_arguments(parser)


def bodies(body: JSONValue) -> tuple[JSONValue, JSONValue]:
    """The body asking for evidence (its own `x_evidence` object, else true) and the body without it."""
    if not isinstance(body, dict):
        return body, body                     # the parser names the problem
    plain = {k: v for k, v in body.items() if k != "x_evidence"}
    asked = body.get("x_evidence")
    return {**plain, "x_evidence": asked if isinstance(asked, dict) else True}, plain


def cmd_explain(args: argparse.Namespace) -> int:
    from api.cli.decide import cli_parts, engine_config_from_args, read_body
    from omni.contract.errors import InferenceFailed
    from omni.contract.request import parse_request
    from omni.serve.engine import DecisionEngine

    config = engine_config_from_args(args)
    asked_body, plain_body = bodies(read_body(args.request))
    parts = cli_parts(args)
    asked = parse_request(asked_body, config, parts)
    engine = DecisionEngine(config)
    decision = engine.decide(asked)
    if decision.evidence is None:
        raise InferenceFailed("the model gave no evidence for this request")
    if not args.occlude:
        if args.json:
            print(json.dumps(decision.evidence, ensure_ascii=False))
        else:
            print_evidence(decision.evidence)
        return 0
    from omni.learn.occlusion import occlusion_rows, summarize

    rows = occlusion_rows(parse_request(plain_body, config, parts), decision.evidence, decision.answers,
                          lambda requests: [d.answers for d in engine.decide_batch(requests)],
                          seed=args.seed, batch_size=args.batch_size)
    summary = summarize(rows)
    if args.json:
        for row in rows:
            print(json.dumps({"event": "row", **row.to_wire()}, ensure_ascii=False))
        print(json.dumps({"event": "summary", "seed": args.seed, "by_medium": summary}))
    else:
        print_occlusion(rows, summary, args.seed)
    return 0


# ------------------------------------------------------------------------------------------------------ printing
def _weight(value: float) -> str:
    return f"{value:.3f}"


def _regions(kind: str, entry: Mapping[str, Any]) -> str:
    """The top regions of one medium's evidence, heaviest first, one per line."""
    if kind == "state":
        return "\n".join(f"chars {s['start']}-{s['end']} {s['text']!r} ({_weight(s['weight'])})"
                         for s in entry["spans"])
    lines = []
    for region in entry[REGIONS[kind]]:
        if kind == "images":
            lines.append(f"{region['x0']:.0f},{region['y0']:.0f}-{region['x1']:.0f},{region['y1']:.0f} px "
                         f"({_weight(region['weight'])})")
        else:
            lines.append(f"{region['start_s']:.2f}-{region['end_s']:.2f} s ({_weight(region['weight'])})")
    return "\n".join(lines)


def evidence_rows(evidence: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(question, answer, medium with its share, top regions) for every medium of every question."""
    rows = []
    for qid, entry in evidence["questions"].items():
        share = entry.get("share", {})
        rows.append((qid, str(entry["answer"]), f"prompt {share.get('prompt', 0):.2f}", ""))
        if entry.get("state"):
            rows.append(("", "", f"state {share.get('state', 0):.2f}", _regions("state", entry["state"])))
        for field, share_key in (("images", "image"), ("audio", "audio"), ("videos", "video")):
            for item in entry.get(field) or []:
                rows.append(("", "", f"{field}[{item['index']}] (all {share.get(share_key, 0):.2f})",
                             _regions(field, item)))
    return rows


def console() -> Console:
    """A rich console: the terminal's width, or 120 columns when the output goes to a file or a pipe."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 120)


def print_evidence(evidence: Mapping[str, Any]) -> None:
    from rich.box import SIMPLE_HEAD
    from rich.table import Table

    method = evidence.get("method", "")
    table = Table(box=SIMPLE_HEAD, title=f"evidence ({method}): share of the chosen answer's attention, top regions "
                                         "(weight)")
    for column in ("question", "answer", "medium (share)", "top regions"):
        table.add_column(column)
    for row in evidence_rows(evidence):
        table.add_row(*row)
    console().print(table)


def print_occlusion(rows: Sequence[OcclusionRow], summary: Mapping[str, Mapping[str, float]], seed: int) -> None:
    from rich.box import SIMPLE_HEAD
    from rich.table import Table

    table = Table(box=SIMPLE_HEAD, title="occlusion: the chosen answer's p with its top region masked vs a random one "
                                         f"(seed {seed})")
    for column in ("question", "answer", "p", "medium", "top region", "|Δp| top", "random region", "|Δp| random"):
        table.add_column(column, justify="right" if column.startswith(("p", "|")) else "left")
    for row in rows:
        flip_top = " (flips)" if row.answer_top != row.answer else ""
        flip_random = " (flips)" if row.answer_random != row.answer else ""
        table.add_row(row.question, row.answer, f"{row.p:.4f}", row.target.label, row.top.describe(),
                      f"{row.abs_dp_top:.4f}{flip_top}", row.random.describe(),
                      f"{row.abs_dp_random:.4f}{flip_random}")
    totals = Table(box=SIMPLE_HEAD, title="per medium")
    for column in ("medium", "rows", "mean |Δp| top", "mean |Δp| random", "top moved more",
                   "answers flipped top / random"):
        totals.add_column(column)
    for kind, figures in summary.items():
        totals.add_row(kind, str(figures["rows"]), f"{figures['mean_abs_dp_top']:.4f}",
                       f"{figures['mean_abs_dp_random']:.4f}", f"{figures['share_top_moved_more']:.0%}",
                       f"{figures['flipped_top']} / {figures['flipped_random']}")
    out = console()
    out.print(table)
    out.print(totals)
