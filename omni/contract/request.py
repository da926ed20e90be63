"""The one parser of the wire: a System One body (a parsed JSON mapping) plus named parts -> a `DecisionRequest`.

Every edge calls `parse_request`: HTTP (JSON and multipart), `omni decide`, dataset lines. It folds every media form
(`omni.contract.media_forms`: Clef slots, avrik `{data, media_type}` objects, llama.cpp `files`, TypeSafe `assets`
with placeholders, named parts),
validates state, questions, `truncate`, `x_isolation`, `x_audit`, `x_evidence` and `model`, and reports every violation of a body
together as `Issue`s naming the field path and the limit; a well-formed request for a model this server does not answer as is `UnknownModel`.
Knows nothing of HTTP, pydantic, torch or the model. Never fetches URLs or reads paths.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from omni.contract.config import EngineConfig
from omni.contract.errors import InvalidRequest, Issues, Loc, UnknownModel, clipped, quoted
from omni.contract.json_values import JSONValue, json_value_problem
from omni.contract.media_forms import collect_media, replace_placeholders
from omni.contract.types import (
    EVIDENCE_OPTIONS,
    ISOLATION_MODES,
    MAX_EVIDENCE_TOP,
    NOUL_DEFAULT_FALSE,
    NOUL_DEFAULT_TRUE,
    QUESTION_TYPES,
    DecisionRequest,
    EvidenceAsk,
    Option,
    Part,
    Question,
)


def _is_entry(value: JSONValue) -> bool:
    return isinstance(value, (str, dict, list))


def _noul_options(criteria: JSONValue, loc: Loc, issues: Issues) -> tuple[Option, ...]:
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


def _choice_options(criteria: JSONValue, loc: Loc, config: EngineConfig, issues: Issues) -> tuple[Option, ...]:
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


def _score_options(criteria: JSONValue, loc: Loc, config: EngineConfig, issues: Issues) -> tuple[Option, ...]:
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


def _question(qid: str, raw: JSONValue, config: EngineConfig, issues: Issues,
              replacements: dict[str, str]) -> Question | None:
    loc = ("questions", qid)
    if not isinstance(raw, dict):
        issues.add(loc, "Input should be a valid dictionary", "dict_type")
        return None
    qtype = raw.get("type")
    if qtype is None:
        issues.add(loc + ("type",), "Field required", "missing")
        return None
    if qtype not in QUESTION_TYPES:
        issues.add(loc, f"Input tag {quoted(qtype)} found using 'type' does not match any of the expected tags: "
                   "'noul', 'choice', 'score'", "union_tag_invalid")
        return None
    instructions = replace_placeholders(raw.get("instructions"), replacements)
    if instructions is not None and not _is_entry(instructions):
        issues.add(loc + (qtype, "instructions"), "must be a string, object, array or null", "entry_type")
    criteria_loc = loc + (qtype, "criteria")
    criteria = replace_placeholders(raw.get("criteria"), replacements)
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


def _questions(raw: JSONValue, config: EngineConfig, issues: Issues,
               replacements: dict[str, str]) -> tuple[Question, ...]:
    if raw is None:
        issues.add(("questions",), "Field required", "missing")
        return ()
    if not isinstance(raw, dict):
        issues.add(("questions",), "questions must be an object: question id → question", "dict_type")
        return ()
    issues.count(("questions",), len(raw), 1, config.max_questions, "Dictionary")
    questions = []
    for qid, body in raw.items():
        named = clipped(qid, config.max_question_id_chars)    # as issues name it: a too long id by its prefix
        if qid == "":
            issues.add(("questions", qid), "question ids must be non-empty strings", "string_too_short")
        elif (problem := json_value_problem(qid)) is not None:
            issues.add(("questions", named.encode("utf-8", "replace").decode()), f"question id {problem}",
                       "value_error")
        elif len(qid) > config.max_question_id_chars:
            issues.add(("questions", named), f"question ids may have at most {config.max_question_id_chars} "
                       f"characters, not {len(qid)}", "string_too_long")
        question = _question(named, body, config, issues, replacements)
        if question is not None:
            questions.append(question)
    return tuple(questions)


def served_model(name: str | None, config: EngineConfig, adapters: Sequence[str] = ()) -> str:
    """The name an accepted `model` field is answered as (missing = the base's served name; an adapter's name: that
    adapter); UnknownModel naming every model served otherwise."""
    accepted = tuple(dict.fromkeys((config.served_name, *config.model_aliases)))
    if name is None or name.strip() in accepted:
        return config.served_name
    if name in adapters:
        return name
    raise UnknownModel(name, tuple(dict.fromkeys((*accepted, *adapters))))


def parse_request(body: JSONValue, config: EngineConfig, parts: Sequence[Part] = (),
                  adapters: Sequence[str] = ()) -> DecisionRequest:
    """Validate a System One body and the parts sent beside it; unknown top-level fields are ignored.
    `adapters`: the names of the adapters served besides the base (a request's `model` may name one).

    Raises InvalidRequest with every issue of the body, then UnknownModel for a model this server does not serve.
    """
    issues = Issues()
    if not isinstance(body, Mapping):
        raise InvalidRequest.one((), "Input should be a valid dictionary or object", "model_attributes_type")
    media, replacements = collect_media(body, parts, issues)
    state = replace_placeholders(body.get("state"), replacements)
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
    isolation = body.get("x_isolation")
    if isolation is not None and isolation not in ISOLATION_MODES:
        issues.add(("x_isolation",), f"Input should be {' or '.join(map(repr, ISOLATION_MODES))}", "literal_error")
    audit = body.get("x_audit", False)
    if not isinstance(audit, bool):
        issues.add(("x_audit",), "x_audit must be a boolean", "bool_type")
    evidence = evidence_ask(body.get("x_evidence", False), issues)
    questions = _questions(body.get("questions"), config, issues, replacements)
    issues.raise_if_any()
    served_model(model, config, adapters)
    return DecisionRequest(state=state, questions=questions, model=model, media=tuple(media), truncate=truncate,
                           request_id=body.get("id") if isinstance(body.get("id"), str) else None, isolation=isolation,
                           audit=audit, evidence=evidence)


def evidence_ask(value: JSONValue, issues: Issues) -> EvidenceAsk | None:
    """`x_evidence`: false/absent -> None, true -> the chosen answers' top 3, or {"options": "chosen"|"all",
    "top": 1..MAX_EVIDENCE_TOP} (every key optional, no other key)."""
    if isinstance(value, bool):
        return EvidenceAsk() if value else None
    if not isinstance(value, dict):
        issues.add(("x_evidence",), 'x_evidence must be a boolean or an object {"options": "chosen" | "all", '
                   f'"top": 1..{MAX_EVIDENCE_TOP}}}', "bool_type")
        return None
    for key in sorted(set(value) - {"options", "top"}):
        issues.add(("x_evidence", key), f"unknown key {quoted(key)}: x_evidence takes options and top", "extra_forbidden")
    options, top = value.get("options", "chosen"), value.get("top", 3)
    if options not in EVIDENCE_OPTIONS:
        issues.add(("x_evidence", "options"), f"Input should be {' or '.join(map(repr, EVIDENCE_OPTIONS))}",
                   "literal_error")
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= MAX_EVIDENCE_TOP:
        issues.add(("x_evidence", "top"), f"top must be an integer from 1 to {MAX_EVIDENCE_TOP}", "int_type")
    if options not in EVIDENCE_OPTIONS or isinstance(top, bool) or not isinstance(top, int) \
            or not 1 <= top <= MAX_EVIDENCE_TOP or set(value) - {"options", "top"}:
        return None
    return EvidenceAsk(str(options), top)
