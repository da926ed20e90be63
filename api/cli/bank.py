"""`omni bank check FILE...`: bank files read and checked (every mistake named by file, line and field; exit 2);
`omni bank lookup FILE... --image PHOTO --video CLIP --file ANY`: what those media match in those banks, as JSON lines;
`omni bank add BANK --from REVIEW_DIR (--where QUESTION=ANSWER | --flagged) --action A --label L`: reviewed items
become entries.

`lookup` hashes each photo as a request's photo would be (upright pixels, PDQ), each video by vPDQ (the `vpdq`
package), every file by its sha256, and prints one line per medium: its hashes and its matches, nearest first. `add`
reads a review directory's items and keeps those whose reviewers' label for QUESTION is ANSWER (`labels.jsonl`), or,
with `--flagged`, those a reviewer flagged (a flag in force in `history.jsonl`), and appends an entry per medium to
BANK (created with its header when new): a photo by PDQ, a video by vPDQ (with the `vpdq` package), a recording by
sha256; a hash the bank already holds is skipped, a photo or video too flat for PDQ (quality below 50) is banked by
sha256 instead. Each new entry is checked before the bank is rewritten beside itself and moved over it. None loads a
model. Knows nothing of the engine or HTTP.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni.banks.entries import DEFAULT_PDQ_THRESHOLD, MAX_PDQ_THRESHOLD

if TYPE_CHECKING:
    from preprocess.item import MediaItem


def add_bank_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bank_command", required=True)
    check = sub.add_parser("check", help="read and check bank files; print what each holds")
    check.add_argument("banks", nargs="+", type=Path, help="bank files (.csv or .jsonl; docs/banks.md)")
    lookup = sub.add_parser("lookup", help="what photos and files match in the banks")
    lookup.add_argument("banks", nargs="+", type=Path, help="bank files (.csv or .jsonl)")
    lookup.add_argument("--image", action="append", default=[], type=Path, help="a photo: PDQ and sha256 (repeatable)")
    lookup.add_argument("--video", action="append", default=[], type=Path,
                        help="a video: vPDQ and sha256 (repeatable; needs the vpdq package)")
    lookup.add_argument("--file", action="append", default=[], type=Path, help="any medium: sha256 (repeatable)")
    lookup.add_argument("--pdq-threshold", type=int, default=DEFAULT_PDQ_THRESHOLD,
                        help=f"Hamming bits of 256 within which a PDQ hash matches (0..{MAX_PDQ_THRESHOLD}; "
                             f"default {DEFAULT_PDQ_THRESHOLD})")
    add = sub.add_parser("add", help="append a review directory's items with a given label to a bank")
    add.add_argument("bank", type=Path, help="the bank file to append to (.csv or .jsonl; created when missing)")
    add.add_argument("--from", dest="review_dir", type=Path, required=True, help="a review directory")
    chosen = add.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--where", metavar="QUESTION=ANSWER",
                        help="the reviewers' label that selects items: a noul true/false, a choice id, a score level")
    chosen.add_argument("--flagged", action="store_true", help="the items a reviewer flagged (a flag in force)")
    add.add_argument("--action", required=True, choices=("act", "review", "pass", "flag"),
                     help="what a match will stand for (docs/banks.md)")
    add.add_argument("--label", required=True, help="the entries' label: what the content is")
    parser.set_defaults(needs_torch=lambda args: False)


def run_bank(args: argparse.Namespace) -> int:
    from omni.banks.entries import read_bank

    if args.bank_command == "add":
        return _add(args)
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
    from preprocess.hashes import pdq_of_image, sha256_of, vpdq_of_video
    from preprocess.item import MediaItem

    if not args.image and not args.file and not args.video:
        print("omni bank lookup: give at least one --image PHOTO, --video CLIP or --file ANY", file=sys.stderr)
        return 2
    banks = [Bank(file, pdq_threshold=args.pdq_threshold) for file in files]
    media = [*((p, "images") for p in args.image), *((p, "videos") for p in args.video), *((p, "") for p in args.file)]
    for path, slot in media:
        data = path.read_bytes()
        hashes: dict = {"sha256": sha256_of(data)}
        line: dict = {"medium": str(path)}
        matches = [match for bank in banks for match in bank.match("sha256", hashes["sha256"])]
        if slot == "images":
            pdq = pdq_of_image(MediaItem("images", 0, data, origin=f"--image {path.name}"))
            hashes["pdq"], line["pdq_quality"] = pdq.hex, pdq.quality
            matches += [match for bank in banks for match in bank.match("pdq", pdq.hex)]
        elif slot == "videos":
            features = vpdq_of_video(MediaItem("videos", 0, data, origin=f"--video {path.name}"))
            hashes["vpdq"] = ";".join(feature.line() for feature in features)
            frames = [(feature.quality, feature.hex) for feature in features]
            matches += [match for bank in banks for match in bank.match_video(frames)]
        matches.sort(key=lambda match: match.distance)
        line["hashes"] = hashes
        line["matches"] = [{"bank": m.bank, "version": m.version, "hash_type": m.entry.hash_type,
                            "label": m.entry.label, "action": m.entry.action, "distance": m.distance,
                            **({"banked_match_percent": m.banked_percent, "query_match_percent": m.query_percent}
                               if m.banked_percent is not None else {}),
                            "source": m.entry.source, "added": m.entry.added, "line": m.entry.line}
                           for m in matches]
        print(json.dumps(line))
    return 0


MIN_PDQ_QUALITY = 50


def _add(args: argparse.Namespace) -> int:
    problem = _add_problem(args)
    if problem:
        print(f"omni bank add: {problem}", file=sys.stderr)
        return 2
    with _locked(args.bank):       # two adds at once: the second reads what the first wrote
        return _add_reviewed(args, args.bank)


@contextlib.contextmanager
def _locked(bank_path: Path) -> Iterator[None]:
    """An exclusive lock on a lock file beside the bank, held from reading the bank to replacing it."""
    import fcntl

    with open(bank_path.with_name(f".{bank_path.name}.lock"), "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _add_reviewed(args: argparse.Namespace, bank_path: Path) -> int:
    from datetime import datetime, timezone

    from omni.banks.entries import FIELDS, read_bank
    from omni.learn.dataset import load_dataset
    from omni.review.directory import dataset_path

    existing = read_bank(bank_path) if bank_path.exists() else None
    held = {(e.hash_type, e.hash) for e in existing.entries} if existing else set()
    if args.flagged:
        selected = _flagged(args.review_dir)
    else:
        records = load_dataset(dataset_path(args.review_dir))
        question, _, answer = args.where.partition("=")
        if records and all(question not in {q.id for q in r.request.questions} for r in records):
            print(f"omni bank add: --where: no item of {args.review_dir} asks {question!r}", file=sys.stderr)
            return 2
        selected = [(f"line{r.line}", r.request) for r in records if r.labels.get(question) in (answer, answer.lower())]
    added_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    rows, media = [], 0
    for where, request in selected:
        for item in request.media:
            media += 1
            kind, value = _banked_hash(item)
            if (kind, value) in held:
                continue
            held.add((kind, value))
            rows.append({"hash_type": kind, "hash": value, "label": args.label, "action": args.action,
                         "source": f"review:{args.review_dir.name}#{where}", "added": added_at})
    _write_with(bank_path, rows, FIELDS)
    print(json.dumps({"bank": str(bank_path), "items": len(selected), "media": media, "added": len(rows),
                      "already_banked": media - len(rows)}))
    return 0


def _flagged(review_dir: Path) -> list[tuple[str, Any]]:
    """(the item's key, its request) of every item a reviewer flagged (a flag in force) whose request the directory
    holds."""
    from omni.contract.config import EngineConfig
    from omni.contract.request_line import parse_request_line
    from omni.review.directory import ReviewDir

    config = EngineConfig()
    return [(key, parse_request_line(json.dumps(body), review_dir, config))
            for key, body in ReviewDir(review_dir).flagged_requests()]


def _banked_hash(item: MediaItem) -> tuple[str, str]:
    """How a reviewed medium is banked: a photo by PDQ, a video by vPDQ (when `vpdq` is installed), both by sha256
    when too flat for PDQ to say much (quality below 50); a recording by sha256."""
    from omni.banks.entries import VPDQ_MIN_QUALITY
    from preprocess.hashes import pdq_of_image, sha256_of, vpdq_available, vpdq_of_video

    if item.slot == "images":
        pdq = pdq_of_image(item)
        if pdq.quality >= MIN_PDQ_QUALITY:
            return "pdq", pdq.hex
    elif item.slot == "videos" and vpdq_available():
        features = vpdq_of_video(item)
        if any(feature.quality >= VPDQ_MIN_QUALITY for feature in features):
            return "vpdq", ";".join(feature.line() for feature in features)
    return "sha256", sha256_of(item.data)


def _add_problem(args: argparse.Namespace) -> str | None:
    if args.where is not None:
        question, sep, answer = args.where.partition("=")
        if not sep or not question or not answer:
            return f"--where {args.where!r}: write QUESTION=ANSWER (e.g. label_visible=false)"
    if not (args.review_dir / "labels.jsonl").exists() and not args.review_dir.is_dir():
        return f"--from {args.review_dir}: not a review directory"
    if not args.label.strip() or len(args.label) > 128:
        return f"--label: 1-128 characters, not {len(args.label)}"
    if args.bank.suffix.lower() not in (".csv", ".jsonl"):
        return f"{args.bank}: a bank file is .csv or .jsonl"
    return None


def _write_with(path: Path, rows: list[dict], fields: tuple[str, ...]) -> None:
    """The bank with `rows` appended: each new row checked as a bank entry first (the rows already there were read
    and checked), written beside the bank and moved over it atomically, so a failed add leaves it as it was."""
    import csv
    import io

    from omni.banks.entries import parse_entry
    from omni.review.history import atomic_write

    old = path.read_bytes() if path.exists() else b""
    if old and not old.endswith(b"\n"):
        old += b"\n"
    first_line = old.count(b"\n") + (2 if not old and path.suffix.lower() == ".csv" else 1)
    for offset, row in enumerate(rows):
        parse_entry(row, path, first_line + offset)
    buffer = io.StringIO()
    if path.suffix.lower() == ".csv":
        header = next(csv.reader(io.StringIO(old.decode("utf-8-sig"))), None) if old else None
        writer = csv.DictWriter(buffer, fieldnames=header or list(fields), lineterminator="\n",
                                restval="")      # the bank's own column order (checked by read_bank before)
        if not old:
            writer.writeheader()
        writer.writerows(rows)
    else:
        buffer.writelines(json.dumps(row) + "\n" for row in rows)
    atomic_write(path, old + buffer.getvalue().encode("utf-8"))
