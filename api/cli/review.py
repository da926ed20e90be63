"""`omni review`: the workbench on this machine — `omni serve` with review on, printing the page's address.

Every `omni serve` flag works here too. On top: `--batch OUT.jsonl` (repeatable) offers `omni batch` outputs as review
queues and `--report DIR` (repeatable) shows `omni eval` reports. Labels go to `--review-dir`, by default
`OUT.jsonl.review/` beside the first batch output, else `./omni-review/`; the directory is the labelled dataset
`omni eval`, `omni calibrate` and `omni finetune` take directly. Knows nothing of routes or the model.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from api.cli.serve import add_serve_arguments, run_serve
from api.http.settings import Settings

DEFAULT_REVIEW_DIR = "omni-review"


def add_review_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch", action="append", metavar="OUT.jsonl", default=[],
                        help="an `omni batch` output to review (repeatable)")
    parser.add_argument("--report", action="append", metavar="DIR", default=[],
                        help="an `omni eval --out` directory to show on the Report page (repeatable)")
    add_serve_arguments(parser)


def run_review(args: argparse.Namespace) -> int:
    args.review_batches = _joined(args.review_batches, args.batch)
    args.review_reports = _joined(args.review_reports, args.report)
    if args.review_dir is None:
        args.review_dir = f"{args.batch[0]}.review" if args.batch else DEFAULT_REVIEW_DIR
    return run_serve(args, announce=_announce)


def _joined(given: str | list[str] | None, more: list[str]) -> str | None:
    """The serve flag's value (a list when repeated, each maybe a comma list) and the shortcut's, as one comma list."""
    given_items = [part for one in ([given] if isinstance(given, str) else given or []) for part in one.split(",")]
    items = [*given_items, *more]
    return ",".join(items) if items else None


def _announce(settings: Settings) -> None:
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    review_dir = settings.review_dir
    assert review_dir is not None             # `omni review` always sets it
    print(f"omni review: open http://{host}:{settings.port}/ui  (labels are saved in "
          f"{Path(review_dir).resolve()})", flush=True)
    print("the model is loading; the page says when it is ready", file=sys.stderr, flush=True)
