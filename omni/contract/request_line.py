"""Request lines: one JSON request per line, as datasets, `omni batch` backlogs and replayed logs write them, with the
Clef media fields (`images`, `audio`, `videos`) allowed to hold file paths relative to the file (read here and handed
to the wire parser as parts of their slot, exactly as `omni decide --image` does) and `labels` optional and unchecked.

The files are the operator's own (a dataset, a backlog), never an HTTP caller's: remote URLs are refused, not fetched.
A bad entry is the wire's own `InvalidRequest` naming its place. Knows nothing of labels' meaning, torch, the model or
HTTP; the request rules are `omni.contract.request.parse_request`'s.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from omni.contract.config import EngineConfig
from omni.contract.errors import InvalidRequest, Loc
from omni.contract.json_values import JSONObject, JSONValue, load_json
from omni.contract.request import parse_request
from omni.contract.types import DecisionRequest, Part
from preprocess.item import SLOTS


def _is_inline_media(item: JSONValue) -> bool:
    return isinstance(item, dict) or (isinstance(item, str) and item.strip().lower().startswith("data:"))


def file_media(body: JSONObject, root: Path) -> tuple[JSONObject, list[Part], list[str]]:
    """(body without its path fields, a part per file in slot order, the path each part was written as).

    InvalidRequest at the first bad entry (loc `(field,)` or `(field, i)`), as a request rule would be."""
    body = dict(body)
    parts: list[Part] = []
    files: list[str] = []
    for field in SLOTS:
        items = body.get(field)
        if not isinstance(items, list) or all(_is_inline_media(item) for item in items):
            continue                            # absent, malformed (the validator says so) or all inline
        if any(_is_inline_media(item) for item in items):
            raise InvalidRequest.one((field,), "mix of data URLs and file paths; use one form per field")
        for i, item in enumerate(items):
            parts.append(Part(field, _read_media_file(item, root, (field, i)), origin=f"file {item}"))
            files.append(item)
        del body[field]
    return body, parts, files


def _read_media_file(item: JSONValue, root: Path, loc: Loc) -> bytes:
    """The bytes of one path entry (relative to `root`); InvalidRequest at `loc` when it cannot be read."""
    if not isinstance(item, str) or not item.strip():
        raise InvalidRequest.one(loc, "a media entry must be a data URL or a file path")
    if item.lower().startswith(("http:", "https:")):
        raise InvalidRequest.one(loc, "remote URLs are not fetched; save the file next to the dataset")
    path = (root / item).resolve()
    if not path.is_file():
        raise InvalidRequest.one(loc, f"file not found: {item} (looked for {path})", "file_not_found")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InvalidRequest.one(loc, f"cannot read {item}: {exc.strerror or exc}", "file_unreadable") from None


@dataclass(frozen=True)
class RequestLine:
    """One request line with its labels optional (a backlog line): the body as the wire parser takes it (`labels`
    and path media fields removed), a part per media file, and each part's path as written in the line."""

    body: JSONValue                # a non-object JSON value is kept as is: the wire parser says what is wrong
    parts: tuple[Part, ...] = ()
    files: tuple[str, ...] = ()    # files[i] is the path (relative to the input file) that parts[i] was read from


def read_request_line(text: str | bytes, root: Path) -> RequestLine:
    """A dataset-format line whose `labels` are optional and not checked → RequestLine.

    InvalidRequest (the wire's own issues) when the line is not JSON (json_invalid) or a media file cannot be read;
    everything else is left to `parse_request` (or to a server), so a line fails here exactly as its body would."""
    body = load_json(text)
    if not isinstance(body, dict):
        return RequestLine(body)
    body.pop("labels", None)
    stripped, parts, files = file_media(body, root)
    return RequestLine(stripped, tuple(parts), tuple(files))


def parse_request_line(text: str | bytes, root: Path, config: EngineConfig,
                       adapters: Sequence[str] = ()) -> DecisionRequest:
    """A line as `read_request_line` reads it → the validated request; InvalidRequest (or a MediaError) otherwise.
    `adapters`: the adapters served besides the base (a line's `model` may name one)."""
    line = read_request_line(text, root)
    return parse_request(line.body, config, line.parts, adapters)
