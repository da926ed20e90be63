"""`omni report drift LOG --window 1h`: how the answers, confidence and outcomes of logged decisions move over time.

Reads the decision log (`omni.serve.decision_log_files.read_records`, a progress bar on stderr when reading takes a
while) and hands the plain records to `omni.governance.drift`, which buckets them into windows of `--window` (30m, 1h, 6h,
1d: windows start on the epoch grid, the first is the one holding the first record in range, empty ones are shown)
and computes, per question, the population stability index against the `--baseline` window (the first, or the
previous). Output: a table on stdout (records and PSI per window for the most drifting questions, and the most
drifting question of each window) or one JSON object (`--json`); `--out DIR` also writes report.json, report.md and
drift.png. Bad input (no such path, a corrupt or foreign log file, a bad flag value, no record in range) is one line
on stderr and exit 2.

`omni report shadow` (a live model beside its shadow candidate) runs in `api.cli.report_shadow`; `omni report qa`
(the automatic precision from QA samples) in `api.cli.report_qa`.
Knows nothing of HTTP or the model; reads no environment.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from api.cli.report_output import bad, md_row, reading

DEFAULT_TOP = 6


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    from omni.governance.drift import BASELINES, MAX_BINS, MIN_BINS

    kinds = parser.add_subparsers(dest="report_kind", required=True)
    drift = kinds.add_parser("drift", help="answer, confidence and outcome distributions per time window of a "
                                           "decision log, and their population stability index (PSI) per question")
    drift.add_argument("log", help="a decision log directory (omni serve --decision-log) or one segment file")
    drift.add_argument("--window", default="1h", help="window length: 30m, 1h, 6h, 1d … (s, m, h, d, w; default 1h)")
    drift.add_argument("--baseline", choices=BASELINES, default="first",
                       help="compare each window with the first window (default) or with the previous one")
    drift.add_argument("--since", help="only decisions at or after this ISO 8601 time (no zone: UTC)")
    drift.add_argument("--until", help="only decisions before this ISO 8601 time (no zone: UTC)")
    drift.add_argument("--bins", type=int, default=10,
                       help=f"confidence bins over [0, 1] ({MIN_BINS}-{MAX_BINS}, default 10)")
    drift.add_argument("--top", type=int, default=DEFAULT_TOP,
                       help=f"questions shown in the table and the figure, most drifting first (default {DEFAULT_TOP})")
    drift.add_argument("--out", metavar="DIR", help="also write report.json, report.md and drift.png there")
    drift.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the table")
    drift.add_argument("--quiet", action="store_true", help="no progress bar")
    drift.set_defaults(needs_torch=False)        # a decision log's records: no model
    from api.cli.report_qa import add_qa_arguments

    add_qa_arguments(kinds)
    shadow = kinds.add_parser("shadow", help="a live model beside its shadow candidate on the decisions both scored: "
                                             "agreement, outcome flips and calibration on reviewed items")
    shadow.add_argument("log", help="a decision log directory (omni serve --decision-log --shadow LIVE=CANDIDATE) "
                                    "or one segment file")
    shadow.add_argument("--out", metavar="DIR", required=True, help="write report.json, report.md and shadow.png there")
    shadow.add_argument("--reviews", metavar="REVIEW_DIR",
                        help="a review directory (omni serve --review-dir): its labels, joined by request id, give "
                             "each side's accuracy, ECE and Brier")
    shadow.add_argument("--pair", metavar="LIVE=CANDIDATE",
                        help="the pair to report when the log holds shadow records of several")
    shadow.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the table")
    shadow.add_argument("--quiet", action="store_true", help="no progress bar")
    shadow.set_defaults(needs_torch=False)


def run_report(args: argparse.Namespace) -> int:
    if args.report_kind == "drift":
        return run_drift(args)
    if args.report_kind == "qa":
        from api.cli.report_qa import run_qa

        return run_qa(args)
    if args.report_kind == "shadow":
        from api.cli.report_shadow import run_shadow

        return run_shadow(args)
    raise AssertionError(f"unknown report {args.report_kind!r}")     # argparse allows only the kinds above


def run_drift(args: argparse.Namespace) -> int:
    from omni.governance.drift import DriftError, collect, drift_report, parse_time, parse_window
    from omni.serve.decision_log_files import DecisionLogReadError, read_records

    try:
        window_s = parse_window(args.window)
        since_s = parse_time(args.since, "--since") if args.since else None
        until_s = parse_time(args.until, "--until") if args.until else None
        if since_s is not None and until_s is not None and until_s <= since_s:
            raise DriftError(f"--until ({args.until}) must be later than --since ({args.since})")
        if args.top < 1:
            raise DriftError(f"--top must be at least 1, not {args.top}")
        records = (logged.record for logged in read_records(args.log))
        collected = collect(reading(records, args.quiet), window_s, args.bins, since_s, until_s)
    except (DriftError, DecisionLogReadError) as exc:
        return bad(str(exc))
    if not collected.windows:
        between = "".join(f" {word} {value}" for word, value in (("since", args.since), ("until", args.until))
                          if value)
        return bad(f"{args.log}: no decision-log records{between}")
    report = {"log": str(args.log), "window": args.window.strip(), **drift_report(collected, args.baseline)}
    if args.out:
        written = write_report(report, Path(args.out), args.top)
        print(f"omni report: wrote {', '.join(str(path) for path in written)}", file=sys.stderr)
    print(json.dumps(report, indent=2) if args.json else format_table(report, args.top))
    return 0


def write_report(report: dict[str, Any], out: Path, top: int) -> list[Path]:
    """report.json, report.md and (when matplotlib is installed: the train extra) drift.png in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "report.json", out / "report.md"]
    written[0].write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    try:
        from omni.governance.drift_plot import drift_plot

        written.append(drift_plot(report, out / "drift.png", top))
    except ImportError as exc:
        print(f"omni report: drift.png not drawn ({exc}; install the train extra)", file=sys.stderr)
    written[1].write_text(format_markdown(report, top, figure=len(written) == 3), encoding="utf-8")
    return written


# ------------------------------------------------------------------------------------------------ text
def _cell(window: dict[str, Any], qid: str) -> str:
    if not window["records"]:
        return ""
    one = window["questions"].get(qid)
    if one is None:
        return "-"
    if window["baseline"] is None:
        return "base"
    if one["psi"] is None:
        return "-"
    return f"{one['psi']:.3f}" + {"major": "**", "moderate": "*"}.get(one["flag"] or "", "")


def _most(window: dict[str, Any]) -> str:
    top = window["most_drifting"]
    if not window["records"]:
        return "(empty)"
    if top is None:
        return "-"
    return f"{top['question']} {top['psi']:.3f}" + (f" {top['flag']}" if top["flag"] else "")


def _when(report: dict[str, Any], stamp: str) -> str:
    return stamp.replace("T", " ").removesuffix("Z") if report["window_seconds"] % 60 else stamp[:16].replace("T", " ")


def _heading(report: dict[str, Any]) -> str:
    return (f"{report['records']} records in {len(report['windows'])} windows of {report['window']} "
            f"({report['start']} to {report['end']}); PSI per question against the {report['baseline']} window")


LEGEND = ("PSI: * >= 0.1 moderate, ** >= 0.25 major; base: the baseline window; -: the question has no answers in "
          "this window or its baseline")


def format_table(report: dict[str, Any], top: int = DEFAULT_TOP) -> str:
    from omni.governance.drift import most_drifting

    shown = most_drifting(report, top)
    header = ["window (UTC)", "records", *(qid[:16] for qid in shown), "most drifting"]
    rows = [[_when(report, w["start"]), str(w["records"]), *(_cell(w, qid) for qid in shown), _most(w)]
            for w in report["windows"]]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    right = {1} | set(range(2, 2 + len(shown)))

    def line(row: list[str]) -> str:
        return "  ".join(text.rjust(w) if i in right else text.ljust(w) for i, (text, w) in
                         enumerate(zip(row, widths, strict=True))).rstrip()

    hidden = len(report["questions"]) - len(shown)
    notes = [f"({hidden} more questions: --top, --json or --out DIR for all)"] if hidden > 0 else []
    return "\n".join([_heading(report), line(header), *map(line, rows), LEGEND, *notes])


def format_markdown(report: dict[str, Any], top: int = DEFAULT_TOP, figure: bool = True) -> str:
    from omni.governance.drift import most_drifting

    shown = most_drifting(report, top)
    text = [f"# Drift: {report['log']}", "", _heading(report) + ".", "",
            (f"Confidence in {report['bins']} bins over [0, 1]; an empty category counts as a share of "
             f"{report['psi_epsilon']:g}. {LEGEND}."), ""]
    if figure:
        text += ["![PSI per question and answer shares per window](drift.png)", ""]
    text += ["## PSI per window", "", md_row(["window (UTC)", "records", *shown, "most drifting"]),
             md_row(["---"] * (len(shown) + 3))]
    text += [md_row([_when(report, w["start"]), str(w["records"]), *(_cell(w, q) for q in shown), _most(w)])
             for w in report["windows"]]
    text += ["", "## Questions, most drifting first", "", md_row(["question", "type", "windows", "answers",
                                                                   "max PSI", "in window", "flag"]),
             md_row(["---"] * 7)]
    for qid in most_drifting(report, len(report["questions"])):
        one = report["questions"][qid]
        psi = "-" if one["max_psi"] is None else f"{one['max_psi']:.4f}"
        text.append(md_row([qid, one["type"], str(one["windows"]), str(one["count"]), psi,
                             one["max_psi_window"] or "-", one["flag"] or ""]))
    if report["policies"]:
        text += ["", "## Overall outcomes per policy version", "",
                 md_row(["window (UTC)", "policy version", "act", "review", "pass"]), md_row(["---"] * 5)]
        for window in report["windows"]:
            for version, counts in window["outcomes"].items():
                total = sum(counts.values())
                text.append(md_row([_when(report, window["start"]), version,
                                     *(f"{counts[name]} ({counts[name] / total:.0%})" for name in counts)]))
    return "\n".join(text) + "\n"
