"""Validates a System One request body (a parsed JSON mapping) and converts it to a `DecisionRequest`.

The one authority on request rules for every edge (CLI, HTTP, datasets). Every violation becomes an `Issue` naming
the field path and the limit; all issues of a body are reported together. Clef media items (`images`, `audio`,
`videos`: data URLs or `{content_type, base64}`) are base64-decoded here into `MediaRef`s; they are sniffed and
decoded later by `preprocess`. Knows nothing of HTTP, pydantic, torch or the model. Never fetches URLs or reads paths.
"""
from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from omni.contract.config import EngineConfig
from omni.contract.errors import InvalidRequest, Issue
from omni.contract.types import (
    NOUL_DEFAULT_FALSE,
    NOUL_DEFAULT_TRUE,
    QUESTION_TYPES,
    DecisionRequest,
    MediaRef,
    Option,
    Question,
)

MEDIA_SLOTS = (("images", "image"), ("audio", "audio"), ("videos", "video"))
MAX_JSON_DEPTH = 64     # nesting of state / instructions / descriptions; deeper is refused, never a RecursionError
_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[^;,]*)*)(?P<b64>;base64)?,(?P<data>.*)$",
                       re.IGNORECASE | re.DOTALL)


def load_json(data: bytes | str, loc=()) -> Any:
    """Parse a JSON document from a caller; every way it can be unreadable is an InvalidRequest (json_invalid)."""
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        problem = exc.msg
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 ({exc.reason})"
    except RecursionError:
        problem = "nested too deeply"
    except ValueError as exc:       # e.g. an integer of more than 4,300 digits
        problem = str(exc).split(";")[0]
    raise InvalidRequest.one(tuple(loc), f"JSON decode error: {problem}", "json_invalid")


def json_value_problem(value: Any, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Why a JSON value cannot be rendered into the prompt (too deep, or text that is not valid Unicode), else None.

    Iterative, so a hostile depth cannot exhaust the stack while it is being checked.
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "contains an unpaired surrogate (not valid Unicode text)"
        elif isinstance(item, (dict, list)):
            if depth > max_depth:
                return f"is nested more than {max_depth} levels deep"
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item)
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)
    return None


def _is_entry(value: Any) -> bool:
    return isinstance(value, (str, dict, list))


class _Collector:
    def __init__(self):
        self.issues: list[Issue] = []

    def add(self, loc, msg: str, type_: str = "value_error") -> None:
        self.issues.append(Issue(tuple(loc), msg, type_))

    def count(self, loc, n: int, minimum: int, maximum: int, container: str) -> None:
        """Pydantic-style too_short / too_long messages for a map ("Dictionary") or a list ("List")."""
        for bound, word, kind, broken in ((minimum, "least", "too_short", n < minimum),
                                          (maximum, "most", "too_long", n > maximum)):
            if broken:
                noun = "item" if bound == 1 else "items"
                self.add(loc, f"{container} should have at {word} {bound} {noun} after validation, not {n}", kind)


def _noul_options(criteria: Any, loc, issues: _Collector) -> tuple[Option, ...]:
    descriptions = {"true": NOUL_DEFAULT_TRUE, "false": NOUL_DEFAULT_FALSE}
    if criteria is not None:
        if not isinstance(criteria, dict):
            issues.add(loc, "noul criteria must be an object with optional 'true' and 'false' entries", "dict_type")
            return ()
        for key in ("true", "false"):     # an explicit null removes the description; other keys are ignored
            if key in criteria:
                if criteria[key] is not None and not _is_entry(criteria[key]):
                    issues.add(loc + (key,), "must be a string, object, array or null", "entry_type")
                descriptions[key] = criteria[key]
    return (Option("true", descriptions["true"]), Option("false", descriptions["false"]))


def _choice_options(criteria: Any, loc, config: EngineConfig, issues: _Collector) -> tuple[Option, ...]:
    if criteria is None:
        issues.add(loc, "Field required", "missing")
        return ()
    if not isinstance(criteria, dict):
        issues.add(loc, "choice criteria must be an object: option id → description (or null)", "dict_type")
        return ()
    issues.count(loc, len(criteria), 2, config.max_choice_options, "Dictionary")
    for key, value in criteria.items():
        if key == "":
            issues.add(loc, "option ids must be non-empty strings", "string_too_short")
        if value is not None and not _is_entry(value):
            issues.add(loc + (key,), "must be a string, object, array or null", "entry_type")
    return tuple(Option(str(k), v) for k, v in criteria.items())


def _score_options(criteria: Any, loc, config: EngineConfig, issues: _Collector) -> tuple[Option, ...]:
    if criteria is None:
        issues.add(loc, "Field required", "missing")
        return ()
    if not isinstance(criteria, list):
        issues.add(loc, "score criteria must be a list of levels, lowest first (the map form is not accepted)",
                   "list_type")
        return ()
    issues.count(loc, len(criteria), 2, config.max_score_levels, "List")
    for i, level in enumerate(criteria):
        if not _is_entry(level):
            issues.add(loc + (i,), "each level must be a string, object or array", "entry_type")
    return tuple(Option(str(i), level) for i, level in enumerate(criteria))


def _question(qid: str, raw: Any, config: EngineConfig, issues: _Collector) -> Question | None:
    loc = ("questions", qid)
    if not isinstance(raw, dict):
        issues.add(loc, "Input should be a valid dictionary", "dict_type")
        return None
    qtype = raw.get("type")
    if qtype is None:
        issues.add(loc + ("type",), "Field required", "missing")
        return None
    if qtype not in QUESTION_TYPES:
        issues.add(loc, f"Input tag {qtype!r} found using 'type' does not match any of the expected tags: 'noul', "
                   "'choice', 'score'", "union_tag_invalid")
        return None
    instructions = raw.get("instructions")
    if instructions is not None and not _is_entry(instructions):
        issues.add(loc + (qtype, "instructions"), "must be a string, object, array or null", "entry_type")
    criteria_loc = loc + (qtype, "criteria")
    criteria = raw.get("criteria")
    for field, value in (("instructions", instructions), ("criteria", criteria)):
        if (problem := json_value_problem(value)) is not None:
            issues.add(loc + (qtype, field), f"{field} {problem}", "value_error")
            return None
    if qtype == "noul":
        options = _noul_options(criteria, criteria_loc, issues)
    elif qtype == "choice":
        options = _choice_options(criteria, criteria_loc, config, issues)
    else:
        options = _score_options(criteria, criteria_loc, config, issues)
    return Question(qid, qtype, options, instructions)


def _questions(raw: Any, config: EngineConfig, issues: _Collector) -> tuple[Question, ...]:
    if raw is None:
        issues.add(("questions",), "Field required", "missing")
        return ()
    if not isinstance(raw, dict):
        issues.add(("questions",), "questions must be an object: question id → question", "dict_type")
        return ()
    issues.count(("questions",), len(raw), 1, config.max_questions, "Dictionary")
    questions = []
    for qid, body in raw.items():
        if qid == "":
            issues.add(("questions", qid), "question ids must be non-empty strings", "string_too_short")
        elif (problem := json_value_problem(qid)) is not None:
            issues.add(("questions", qid.encode("utf-8", "replace").decode()), f"question id {problem}", "value_error")
        elif len(qid) > config.max_question_id_chars:
            issues.add(("questions", qid), f"question ids may have at most {config.max_question_id_chars} "
                       f"characters, not {len(qid)}", "string_too_long")
        question = _question(qid, body, config, issues)
        if question is not None:
            questions.append(question)
    return tuple(questions)


def decode_media_item(item: Any, loc, issues: _Collector) -> tuple[bytes, str | None] | None:
    """A data URL or `{content_type, base64}` → (bytes, declared type). URLs and paths are refused."""
    if isinstance(item, dict):
        content_type, payload = item.get("content_type"), item.get("base64")
        if not isinstance(content_type, str) or not isinstance(payload, str):
            issues.add(loc, "a media object needs string fields 'content_type' and 'base64'", "media_item")
            return None
    elif isinstance(item, str):
        match = _DATA_URL.match(item.strip())
        if match is None or not match.group("b64"):
            kind = "remote URLs are not fetched" if item.lower().startswith(("http:", "https:")) else "not a data URL"
            issues.add(loc, f"{kind}: send a base64 data URL (data:<type>;base64,...) or "
                       "{\"content_type\", \"base64\"}", "media_item")
            return None
        content_type, payload = match.group("mime"), match.group("data")
    else:
        issues.add(loc, "a media item must be a data URL string or {\"content_type\", \"base64\"}", "media_item")
        return None
    try:
        data = base64.b64decode(re.sub(r"\s+", "", payload), validate=True)
    except (binascii.Error, ValueError):
        issues.add(loc, "invalid base64 payload", "media_item")
        return None
    if not data:
        issues.add(loc, "empty media item", "media_item")
        return None
    return data, content_type


def _media(body: Mapping, issues: _Collector) -> list[MediaRef]:
    refs = []
    for field, kind in MEDIA_SLOTS:
        items = body.get(field)
        if items is None:
            continue
        if not isinstance(items, list):
            issues.add((field,), f"{field} must be a list of data URLs or {{content_type, base64}} objects", "list_type")
            continue
        for i, item in enumerate(items):
            decoded = decode_media_item(item, (field, i), issues)
            if decoded is not None:
                refs.append(MediaRef(kind, decoded[0], f"{field}[{i}]", decoded[1]))
    return refs


def parse_request(body: Any, config: EngineConfig, extra_media: Sequence[MediaRef] = ()) -> DecisionRequest:
    """Validate a System One body; unknown top-level fields are ignored. Raises InvalidRequest with every issue."""
    issues = _Collector()
    if not isinstance(body, Mapping):
        raise InvalidRequest.one((), "the request body must be a JSON object", "dict_type")
    state = body.get("state")
    if "state" not in body:
        issues.add(("state",), "Field required", "missing")
    elif not isinstance(state, (str, dict, list)):
        issues.add(("state",), "state must be a string, object or array", "state_type")
    elif (problem := json_value_problem(state)) is not None:
        issues.add(("state",), f"state {problem}", "value_error")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        issues.add(("model",), "model must be a string", "string_type")
    truncate = body.get("truncate", True)
    if not isinstance(truncate, bool):
        issues.add(("truncate",), "truncate must be a boolean", "bool_type")
    questions = _questions(body.get("questions"), config, issues)
    media = _media(body, issues) + list(extra_media)
    if issues.issues:
        raise InvalidRequest(issues.issues)
    order = {kind: rank for rank, (_, kind) in enumerate(MEDIA_SLOTS)}
    media.sort(key=lambda ref: order[ref.kind])   # stable: reference order is images, audio, videos
    return DecisionRequest(state=state, questions=questions, model=model, media=tuple(media), truncate=truncate,
                           request_id=body.get("id") if isinstance(body.get("id"), str) else None)
