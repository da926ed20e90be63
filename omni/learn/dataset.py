"""Labelled datasets: a JSONL file of System One requests, each with `labels` → validated (request, labels) pairs.

One line = one request body as the API takes it (every media form of the wire: Clef slots, TypeSafe assets,
llama.cpp files), plus `"labels": {question_id: answer}` (noul: true/false, choice: an option id, score: the level
index 0..n-1). Questions without a label are still asked but not scored. The Clef media fields (`images`, `audio`,
`videos`) may also hold file paths relative to the dataset file: those files are read here (the dataset is the
operator's own file, never an HTTP caller's) and handed to the wire parser as parts of their slot, exactly as
`omni decide --image` does. Every bad line is reported with its line number in one `DatasetError`; nothing is skipped
silently (blank lines are not records). The media paths of a line are read by `omni.contract.request_line`, which
also reads a line whose `labels` are optional and unchecked (an `omni batch` backlog).
Knows nothing of torch, the model or metrics; the request rules are `omni.contract.request.parse_request`'s.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omni.contract.config import EngineConfig
from omni.contract.errors import InvalidRequest, OmniError
from omni.contract.json_values import JSONObject, JSONValue, load_json
from omni.contract.request import parse_request
from omni.contract.request_line import file_media
from omni.contract.types import DecisionRequest, Part, Question

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


def _split_media(body: JSONObject, root: Path) -> tuple[JSONObject, list[Part]]:
    """Path entries → parts of their slot, read from disk; inline entries stay in the body for the parser."""
    try:
        body, parts, _ = file_media(body, root)
    except InvalidRequest as exc:
        issue = exc.issues[0]
        where = issue.loc[0] if len(issue.loc) == 1 else f"{issue.loc[0]}[{issue.loc[1]}]"
        raise ValueError(f"{where}: {issue.msg}") from exc
    return body, parts


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
