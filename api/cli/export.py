"""`omni export statements LOG --map MAP.toml --out FILE.jsonl`: DSA statements of reasons from a decision log.

Reads the log (`omni.serve.decision_log_files.read_records`), the map (`omni.learn.statements.load_statement_map`)
and, with `--review-dir`, the reviewers' labels of kept decisions (a labelled decision is only partially automated,
and its labels prevail); writes one statement per selected decision to a temporary file renamed over `--out` only
when the whole log was read without error, so a failed export never leaves half a file. A summary and every skipped
record and warning go to stderr. Bad input (no such log, a corrupt or foreign file, a map naming unknown questions
or values) is one line and exit 2 (`api/cli/main.py` prints it).
Knows nothing of HTTP or the model.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    kinds = parser.add_subparsers(dest="export_kind", required=True)
    statements = kinds.add_parser("statements", help="DSA statements of reasons (the Transparency Database's fields) "
                                                     "for the logged decisions a map selects")
    statements.add_argument("log", help="a decision log directory (omni serve --decision-log) or one segment file")
    statements.add_argument("--map", required=True, dest="map_path", metavar="MAP.toml",
                            help="which decisions get a statement, and the fields the service cannot know")
    statements.add_argument("--out", required=True, metavar="FILE.jsonl", help="one statement per line")
    statements.add_argument("--review-dir", default=None,
                            help="a review directory: decisions its reviewers labelled are partially automated")
    statements.set_defaults(needs_torch=False)   # a decision log's records: no model


def run_export(args: argparse.Namespace) -> int:
    from omni.learn.review import ReviewDir
    from omni.learn.statements import ExportTally, export_statements, load_statement_map
    from omni.serve.decision_log_files import read_records

    statement_map = load_statement_map(args.map_path)
    labels = ReviewDir(args.review_dir).labels_by_request_id() if args.review_dir else {}
    tally = ExportTally()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    records = (logged.record for logged in read_records(args.log))
    with tempfile.NamedTemporaryFile("w", dir=out.parent, prefix=f".{out.name}.", delete=False,
                                     encoding="utf-8") as handle:
        try:
            for statement in export_statements(records, statement_map, labels, tally):
                handle.write(json.dumps(statement, ensure_ascii=False) + "\n")
        except BaseException:
            handle.close()
            os.unlink(handle.name)
            raise
    os.replace(handle.name, out)
    for line in (*statement_map.notes, *tally.warnings, *tally.skipped):
        print(f"omni export: {line}", file=sys.stderr)
    print(f"omni export: {tally.statements} statements from {tally.records} decisions ({tally.unselected} not "
          f"selected by the map, {len(tally.skipped)} skipped) in {out}", file=sys.stderr)
    return 0
