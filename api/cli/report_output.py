"""What every `omni report` command shares: its one-line refusals (exit 2), the progress bar while a log is read,
and a markdown table row.

Knows nothing of what a report computes, of HTTP or the model; imports nothing heavy (`omni report --help` stays
instant).
"""
from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any


def bad(message: str) -> int:
    """Print `message` as the command's one-line refusal; the exit code 2."""
    print(f"omni report: {message}", file=sys.stderr)
    return 2


def reading(records: Iterable[Any], quiet: bool) -> Iterator[Any]:
    """The records, counted by a tqdm bar on stderr that appears only if reading lasts over half a second."""
    from tqdm import tqdm

    with tqdm(records, unit="record", desc="omni report: reading", file=sys.stderr, delay=0.5,
              dynamic_ncols=True, disable=True if quiet else None) as bar:
        yield from bar


def md_row(cells: list[str]) -> str:
    """One markdown table row; a `|` in a cell is escaped."""
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"
