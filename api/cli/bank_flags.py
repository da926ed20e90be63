"""`--bank FILE` (repeatable) and `--bank-pdq-threshold BANK=BITS` on the commands that answer requests with a model
in this process (`omni decide`, `omni batch`): the banks consulted before the model, as `omni serve --bank` consults
them (docs/banks.md) — a match that decides answers without a forward pass (and, for `omni decide`, without loading
the model at all); any other match rides along the model's answer as `x_match`.

`add_bank_flags(parser)`; `bank_shelf(args)` -> the opened `BankShelf` (BankError naming the file, line and field:
the command's exit 2) or None without `--bank`. A threshold that is not BANK=BITS is argparse's usage error.
Knows nothing of the engine, HTTP or how a match is used.
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from omni.banks.entries import DEFAULT_PDQ_THRESHOLD, MAX_PDQ_THRESHOLD

if TYPE_CHECKING:
    from omni.banks.shelf import BankShelf


def add_bank_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument("--bank", action="append", metavar="FILE",
                        help="a hash bank (CSV/JSONL; repeatable, consulted in this order): media matched before the "
                             "model; a match that decides answers without it (docs/banks.md)")
    parser.add_argument("--bank-pdq-threshold", action="append", metavar="BANK=BITS", type=_threshold,
                        help=f"a bank's PDQ threshold in bits (0..{MAX_PDQ_THRESHOLD}; default "
                             f"{DEFAULT_PDQ_THRESHOLD}; BANK: the file's stem; repeatable)")


def _threshold(spec: str) -> tuple[str, int]:
    name, sep, bits = spec.partition("=")
    if not sep or not name.strip() or not bits.strip().isdigit() or not 0 <= int(bits) <= MAX_PDQ_THRESHOLD:
        raise argparse.ArgumentTypeError(f"{spec!r}: expected BANK=BITS, BITS 0..{MAX_PDQ_THRESHOLD}")
    return name.strip(), int(bits)


def bank_shelf(args: argparse.Namespace) -> BankShelf | None:
    from omni.banks.entries import BankError

    thresholds = dict(args.bank_pdq_threshold or [])
    if not args.bank:
        if thresholds:
            raise BankError("--bank-pdq-threshold goes with --bank")
        return None
    from omni.banks.opening import open_banks

    return open_banks(args.bank, thresholds)
