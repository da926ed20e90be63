"""`omni report shadow LOG --out DIR [--reviews REVIEW_DIR]`: a live model beside its shadow candidate.

Reads the decision log (`omni.serve.decision_log_files.read_records`, a progress bar on stderr when reading takes a
while), keeps the records that carry a shadow block (`omni serve --shadow LIVE=CANDIDATE`) and hands them to
`omni.governance.shadow`: per question the agreement of the top answers (Wilson interval), the mean |delta p| of the
live top answer, the outcome flips act/review/pass live -> candidate, and, on decisions a reviewer labelled, each
side's accuracy, ECE and Brier. The labels come from a review directory (`--reviews`): a server run with
`--review-dir` keeps the decisions it sends to review with their audit record, whose request id is the log line's,
and `ReviewDir.labels_by_request_id` joins the two. Writes report.json, report.md and shadow.png into `--out` and
prints a table (or one JSON object, `--json`). Bad input (no such path, a corrupt line: file and line named, a log
without shadow records, a directory that is not a review directory, several pairs and no `--pair`) is one line on
stderr and exit 2. Knows nothing of HTTP or the model; reads no environment.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from api.cli.report_output import bad, md_row, reading


def run_shadow(args: argparse.Namespace) -> int:
    from omni.governance.shadow import ShadowError, collect, shadow_report
    from omni.serve.decision_log_files import DecisionLogReadError

    try:
        pair = _pair(args.pair) if args.pair else None
        labels = _labels(Path(args.reviews)) if args.reviews else None
        collected = collect(reading(_records(args.log), args.quiet), labels, pair)
        report = {"log": str(args.log), "reviews": args.reviews, **shadow_report(collected)}
    except (ShadowError, DecisionLogReadError) as exc:
        return bad(str(exc))
    written = write_report(report, Path(args.out))
    print(f"omni report: wrote {', '.join(str(path) for path in written)}", file=sys.stderr)
    print(json.dumps(report, indent=2) if args.json else format_table(report))
    return 0


def _pair(text: str) -> tuple[str, str]:
    from omni.governance.shadow import ShadowError

    live, _, candidate = text.partition("=")
    if not live.strip() or not candidate.strip():
        raise ShadowError(f"--pair must be LIVE=CANDIDATE (two model names), not {text!r}")
    return live.strip(), candidate.strip()


def _records(log: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(FILE:LINE, record) for every record of the log (DecisionLogReadError for a corrupt one, file and line)."""
    from omni.serve.decision_log_files import read_records

    for logged in read_records(log):
        yield f"{logged.segment}:{logged.line}", logged.record


def _labels(path: Path) -> dict[str, dict[str, Any]]:
    """{request id: {question: label}} of the decisions a review directory kept and a reviewer labelled."""
    from omni.governance.shadow import ShadowError
    from omni.review.directory import REVIEW_DATASET_FILE, REVIEW_DECISIONS_FILE, ReviewDir

    if not path.is_dir():
        raise ShadowError(f"--reviews {path}: {'is not a directory' if path.exists() else 'does not exist'}")
    if not (path / REVIEW_DECISIONS_FILE).is_file():
        raise ShadowError(f"--reviews {path}: is not a review directory of a server (no {REVIEW_DECISIONS_FILE}: "
                          f"the decisions `omni serve --review-dir` keeps, whose request ids join the log's; "
                          f"{REVIEW_DATASET_FILE} alone has none)")
    return ReviewDir(path).labels_by_request_id()


def write_report(report: dict[str, Any], out: Path) -> list[Path]:
    """report.json, report.md and (when matplotlib is installed: the train extra) shadow.png in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "report.json", out / "report.md"]
    written[0].write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    try:
        from omni.governance.shadow_plot import shadow_plot

        written.append(shadow_plot(report, out / "shadow.png"))
    except ImportError as exc:
        print(f"omni report: shadow.png not drawn ({exc}; install the train extra)", file=sys.stderr)
    written[1].write_text(format_markdown(report, figure=len(written) == 3), encoding="utf-8")
    return written


# ------------------------------------------------------------------------------------------------ text
def _figure(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _side(one: dict[str, Any], figure: str) -> str:
    reviewed = one["reviewed"]
    if reviewed is None:
        return "-"
    return f"{_figure(reviewed['live'][figure])}/{_figure(reviewed['candidate'][figure])}"


def _row(qid: str, one: dict[str, Any]) -> list[str]:
    low, high = one["agreement_interval"]
    return [qid, one["type"], str(one["n"]), _figure(one["agreement"]), f"{low:.3f}-{high:.3f}",
            _figure(one["mean_abs_delta_p"]), "-" if one["flipped"] is None else str(one["flipped"]),
            str(one["reviewed"]["n"]) if one["reviewed"] else "0",
            _side(one, "accuracy"), _side(one, "ece"), _side(one, "brier")]


HEADER = ["question", "type", "n", "agree", "interval", "mean|dp|", "flipped", "reviewed", "acc l/c", "ECE l/c",
          "Brier l/c"]


def _heading(report: dict[str, Any]) -> str:
    shas = [sha[:12] if sha else "none" for sha in report["candidate_adapter_sha256"]]
    return (f"live {report['live']} vs candidate {report['candidate']} (adapter sha256 {', '.join(shas)}): "
            f"{report['shadow_records']} shadow records of {report['records']}, {report['reviewed_records']} "
            f"reviewed; agreement with its {report['level']:.0%} Wilson interval")


def format_table(report: dict[str, Any]) -> str:
    rows = [_row(qid, one) for qid, one in report["questions"].items()]
    widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER))]

    def line(row: list[str]) -> str:
        return "  ".join(text.ljust(w) if i < 2 else text.rjust(w)
                         for i, (text, w) in enumerate(zip(row, widths, strict=True))).rstrip()

    text = [_heading(report), line(HEADER), *map(line, rows)]
    flips = report["flips"]
    if flips is not None:
        changed = sum(n for live, row in flips.items() for candidate, n in row.items() if live != candidate)
        text.append(f"overall outcome flipped on {changed} of {report['shadow_records']} records: " + ", ".join(
            f"{live}->{candidate} {n}" for live, row in flips.items() for candidate, n in row.items()
            if live != candidate and n))
    return "\n".join(text)


def _flip_rows(flips: dict[str, dict[str, int]], outcomes: list[str]) -> list[str]:
    return [md_row(["live \\ candidate", *outcomes]), md_row(["---"] * (len(outcomes) + 1)),
            *(md_row([live, *(str(flips[live][c]) for c in outcomes)]) for live in outcomes)]


def format_markdown(report: dict[str, Any], figure: bool = True) -> str:
    text = [f"# Shadow: {report['log']}", "", _heading(report) + ".", "",
            ("Agreement: the share of records whose top answers are equal. mean |dp|: the mean change of the "
             "probability of the live top answer. Flipped: records whose outcome for the question differs (a policy "
             "in force). On reviewed records (labels joined by request id): accuracy, ECE and Brier, live/candidate."),
            ""]
    if figure:
        text += ["![agreement per question, outcome flips, calibration on reviewed items](shadow.png)", ""]
    text += ["## Per question", "", md_row(HEADER), md_row(["---"] * len(HEADER)),
             *(md_row(_row(qid, one)) for qid, one in report["questions"].items())]
    if report["flips"] is not None:
        text += ["", "## Overall outcome, live -> candidate", "", *_flip_rows(report["flips"], report["outcomes"])]
        for qid, one in report["questions"].items():
            if one["flips"] is not None:
                text += ["", f"### {qid}", "", *_flip_rows(one["flips"], report["outcomes"])]
    reviewed = report["reviewed"]
    if reviewed is not None:
        text += ["", f"## Reviewed records, all questions pooled (n = {reviewed['n']})", "",
                 md_row(["side", "accuracy", "ECE", "Brier"]), md_row(["---"] * 4),
                 *(md_row([side, *(_figure(reviewed[side][name], 4) for name in ("accuracy", "ece", "brier"))])
                   for side in ("live", "candidate"))]
    return "\n".join(text) + "\n"
