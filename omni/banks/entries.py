"""A hash bank's file: one entry per line, read and checked before anything is matched against it.

CSV (a header row naming the columns) or JSONL (one object per line), by the file's extension:

    hash_type   pdq | vpdq | sha256
    hash        pdq, sha256: 64 hex digits (PDQ's 256 bits in ThreatExchange's order; a sha256); vpdq: a video's
                vPDQ hash, its hash file's lines `FRAME,QUALITY,HEX,SECONDS` joined by `;` (at most 100,000 frames)
    label       what the content is ("known-csam", "approved-logo", ...): 1-128 characters
    action      act | review | pass: the outcome a match stands for (known-bad acted on, known-good passed, or
                sent to review) without a forward pass; flag: the model answers as always and the match rides
                alongside — a bank entry never decides more than it says
    source      where the entry came from ("ncmec", "review:2026-12-04/alice", ...)
    added       when, ISO 8601 with a time zone

A malformed hash, an unknown hash type or action, a missing field, a bad date or the same (hash_type, hash) twice is
a `BankError` naming the file, the line and the field. The bank's `version` is the sha256 of the file's bytes: what an
audit record names.
Knows nothing of indexes, media or the decision path.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from omni.contract.errors import OmniError

HASH_TYPES = ("pdq", "vpdq", "sha256")
ACTIONS = ("act", "review", "pass", "flag")
FIELDS = ("hash_type", "hash", "label", "action", "source", "added")
HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
MAX_BANK_BYTES = 1024 * 1024 * 1024
DEFAULT_PDQ_THRESHOLD = 31     # Hamming bits of 256: the threshold PDQ's authors give for a match
MAX_PDQ_THRESHOLD = 63
MAX_VPDQ_FRAMES = 100_000
VPDQ_MIN_QUALITY = 50          # vPDQ's quality filter: frames below it are not compared (flat frames say little)


class BankError(OmniError):
    """A bank file cannot be used: the message names the file, the line and the field."""


@dataclass(frozen=True)
class BankEntry:
    hash_type: str
    hash: str          # lowercase hex
    label: str
    action: str
    source: str
    added: str
    line: int          # where in the file (for messages and `omni bank` listings)


@dataclass(frozen=True)
class BankFile:
    name: str          # the file's stem: how responses, metrics and audit records name the bank
    path: Path
    version: str       # sha256 of the file's bytes
    entries: tuple[BankEntry, ...]


def read_bank(path: str | Path) -> BankFile:
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_BANK_BYTES:
            raise BankError(f"{path}: {size} bytes; a bank file holds at most {MAX_BANK_BYTES}")
        data = path.read_bytes()
    except OSError as exc:
        raise BankError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8-sig")          # a spreadsheet's byte-order mark is no part of the header
    except UnicodeDecodeError as exc:
        raise BankError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    suffix = path.suffix.lower()
    if suffix == ".csv":
        rows = _csv_rows(text, path)
    elif suffix in (".jsonl", ".ndjson"):
        rows = _jsonl_rows(text, path)
    else:
        raise BankError(f"{path}: a bank file is .csv or .jsonl, not {suffix or 'without an extension'}")
    entries: list[BankEntry] = []
    seen: dict[tuple[str, str], int] = {}
    for line, row in rows:
        entry = parse_entry(row, path, line)
        key = (entry.hash_type, entry.hash)
        if key in seen:
            raise BankError(f"{path}: line {line}: hash: {entry.hash_type} {entry.hash[:16]}… is already on line "
                            f"{seen[key]}; each hash once per bank")
        seen[key] = line
        entries.append(entry)
    return BankFile(name=path.stem, path=path, version=hashlib.sha256(data).hexdigest(), entries=tuple(entries))


def _csv_rows(text: str, path: Path) -> list[tuple[int, dict[str, Any]]]:
    if csv.field_size_limit() < MAX_BANK_BYTES:     # a vpdq cell holds a whole video's frames (128 KiB by default)
        csv.field_size_limit(MAX_BANK_BYTES)
    reader = csv.DictReader(io.StringIO(text))
    try:
        header = reader.fieldnames or []
        missing = [field for field in FIELDS if field not in header]
        if missing:
            raise BankError(f"{path}: line 1: the header lacks {', '.join(missing)} (a bank's columns: "
                            f"{', '.join(FIELDS)})")
        twice = sorted({field for field in header if header.count(field) > 1})
        if twice:
            raise BankError(f"{path}: line 1: the header names {', '.join(twice)} more than once")
        rows = []
        for row in reader:
            if None in row:
                raise BankError(f"{path}: line {reader.line_num}: more fields than the header names")
            rows.append((reader.line_num, dict(row)))
    except csv.Error as exc:
        raise BankError(f"{path}: line {reader.line_num}: not CSV ({exc})") from None
    return rows


def _jsonl_rows(text: str, path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for line, raw in enumerate(text.split("\n"), start=1):     # not splitlines(): U+2028 is text inside a string
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except ValueError as exc:
            raise BankError(f"{path}: line {line}: not JSON ({exc})") from None
        except RecursionError:
            raise BankError(f"{path}: line {line}: not an entry (JSON nested past any use)") from None
        if not isinstance(row, dict):
            raise BankError(f"{path}: line {line}: an entry is a JSON object with {', '.join(FIELDS)}")
        rows.append((line, row))
    return rows


def parse_entry(row: dict[str, Any], path: Path, line: int) -> BankEntry:
    """One entry checked; BankError naming `path`, `line` and the field."""
    def field(name: str) -> str:
        value = row.get(name)
        if not isinstance(value, str) or not value.strip():
            raise BankError(f"{path}: line {line}: {name}: required, a non-empty string")
        return value.strip()

    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise BankError(f"{path}: line {line}: unknown field(s) {', '.join(unknown)}; an entry has "
                        f"{', '.join(FIELDS)}")
    hash_type = field("hash_type").lower()
    if hash_type not in HASH_TYPES:
        raise BankError(f"{path}: line {line}: hash_type: {hash_type!r} is not one of {', '.join(HASH_TYPES)}")
    value = _checked_hash(hash_type, field("hash"), path, line)
    label, source = field("label"), field("source")
    if len(label) > 128:
        raise BankError(f"{path}: line {line}: label: {len(label)} characters; at most 128")
    action = field("action").lower()
    if action not in ACTIONS:
        raise BankError(f"{path}: line {line}: action: {action!r} is not one of {', '.join(ACTIONS)}")
    added = field("added")
    try:
        stamp = datetime.fromisoformat(added.replace("Z", "+00:00"))
    except ValueError:
        raise BankError(f"{path}: line {line}: added: {added!r} is not an ISO 8601 time") from None
    if stamp.tzinfo is None:
        raise BankError(f"{path}: line {line}: added: {added!r} needs a time zone (Z or +hh:mm)")
    return BankEntry(hash_type=hash_type, hash=value.lower(), label=label, action=action, source=source,
                     added=added, line=line)


def _checked_hash(hash_type: str, value: str, path: Path, line: int) -> str:
    if hash_type == "vpdq":
        return canonical_vpdq(value, path, line)
    if not HEX64.match(value):
        raise BankError(f"{path}: line {line}: hash: a {hash_type} hash is 64 hex digits, not {value[:70]!r}")
    return value


def vpdq_features(value: str) -> list[tuple[int, int, str, float]]:
    """A vpdq entry's hash as (frame, quality, hex, seconds) per frame; ValueError naming the frame at fault."""
    features = []
    for number, part in enumerate(value.split(";"), start=1):
        fields = [piece.strip() for piece in part.split(",")]
        if len(fields) != 4:
            raise ValueError(f"frame {number}: {part.strip()[:80]!r} is not FRAME,QUALITY,HEX,SECONDS")
        frame, quality, digits, seconds = fields
        if not frame.isdigit() or not quality.isdigit() or not 0 <= int(quality) <= 100:
            raise ValueError(f"frame {number}: the frame number and quality are whole numbers (quality 0..100), "
                             f"not {frame!r} and {quality!r}")
        if not HEX64.match(digits):
            raise ValueError(f"frame {number}: a frame's PDQ hash is 64 hex digits, not {digits[:70]!r}")
        try:
            time_s = float(seconds)
        except ValueError:
            raise ValueError(f"frame {number}: seconds {seconds!r} is not a number") from None
        if not time_s >= 0:
            raise ValueError(f"frame {number}: seconds {seconds!r} is not a time >= 0")
        features.append((int(frame), int(quality), digits.lower(), time_s))
        if len(features) > MAX_VPDQ_FRAMES:
            raise ValueError(f"over {MAX_VPDQ_FRAMES} frames")
    return features


def canonical_vpdq(value: str, path: Path, line: int) -> str:
    """A vpdq hash checked and written one way (lowercase hex, seconds to the millisecond, no spaces), so the same
    video banked twice is the same hash; one no frame of which reaches quality 50 can never match and is refused."""
    try:
        features = vpdq_features(value)
    except ValueError as exc:
        raise BankError(f"{path}: line {line}: hash: a vpdq hash is its frames' FRAME,QUALITY,HEX,SECONDS joined "
                        f"by ';': {exc}") from None
    if all(quality < VPDQ_MIN_QUALITY for _, quality, _, _ in features):
        raise BankError(f"{path}: line {line}: hash: no frame of this vpdq hash has quality >= {VPDQ_MIN_QUALITY} "
                        "(vPDQ compares no other frames): it could never match")
    return ";".join(f"{frame},{quality},{digits},{seconds:.3f}" for frame, quality, digits, seconds in features)
