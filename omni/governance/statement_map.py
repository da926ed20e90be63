"""The statement map: the platform's side of DSA statements of reasons (which decisions get one, what it says).

A TOML file, read with the standard library's tomllib (Python 3.11+) and checked whole when it is read, before any
log is: every value against the database's list or limit (`omni.governance.statement_schema`), and the database's rules
between fields, on each rule with the defaults it inherits. Errors name the file and the key path
(`rules[2].when.answer`, `defaults.territorial_scope[1]`) or, for TOML itself, the line and column::

    [defaults]                             # optional: every rule starts from these
    source_type = "SOURCE_VOLUNTARY"
    territorial_scope = "EEA"              # a list of country codes, or "EU" / "EEA"
    content_date = "application_date"      # only if content is decided on as it is posted (see below)

    [[rules]]                              # in order: the first rule whose conditions all hold gives the statement
    name = "hateful conduct"               # optional, for messages
    when = {question = "hateful", answer = true, at_least = 0.9}
    decision_visibility = ["DECISION_VISIBILITY_CONTENT_REMOVED"]
    decision_ground = "DECISION_GROUND_INCOMPATIBLE_CONTENT"
    incompatible_content_ground = "Community guidelines, section 3"
    incompatible_content_explanation = "The post attacks people for a protected characteristic."
    category = "STATEMENT_CATEGORY_ILLEGAL_OR_HARMFUL_SPEECH"
    decision_facts = "Our automated classifier found hateful conduct; the post was removed."

`when` is one condition or a list of them (all must hold). A condition names a `question` and either
- `answer`: noul `true` / `false`, a choice option id (a string), a score level (its index, an integer), met when it
  is the model's top answer, or with `at_least = p` when the model gave it a probability >= p;
- `score_at_least = x` (score questions): the model's expected `score` is >= x.
(How decisions meet them, reviewers' labels included, is `omni.governance.statements`'.)

Statement fields a map may set: every field of `statement_schema.FIELD_ORDER` except the three the export fills
(`automated_decision`, `application_date`, `puid`); `automated_detection` defaults to "Yes" and may be set to "No"
(the content came to the platform by a notice). The database's rules checked: the required fields (decision_ground,
category, decision_facts, source_type, territorial_scope), at least one of the four restrictions, decision_ground ->
its two explanation fields (and no fields of the other ground), `*_OTHER` -> its `*_other` text (and not without),
no source_identity with SOURCE_VOLUNTARY. `content_date` (when the platform started hosting the content) is required
by the database and unknown to the service: the map may only say `"application_date"`; without it, statements leave
it out and `StatementMap.notes` says it must be added before submission.
Knows nothing of logs, records or the serving internals: TOML in, a checked `StatementMap` out.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni.contract.errors import OmniError
from omni.contract.json_values import JSONValue
from omni.contract.toml_text import TomlProblem, load_toml
from omni.governance import statement_schema as db

FILLED_BY_EXPORT = ("automated_decision", "application_date", "puid")
REQUIRED = ("decision_ground", "category", "decision_facts", "source_type", "territorial_scope")
RESTRICTIONS = ("decision_visibility", "decision_monetary", "decision_provision", "decision_account")
MAX_SCORE_LEVEL = 9                      # a score question has 2..10 levels
CONTENT_DATE_NOTE = ("content_date (when the platform started hosting the content) is required by the database and "
                     "not known to the service: the statements leave it out; add it before submitting them, or set "
                     'content_date = "application_date" in the map if content is decided on as it is posted')
CONDITION_KEYS = ("question", "answer", "at_least", "score_at_least")
# field -> (kind, allowed values); kinds: one (a value of the list), many (a non-empty list of them), text (its limit)
MAP_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "decision_visibility": ("many", db.DECISION_VISIBILITIES), "decision_monetary": ("one", db.DECISION_MONETARIES),
    "decision_provision": ("one", db.DECISION_PROVISIONS), "decision_account": ("one", db.DECISION_ACCOUNTS),
    "account_type": ("one", db.ACCOUNT_TYPES), "decision_ground": ("one", db.DECISION_GROUNDS),
    "incompatible_content_illegal": ("one", db.YES_NO), "content_type": ("many", db.CONTENT_TYPES),
    "category": ("one", db.STATEMENT_CATEGORIES), "category_addition": ("many", db.STATEMENT_CATEGORIES),
    "category_specification": ("many", db.KEYWORDS), "territorial_scope": ("scope", db.COUNTRY_CODES),
    "content_language": ("one", db.LANGUAGE_CODES), "content_date": ("one", ("application_date",)),
    "source_type": ("one", db.SOURCE_TYPES), "automated_detection": ("one", db.YES_NO),
    **{name: ("text", ()) for name in db.TEXT_LIMITS_CHARS if name != "puid"},
}
# (field, value) -> the fields that value requires, and the fields it alone allows
DEPENDENT_FIELDS = (
    ("decision_ground", "DECISION_GROUND_ILLEGAL_CONTENT",
     ("illegal_content_legal_ground", "illegal_content_explanation"), ()),
    ("decision_ground", "DECISION_GROUND_INCOMPATIBLE_CONTENT",
     ("incompatible_content_ground", "incompatible_content_explanation"), ("incompatible_content_illegal",)),
    ("decision_visibility", "DECISION_VISIBILITY_OTHER", ("decision_visibility_other",), ()),
    ("decision_monetary", "DECISION_MONETARY_OTHER", ("decision_monetary_other",), ()),
    ("content_type", "CONTENT_TYPE_OTHER", ("content_type_other",), ()),
    ("category_specification", "KEYWORD_OTHER", (), ("category_specification_other",)),
)


class StatementMapError(OmniError, ValueError):
    """A statement map that cannot be read or used; the message names the file and the key (or the TOML line)."""


@dataclass(frozen=True)
class Condition:
    path: str                                 # where the map says it: rules[0].when, rules[1].when[2]
    question: str
    answer: bool | int | str | None = None
    at_least: float | None = None
    score_at_least: float | None = None

    @property
    def question_type(self) -> str:
        """The type of question this condition can be met by."""
        if self.score_at_least is not None or (isinstance(self.answer, int) and not isinstance(self.answer, bool)):
            return "score"
        return "noul" if isinstance(self.answer, bool) else "choice"


@dataclass(frozen=True)
class Rule:
    index: int
    name: str
    conditions: tuple[Condition, ...]
    fields: Mapping[str, JSONValue]          # the map's statement fields (defaults merged), checked and normalised

    @property
    def label(self) -> str:
        return f"rules[{self.index}]" + (f" ({self.name})" if self.name else "")


@dataclass(frozen=True)
class StatementMap:
    rules: tuple[Rule, ...]
    notes: tuple[str, ...] = ()              # what the statements will lack, to tell the user once


def load_statement_map(path: str | Path) -> StatementMap:
    """Read and check a TOML statement map; StatementMapError naming the file and the key or line at fault."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StatementMapError(f"{path}: cannot read the statement map ({exc})") from None
    return parse_statement_map(text, str(path))


def parse_statement_map(text: str, source: str = "statement map") -> StatementMap:
    try:
        data = load_toml(text)
    except TomlProblem as exc:      # its syntax, or nested past the limit (never a RecursionError)
        raise StatementMapError(f"{source}: {exc}") from None
    try:
        return _read_map(data)
    except StatementMapError as exc:
        raise StatementMapError(f"{source}: {exc}") from None


def _read_map(data: dict[str, Any]) -> StatementMap:
    _no_unknown_keys(data, ("defaults", "rules"), "")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise StatementMapError("defaults: must be a table ([defaults])")
    default_fields = _read_fields(defaults, "defaults")
    rules = data.get("rules")
    if not isinstance(rules, list) or not rules or not all(isinstance(r, dict) for r in rules):
        raise StatementMapError("rules: at least one [[rules]] table is required")
    read = tuple(_read_rule(i, rule, default_fields) for i, rule in enumerate(rules))
    notes: tuple[str, ...] = ()
    if not all("content_date" in r.fields for r in read):
        notes = (CONTENT_DATE_NOTE,)
    return StatementMap(read, notes)


def _read_rule(index: int, table: dict[str, Any], defaults: dict[str, tuple[JSONValue, str]]) -> Rule:
    path = f"rules[{index}]"
    name = table.get("name", "")
    if not isinstance(name, str):
        raise StatementMapError(f"{path}.name: must be a string")
    if "when" not in table:
        raise StatementMapError(f"{path}.when: missing (which decisions this rule selects)")
    when = table["when"]
    conditions: tuple[Condition, ...]
    if isinstance(when, dict):
        conditions = (_read_condition(when, f"{path}.when"),)
    elif isinstance(when, list) and when and all(isinstance(c, dict) for c in when):
        conditions = tuple(_read_condition(c, f"{path}.when[{i}]") for i, c in enumerate(when))
    else:
        raise StatementMapError(f"{path}.when: must be a table {{question = ..., answer = ...}} or a list of them")
    own = _read_fields({k: v for k, v in table.items() if k not in ("name", "when")}, path)
    merged = {**defaults, **own}
    _check_statement(merged, path)
    return Rule(index, name, conditions, {k: v for k, (v, _) in merged.items()})


def _read_condition(table: dict[str, Any], path: str) -> Condition:
    _no_unknown_keys(table, CONDITION_KEYS, path)
    question = table.get("question")
    if not isinstance(question, str) or not question:
        raise StatementMapError(f"{path}.question: missing (the id of a question of the logged requests)")
    if ("answer" in table) == ("score_at_least" in table):
        raise StatementMapError(f"{path}: give either answer (noul true/false, a choice id, a score level) or "
                                "score_at_least")
    answer = table.get("answer")
    if answer is not None and not isinstance(answer, (bool, int, str)):
        raise StatementMapError(f"{path}.answer: must be true/false (noul), a choice id (string) or a score level "
                                f"(integer), not {answer!r}")
    if isinstance(answer, int) and not isinstance(answer, bool) and not 0 <= answer <= MAX_SCORE_LEVEL:
        raise StatementMapError(f"{path}.answer: a score level is 0..{MAX_SCORE_LEVEL}, not {answer}")
    at_least = _number(table, "at_least", path, 0.0, 1.0)
    if at_least is not None and answer is None:
        raise StatementMapError(f"{path}.at_least: only with answer (the probability of that answer)")
    if at_least is not None and at_least <= 0:
        raise StatementMapError(f"{path}.at_least: a probability in (0, 1], not {at_least}")
    score_at_least = _number(table, "score_at_least", path, 0.0, float(MAX_SCORE_LEVEL))
    return Condition(path, question, answer, at_least, score_at_least)


def _number(table: dict[str, Any], key: str, path: str, low: float, high: float) -> float | None:
    if key not in table:
        return None
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise StatementMapError(f"{path}.{key}: a number in [{low:g}, {high:g}], not {value!r}")
    return float(value)


def _read_fields(table: dict[str, Any], path: str) -> dict[str, tuple[JSONValue, str]]:
    """Each statement field of a table, checked on its own and normalised: name -> (value, its key path)."""
    fields: dict[str, tuple[JSONValue, str]] = {}
    for name, value in table.items():
        where = f"{path}.{name}"
        if name in FILLED_BY_EXPORT:
            raise StatementMapError(f"{where}: filled by the export from each decision; remove it from the map")
        if name not in MAP_FIELDS:
            raise StatementMapError(f"{where}: not a statement field the map can set"
                                    f"{_suggest(name, MAP_FIELDS)}; the fields are: {', '.join(MAP_FIELDS)}")
        kind, allowed = MAP_FIELDS[name]
        fields[name] = (_read_value(kind, allowed, value, where, name), where)
    return fields


def _read_value(kind: str, allowed: tuple[str, ...], value: JSONValue, where: str, name: str) -> JSONValue:
    if kind == "text":
        if not isinstance(value, str) or not value.strip():
            raise StatementMapError(f"{where}: must be a non-empty string")
        limit = db.TEXT_LIMITS_CHARS[name]
        if len(value) > limit:
            raise StatementMapError(f"{where}: {len(value)} characters; the database takes at most {limit}")
        if name == "decision_ground_reference_url" and not re.match(r"https?://\S+$", value):
            raise StatementMapError(f"{where}: must be an http(s) URL, not {value!r}")
        return value
    if kind == "scope" and value in ("EU", "EEA"):
        return list(db.EU_COUNTRY_CODES if value == "EU" else db.EEA_COUNTRY_CODES)
    if kind in ("many", "scope"):
        if not isinstance(value, list) or not value:
            shape = 'a list of country codes, or "EU" / "EEA"' if kind == "scope" else "a non-empty list"
            raise StatementMapError(f"{where}: must be {shape}")
        items = [_one_of(allowed, item, f"{where}[{i}]") for i, item in enumerate(value)]
        return sorted(set(items)) if kind == "scope" else list(dict.fromkeys(items))
    return _one_of(allowed, value, where)


def _one_of(allowed: tuple[str, ...], value: JSONValue, where: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise StatementMapError(f"{where}: {value!r} is not one of the database's values{_suggest(value, allowed)}; "
                                f"allowed: {', '.join(allowed)}")
    return value


def _suggest(value: JSONValue, allowed: Iterable[str]) -> str:
    close = difflib.get_close_matches(value, list(allowed), n=1) if isinstance(value, str) else []
    return f" (did you mean {close[0]}?)" if close else ""


def _no_unknown_keys(table: dict[str, Any], known: tuple[str, ...], path: str) -> None:
    """`path` is the table's key path ("" for the map itself)."""
    for key in table:
        if key not in known:
            raise StatementMapError(f"{path + '.' if path else ''}{key}: unknown key{_suggest(key, known)}; "
                                    f"{path or 'the map'} takes {', '.join(known)}")


def _check_statement(fields: dict[str, tuple[JSONValue, str]], path: str) -> None:
    """The database's rules between fields, on a rule's fields (its own and the defaults')."""
    for name in REQUIRED:
        if name not in fields:
            raise StatementMapError(f"{path}.{name}: required by the database; set it in the rule or in [defaults]")
    if not any(name in fields for name in RESTRICTIONS):
        raise StatementMapError(f"{path}: the database needs at least one restriction: {', '.join(RESTRICTIONS)}")
    for name, trigger, requires, only_with in DEPENDENT_FIELDS:
        value, where = fields.get(name, (None, ""))
        triggered = value == trigger or (isinstance(value, list) and trigger in value)
        for needed in requires:
            if triggered and needed not in fields:
                raise StatementMapError(f"{path}.{needed}: required when {where} is {trigger}")
        for dependent in (*requires, *only_with):
            if not triggered and dependent in fields:
                raise StatementMapError(f"{fields[dependent][1]}: only with {name} {trigger}"
                                        f"{f' ({where} is {value})' if value is not None else ''}")
    source, where = fields["source_type"]
    if source == "SOURCE_VOLUNTARY" and "source_identity" in fields:
        raise StatementMapError(f"{fields['source_identity'][1]}: not taken with {where} SOURCE_VOLUNTARY")
