"""`--smoke` for every benchmark script: the same code path at tiny sizes, a check that the script still runs (CI runs
each one so: tests/integration/benchmarks/test_smoke.py), never a measurement. Knows nothing of what is measured."""
from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any


def parse_with_smoke(parser: argparse.ArgumentParser, smoke_defaults: Mapping[str, Any],
                     argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Add `--smoke` to `parser` and parse `argv`: with it, `smoke_defaults` become the defaults (flags given
    explicitly still win)."""
    parser.add_argument("--smoke", action="store_true",
                        help="the same code path at tiny sizes (a check that the benchmark runs, not a measurement)")
    if parser.parse_known_args(argv)[0].smoke:
        parser.set_defaults(**smoke_defaults)
    return parser.parse_args(argv)
