"""Labelled datasets: a JSONL file of System One requests, each with `labels` → validated (request, labels) pairs.

One line = one request body as the API takes it (every media form of the wire: Clef slots, TypeSafe assets,
llama.cpp files), plus `"labels": {question_id: answer}` (noul: true/false, choice: an option id, score: the level
index 0..n-1). Questions without a label are still asked but not scored. The Clef media fields (`images`, `audio`,
`videos`) may also hold file paths relative to the dataset file: those files are read here (the dataset is the
operator's own file, never an HTTP caller's) and handed to the wire parser as parts of their slot, exactly as
`omni decide --image` does. Every bad line is reported with its line number in one `DatasetError`; nothing is skipped
silently (blank lines are not records). `read_request_line` / `parse_request_line` read one line of the same format
with `labels` optional and unchecked (an `omni batch` backlog), failing with the wire's own `InvalidRequest`.
Knows nothing of torch, the model or metrics; the request rules are `omni.contract.request.parse_request`'s.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omni.contract.config import EngineConfig
from omni.contract.errors import InvalidRequest, Loc, OmniError
from omni.contract.json_values import JSONObject, JSONValue, load_json
from omni.contract.request import parse_request
from omni.contract.types import DecisionRequest, Part, Question
from preprocess.item import SLOTS

MAX_PROBLEMS_SHOWN = 20


class DatasetError(OmniError):
    """Problems of a dataset file; `problems` lists (line number, message) for every bad line."""

    def __init__(self, path: str | Path, problems: list[tuple[int, str]]):
        self.path = str(path)
        self.problems = list(problems)
        shown = [f"{self.path}:{line}: {msg}" if line else f"{self.path}: {msg}"
                 for line, msg in self.problems[:MAX_PROBLEMS_SHOWN]]
        more = len(self.problems) - MAX_PROBLEMS_SHOWN
        super().__init__("\n".join(shown + ([f"... and {more} more"] if more > 0 else [])))


@dataclass(frozen=True)
class LabelledRequest:
    """A validated request, its labels as option ids (noul "true"/"false", choice id, score "k"), its line."""

    request: DecisionRequest
    labels: dict[str, str]
    line: int


def label_index(question: Question, option_id: str) -> int:
    """Index of `option_id` in the head's (prompt) order of `question`'s options."""
    return [o.id for o in question.prompt_options].index(option_id)


def _is_inline_media(item: JSONValue) -> bool:
    return isinstance(item, dict) or (isinstance(item, str) and item.strip().lower().startswith("data:"))


def _split_media(body: JSONObject, root: Path) -> tuple[JSONObject, list[Part]]:
    """Path entries → parts of their slot, read from disk; inline entries stay in the body for the parser."""
    try:
        body, parts, _ = _file_media(body, root)
    except InvalidRequest as exc:
        issue = exc.issues[0]
        where = issue.loc[0] if len(issue.loc) == 1 else f"{issue.loc[0]}[{issue.loc[1]}]"
        raise ValueError(f"{where}: {issue.msg}") from exc
    return body, parts


def _file_media(body: JSONObject, root: Path) -> tuple[JSONObject, list[Part], list[str]]:
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


def _normalise_label(question: Question, value: JSONValue) -> str:
    """The label as an option id, or ValueError naming the allowed values."""
    if question.type == "noul":
        if isinstance(value, bool):
            return "true" if value else "false"
        if value in ("true", "false"):
            return value
        raise ValueError(f"{value!r} is not a noul answer (true or false)")
    if question.type == "score":
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(question.options):
            return str(value)
        raise ValueError(f"{value!r} is not a level index of this score question (0..{len(question.options) - 1})")
    ids = [o.id for o in question.options]
    if isinstance(value, str) and value in ids:
        return value
    raise ValueError(f"{value!r} is not an option of this choice question ({', '.join(ids)})")


def _labels(raw: JSONValue, request: DecisionRequest) -> dict[str, str]:
    if not isinstance(raw, dict) or not raw:
        raise ValueError("labels: must be a non-empty object {question_id: answer}")
    questions = {q.id: q for q in request.questions}
    labels, problems = {}, []
    for qid, value in raw.items():
        if qid not in questions:
            problems.append(f"labels.{qid}: unknown question id (questions: {', '.join(questions)})")
            continue
        try:
            labels[qid] = _normalise_label(questions[qid], value)
        except ValueError as exc:
            problems.append(f"labels.{qid}: {exc}")
    if problems:
        raise ValueError("; ".join(problems))
    return labels


def parse_line(text: str, root: Path, config: EngineConfig, line: int) -> LabelledRequest:
    """One JSONL line → LabelledRequest; ValueError with every problem of the line."""
    try:
        body = load_json(text)
    except InvalidRequest as exc:
        raise ValueError(f"not valid JSON: {exc.issues[0].msg}") from exc
    if not isinstance(body, dict):
        raise ValueError("a line must be a JSON object (a request with labels)")  # noqa: TRY004 (bad data, not a bug)
    if "labels" not in body:
        raise ValueError("labels: missing (add {question_id: answer})")
    stripped, parts = _split_media(body, root)
    try:
        request = parse_request(stripped, config, parts)
    except InvalidRequest as exc:
        raise ValueError("; ".join(f"{'.'.join(map(str, i.loc)) or '(body)'}: {i.msg}" for i in exc.issues)) from exc
    return LabelledRequest(request, _labels(body["labels"], request), line)


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
    stripped, parts, files = _file_media(body, root)
    return RequestLine(stripped, tuple(parts), tuple(files))


def parse_request_line(text: str | bytes, root: Path, config: EngineConfig) -> DecisionRequest:
    """A line as `read_request_line` reads it → the validated request; InvalidRequest (or a MediaError) otherwise."""
    line = read_request_line(text, root)
    return parse_request(line.body, config, line.parts)


def load_dataset(path: str | Path, config: EngineConfig | None = None) -> list[LabelledRequest]:
    """Every record of a JSONL dataset; DatasetError listing each bad line (and an empty file) otherwise."""
    path = Path(path)
    config = config or EngineConfig()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(path, [(0, f"cannot read the dataset: {exc}")]) from exc
    records, problems = [], []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            records.append(parse_line(text, path.parent, config, number))
        except ValueError as exc:
            problems.append((number, str(exc)))
    if problems:
        raise DatasetError(path, problems)
    if not records:
        raise DatasetError(path, [(0, "no records (one JSON request with labels per line)")])
    return records
