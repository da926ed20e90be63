"""`omni report qa REVIEW_DIR [--policy FILE] [--target P] [--window 1d]`: the automatic precision per question from
the QA samples reviewers labelled (omni/governance/qa.py), with a 95% interval, against the target.

Targets: `--target` for every question, else the policy's (`qa_target` of the question, else `[qa] target`), else
none. Output: a table on stdout, or one JSON object (`--json`); `--out DIR` also writes report.json and qa.png. A
question whose whole interval is under its target prints an `ALERT:` line on stderr and the exit code is 1 (for a
cron job to notice); bad input (no such directory, a policy that does not read, a bad window or target) is one line
on stderr and exit 2.
Knows nothing of HTTP or the model; reads no environment.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from api.cli.report_output import bad


def add_qa_arguments(kinds: Any) -> None:
    qa = kinds.add_parser("qa", help="the automatic precision per question from labelled QA samples, with a 95%% "
                                     "interval, against the policy's target (alert when it falls below)")
    qa.add_argument("review_dir", help="the review directory of `omni serve --review-dir` under a policy with [qa]")
    qa.add_argument("--policy", help="the policy file whose qa_target / [qa] target the precision is held to")
    qa.add_argument("--target", type=float, help="one target precision for every question (0..1), over the policy's")
    qa.add_argument("--window", default="1d", help="window of the figure and the per-window rows: 6h, 1d, 1w … "
                                                   "(default 1d)")
    qa.add_argument("--out", help="also write report.json and qa.png to this directory")
    qa.add_argument("--json", action="store_true", help="print the report as one JSON object")


def run_qa(args: argparse.Namespace) -> int:
    from omni.contract.policy import PolicyError, read_policy
    from omni.contract.qa import qa_target
    from omni.governance.drift import DriftError, parse_window
    from omni.governance.qa import qa_report
    from omni.review.directory import ReviewDir

    root = Path(args.review_dir)
    if not root.is_dir():
        return bad(f"{root}: no such review directory")
    if args.target is not None and not 0.0 <= args.target <= 1.0:
        return bad(f"--target must be a precision between 0 and 1, not {args.target}")
    try:
        window_s = parse_window(args.window)
        policy = read_policy(args.policy) if args.policy else None
    except (DriftError, PolicyError) as exc:
        return bad(str(exc))

    def target_of(question: str) -> float | None:
        if args.target is not None:
            return float(args.target)
        return qa_target(policy, question) if policy is not None else None

    report = {"review_dir": str(root), "window": args.window.strip(),
              **qa_report(ReviewDir(root).kept_with_labels(), target_of, float(window_s))}
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        written = [out / "report.json"]
        try:
            from omni.governance.qa_plot import qa_plot

            written.append(qa_plot(report, out / "qa.png"))
        except ImportError as exc:
            print(f"omni report: qa.png not drawn ({exc}; install the train extra)", file=sys.stderr)
        print(f"omni report: wrote {', '.join(str(path) for path in written)}", file=sys.stderr)
    print(json.dumps(report, indent=2) if args.json else format_qa(report))
    for alert in report["alerts"]:
        print(f"ALERT: {alert}", file=sys.stderr)
    return 1 if report["alerts"] else 0


def format_qa(report: dict[str, Any]) -> str:
    rows = [["question", "sampled", "labelled", "precision", "95% interval", "target", ""]]
    for qid, row in report["questions"].items():
        rows.append([qid, str(row["sampled"]), str(row["labelled"]),
                     f"{row['precision']:.3f}" if row["precision"] is not None else "-",
                     f"{row['interval'][0]:.3f}-{row['interval'][1]:.3f}" if row["labelled"] else "-",
                     f"{row['target']:.3f}" if row["target"] is not None else "-",
                     "BELOW TARGET" if row["below_target"] else ""])
    if len(rows) == 1:
        return f"{report['review_dir']}: no QA samples yet (a policy with [qa] or qa_sample draws them)"
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(r, widths, strict=True)).rstrip() for r in rows]
    seeds = ", ".join(map(str, report["seeds"])) or "-"
    return "\n".join([f"QA samples in {report['review_dir']} (seed {seeds})", *lines])
