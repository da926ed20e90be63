"""`omni bank check FILE...`: bank files read and checked (every mistake named by file, line and field; exit 2);
`omni bank lookup FILE... --image PHOTO --file ANY`: what those media match in those banks, as JSON lines.

`lookup` hashes each photo as a request's photo would be (upright pixels, PDQ) and every file by its sha256, and
prints one line per medium: its hashes and its matches, nearest first. Neither loads a model. Knows nothing of the
engine or HTTP.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from omni.banks.entries import DEFAULT_PDQ_THRESHOLD, MAX_PDQ_THRESHOLD


def add_bank_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bank_command", required=True)
    check = sub.add_parser("check", help="read and check bank files; print what each holds")
    check.add_argument("banks", nargs="+", type=Path, help="bank files (.csv or .jsonl; docs/banks.md)")
    lookup = sub.add_parser("lookup", help="what photos and files match in the banks")
    lookup.add_argument("banks", nargs="+", type=Path, help="bank files (.csv or .jsonl)")
    lookup.add_argument("--image", action="append", default=[], type=Path, help="a photo: PDQ and sha256 (repeatable)")
    lookup.add_argument("--file", action="append", default=[], type=Path, help="any medium: sha256 (repeatable)")
    lookup.add_argument("--pdq-threshold", type=int, default=DEFAULT_PDQ_THRESHOLD,
                        help=f"Hamming bits of 256 within which a PDQ hash matches (0..{MAX_PDQ_THRESHOLD}; "
                             f"default {DEFAULT_PDQ_THRESHOLD})")
    parser.set_defaults(needs_torch=lambda args: False)


def run_bank(args: argparse.Namespace) -> int:
    from omni.banks.entries import read_bank

    files = [read_bank(path) for path in args.banks]
    if args.bank_command == "check":
        for file in files:
            kinds = Counter(entry.hash_type for entry in file.entries)
            actions = Counter(entry.action for entry in file.entries)
            print(json.dumps({"bank": file.name, "path": str(file.path), "version": file.version,
                              "entries": len(file.entries), "hash_types": dict(sorted(kinds.items())),
                              "actions": dict(sorted(actions.items()))}))
        return 0
    return _lookup(files, args)


def _lookup(files: list, args: argparse.Namespace) -> int:
    from omni.banks.index import Bank
    from preprocess.hashes import pdq_of_image, sha256_of
    from preprocess.item import MediaItem

    if not args.image and not args.file:
        print("omni bank lookup: give at least one --image PHOTO or --file ANY", file=sys.stderr)
        return 2
    banks = [Bank(file, pdq_threshold=args.pdq_threshold) for file in files]
    for path, is_image in [*((p, True) for p in args.image), *((p, False) for p in args.file)]:
        data = path.read_bytes()
        hashes = {"sha256": sha256_of(data)}
        line: dict = {"medium": str(path)}
        if is_image:
            pdq = pdq_of_image(MediaItem("images", 0, data, origin=f"--image {path.name}"))
            hashes["pdq"] = pdq.hex
            line["pdq_quality"] = pdq.quality
        matches = [match for bank in banks for kind, value in hashes.items() for match in bank.match(kind, value)]
        matches.sort(key=lambda match: match.distance)
        line["hashes"] = hashes
        line["matches"] = [{"bank": m.bank, "version": m.version, "hash_type": m.entry.hash_type,
                            "label": m.entry.label, "action": m.entry.action, "distance": m.distance,
                            "source": m.entry.source, "added": m.entry.added, "line": m.entry.line}
                           for m in matches]
        print(json.dumps(line))
    return 0
