"""The decision log's directory: its layout and record format, reading records and media back, and retention.

    DIR/segments/decisions-<YYYYmmddTHHMMSSZ>-<seq:06d>-<tag>.jsonl   one record per line; names sort by opening
    DIR/media/<sha256>.<container>                                   each content once

A record is one JSON object per line, `format` first: `{"format": "omni-decision/1", "request_id", "decided_at",
"request", "response", "audit"}`. `request` is a System One body whose media entries are paths relative to DIR
(`media/<sha256>.<container>`, as in a review directory) or, kept as hashes only, `{"sha256", "type", "bytes"}`.
A decision shadow-scored by a candidate model also has a `"shadow"` key, and one whose evidence was asked for or
kept for review an `"evidence"` key, its summary (shapes: `omni.serve.decision_log`).

Reading: a torn last line (no newline, and a prefix of a record: the writer stopped mid-write) is skipped; any other
line that is not a record (not UTF-8, not JSON, another format, a field missing) is a `DecisionLogReadError`
naming the file and the line. `prune` is retention: segments last written before a cutoff go, then media that no
remaining segment names. The writer touches a medium each time a record names it, so a medium last touched before
the cutoff can only be named by a segment opened before then: only those are read.
Knows nothing of HTTP, argv, the environment, the model or threads: it sees files and JSON.
"""
from __future__ import annotations

import calendar
import errno
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from omni.contract.errors import OmniError
from omni.contract.json_values import JSONObject

LOG_FORMAT = "omni-decision/1"
SEGMENTS_DIR, MEDIA_DIR = "segments", "media"
RECORD_KEYS = ("format", "request_id", "decided_at", "request", "response", "audit")
RECORD_PREFIX = f'{{"format": "{LOG_FORMAT}", '.encode()      # how every line starts (json.dumps, format first)
SEGMENT_NAME = re.compile(r"decisions-(\d{8}T\d{6}Z)-(\d{6,})-([0-9a-f]{8})\.jsonl")
SEGMENT_TIME = "%Y%m%dT%H%M%SZ"
MEDIA_NAME = re.compile(r"([0-9a-f]{64})\.\w+")
MEDIA_REFERENCE = re.compile(rb"media/([0-9a-f]{64})\.")
SECONDS_PER_DAY = 86400.0
CLOCK_SLACK_S = 3600.0      # how far segment names and file times may disagree (clocks, second resolution)
FULL, UNWRITABLE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}, {errno.EACCES, errno.EPERM, errno.EROFS}


class DecisionLogError(OmniError):
    """The log directory cannot be used (cannot be created, is not writable, is full). Names the path."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path, self.problem = Path(path), problem
        super().__init__(f"decision log {path}: {problem}")


class DecisionLogReadError(DecisionLogError):
    """A file that is not a decision log, or a corrupt line inside one. Names the file and the line (0: none)."""

    def __init__(self, path: str | Path, line: int, problem: str) -> None:
        self.line = line
        super().__init__(path, f"line {line}: {problem}" if line else problem)


@dataclass(frozen=True)
class LoggedDecision:
    """One record read back; `root` is the log directory its media paths are relative to."""

    root: Path
    segment: Path
    line: int                   # 1-based
    record: JSONObject

    @property
    def request(self) -> JSONObject:
        return self.record["request"]

    @property
    def response(self) -> JSONObject:
        return self.record["response"]

    @property
    def audit(self) -> JSONObject:
        return self.record["audit"]


def segment_name(opened_at_s: float, seq: int, tag: str) -> str:
    """The file name of a segment opened at `opened_at_s` (epoch seconds) by the writer `tag` (8 hex digits)."""
    return f"decisions-{time.strftime(SEGMENT_TIME, time.gmtime(opened_at_s))}-{seq:06d}-{tag}.jsonl"


def segment_paths(directory: str | Path) -> list[Path]:
    """The segments of a log directory, in name order (the time each was opened)."""
    folder = Path(directory) / SEGMENTS_DIR
    return [folder / name for name in names(folder) if SEGMENT_NAME.fullmatch(name)]


def read_records(path: str | Path, damaged: Callable[[DecisionLogReadError], None] | None = None
                 ) -> Iterator[LoggedDecision]:
    """Every record of a log directory (segment by segment, line by line) or of one segment file. A torn last line
    is skipped; anything else that is not a record raises DecisionLogReadError (file, line), or, given `damaged`,
    is handed to it and skipped (a search for one record need not stop at another's damage)."""
    path = Path(path)
    if path.is_dir():
        if not (path / SEGMENTS_DIR).is_dir():
            raise DecisionLogReadError(path, 0, f"is not a decision log directory (no {SEGMENTS_DIR}/ folder)")
        return _read_segments(segment_paths(path), path, damaged)
    if not path.exists():
        raise DecisionLogReadError(path, 0, "does not exist")
    root = path.parent.parent if path.parent.name == SEGMENTS_DIR else path.parent
    return _read_segments([path], root, damaged)


def read_media(directory: str | Path, sha256: str) -> bytes:
    """The stored bytes of one medium, checked against their hash; DecisionLogReadError if the log lacks them."""
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ValueError(f"not a sha256 in lowercase hex: {sha256!r}")
    folder = Path(directory) / MEDIA_DIR
    found = [folder / name for name in names(folder) if MEDIA_NAME.fullmatch(name) and name.startswith(sha256)]
    if not found:
        raise DecisionLogReadError(folder / sha256, 0, "is not in the log (kept as a hash only, or pruned)")
    data = found[0].read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise DecisionLogReadError(found[0], 0, "does not match its hash (altered or damaged)")
    return data


def _read_segments(paths: list[Path], root: Path, damaged: Callable[[DecisionLogReadError], None] | None
                   ) -> Iterator[LoggedDecision]:
    for path in paths:
        try:
            handle = open(path, "rb")  # noqa: SIM115  (closed by the with below; only the open's error is ours)
        except OSError as exc:
            raise DecisionLogReadError(path, 0, f"cannot be read ({exc.strerror or exc})") from exc
        with handle:
            for number, raw in enumerate(handle, start=1):
                if not raw.strip():
                    continue
                try:
                    record = parse_record(raw)
                except ValueError as exc:
                    if not raw.endswith(b"\n") and (raw.startswith(RECORD_PREFIX) or RECORD_PREFIX.startswith(raw)):
                        break       # torn last line: the writer stopped mid-write
                    if damaged is None:
                        raise DecisionLogReadError(path, number, str(exc)) from None
                    damaged(DecisionLogReadError(path, number, str(exc)))
                    continue
                yield LoggedDecision(root, path, number, record)


def parse_record(raw: bytes) -> JSONObject:
    """One line as a record; ValueError saying why it is not one."""
    try:
        record = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not a decision-log record (not UTF-8 text)") from None
    except ValueError as exc:
        raise ValueError(f"not a decision-log record (not JSON: {exc})") from None
    except RecursionError:
        raise ValueError("not a decision-log record (JSON nested too deeply)") from None
    if not isinstance(record, dict) or record.get("format") != LOG_FORMAT:
        raise ValueError(f'not a decision-log record (no "format": "{LOG_FORMAT}")')
    missing = [key for key in RECORD_KEYS if key not in record]
    if missing or not isinstance(record["request"], dict):
        raise ValueError(f"a decision-log record without {', '.join(missing) or 'a request object'}")
    return record


# ------------------------------------------------------------------------------------------------ retention
def prune(directory: Path, cutoff_s: float, current: Path | None = None) -> tuple[int, int]:
    """Delete the segments last written before `cutoff_s` (epoch seconds; never `current`, the one being
    written), then the media last touched before it that no remaining segment names. (segments, media) deleted."""
    kept, pruned_segments = [], 0
    for path in segment_paths(directory):
        if path != current and _mtime(path) < cutoff_s:
            path.unlink(missing_ok=True)
            pruned_segments += 1
        else:
            kept.append((path, _opened_at_s(path.name)))
    named: set[str] = set()
    for path, opened_at_s in kept:
        if opened_at_s <= cutoff_s + CLOCK_SLACK_S:
            named |= _media_named(path)
    pruned_media = 0
    for name in names(directory / MEDIA_DIR):
        match = MEDIA_NAME.fullmatch(name)
        path = directory / MEDIA_DIR / name
        if match and match[1] not in named and _mtime(path) < cutoff_s:
            path.unlink(missing_ok=True)
            pruned_media += 1
    return pruned_segments, pruned_media


def names(folder: Path) -> list[str]:
    """The entries of a folder, sorted; none if it does not exist."""
    try:
        return sorted(os.listdir(folder))
    except FileNotFoundError:
        return []


def _opened_at_s(name: str) -> float:
    """When a segment was opened, from its name (0 if the name's time is not a date: read it, to be safe)."""
    match = SEGMENT_NAME.fullmatch(name)
    try:
        return calendar.timegm(time.strptime(match[1], SEGMENT_TIME)) if match else 0.0
    except ValueError:
        return 0.0


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return float("inf")      # gone already (another process pruned it): nothing to delete


def _media_named(path: Path) -> set[str]:
    try:
        with open(path, "rb") as handle:
            return {match.decode() for raw in handle for match in MEDIA_REFERENCE.findall(raw)}
    except FileNotFoundError:
        return set()


def problem(exc: BaseException) -> str:
    """An OSError in an operator's words: full, not writable, or what the system said."""
    code = exc.errno if isinstance(exc, OSError) else None
    reason = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
    if code in FULL:
        return f"is full ({reason})"
    if code in UNWRITABLE:
        return f"is not writable ({reason})"
    return f"cannot be written ({reason})"
