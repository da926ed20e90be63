"""DSA statements of reasons from logged decisions: one per decision the statement map selects.

`omni export statements LOG --map MAP.toml` turns each logged decision (a decision-log record, `omni-decision/1`)
that the map (`omni.governance.statement_map`) selects into the payload the DSA Transparency Database's API takes
(`POST /api/v1/statement`; names and values are `omni.governance.statement_schema`'s, with their sources). What the
service knows it fills in; the rest is the map's:

    automated_detection  "Yes" (the service looked at the content), unless the map says "No"
    automated_decision   AUTOMATED_DECISION_FULLY, or AUTOMATED_DECISION_PARTIALLY when a reviewer labelled it
    content_type         the request's modalities: a non-empty state (text, or JSON) -> CONTENT_TYPE_TEXT, images ->
                         CONTENT_TYPE_IMAGE, audio -> CONTENT_TYPE_AUDIO, videos -> CONTENT_TYPE_VIDEO (+ the map's)
    application_date     the UTC date of `decided_at`, YYYY-MM-DD
    content_date         the same date, only when the map says content_date = "application_date"
    puid                 the request id; a record without one, or whose id has characters a puid may not hold
                         (`.` `:`), or whose id an earlier record already used, gets "omni-" + the first 40 hex digits
                         of the sha256 of the record (stable across exports), and a warning says so

With `evidence_facts`, a decision whose log record kept its evidence (`"evidence"`: asked for, or kept because the
policy routed it to review) has the facts it relied on added to `decision_facts` (DSA Art. 17(3)(b)): a sentence per
question the rule names, the heaviest place of each medium and of the state (`omni.governance.statement_facts`);
a record without evidence keeps the map's text alone (counted in the tally).

A decision meets a condition on a question when the reviewer's label of that question says so (a label always
prevails over the model), else when the model's answer does. A decision whose request lacks the question (or asks it
as another type, or without that option) does not meet the condition; decisions no rule selects get no statement. A
condition that no logged decision could meet (a question no decision asked, an option none offered, the wrong type:
most likely a typo) is an error once the log is read, naming it and listing the log's questions. A record that cannot
give a statement (no answers, a time the database cannot take, no content) is skipped with its reason.
Knows nothing of the serving internals, HTTP, the model or how the log is stored: it is handed records and labels,
and gives statements.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from omni.contract.answers import label_id, top_answer
from omni.contract.json_values import JSONObject, JSONValue
from omni.governance import statement_schema as db
from omni.governance.statement_facts import evidence_sentences, with_facts
from omni.governance.statement_map import (  # noqa: F401  (re-exported: the map and its errors, for the export's callers)
    Condition,
    Rule,
    StatementMap,
    StatementMapError,
    load_statement_map,
    parse_statement_map,
)

MODALITY_CONTENT_TYPES = {"images": "CONTENT_TYPE_IMAGE", "audio": "CONTENT_TYPE_AUDIO",
                          "videos": "CONTENT_TYPE_VIDEO"}


class RecordError(ValueError):
    """A logged decision that cannot give a statement (the export skips it and says why)."""


@dataclass
class ExportTally:
    """What an export did: counts, the records it skipped and the warnings, one line each."""
    records: int = 0
    statements: int = 0
    unselected: int = 0                      # decisions no rule selected
    without_evidence: int = 0                # with evidence_facts: statements whose record kept no evidence
    appealed: int = 0                        # statements whose decision was appealed (its decision_facts say so)
    by_rule: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------ one decision
def decision_answers(record: Mapping[str, Any]) -> dict[str, JSONObject]:
    """The answers of a logged decision (response.answers); RecordError when the record has none."""
    response = record.get("response")
    answers = response.get("answers") if isinstance(response, dict) else None
    if not isinstance(answers, dict) or not all(isinstance(a, dict) for a in answers.values()):
        raise RecordError("no response.answers")
    return answers


def _meets(condition: Condition, answer: JSONObject | None, labels: Mapping[str, JSONValue] | None) -> bool | None:
    """Whether a decision meets a condition; None when it cannot (no such question, another type, no such option)."""
    if answer is None or answer.get("type") != condition.question_type:
        return None
    probabilities = answer.get("probabilities")
    if condition.answer is not None and condition.question_type != "noul" \
            and (not isinstance(probabilities, dict) or label_id(condition.answer) not in probabilities):
        return None
    if labels is not None and condition.question in labels:
        label = labels[condition.question]
        if condition.score_at_least is not None:
            return isinstance(label, int) and not isinstance(label, bool) and label >= condition.score_at_least
        return type(label) is type(condition.answer) and label == condition.answer
    if condition.score_at_least is not None:
        return isinstance(answer.get("score"), (int, float)) and answer["score"] >= condition.score_at_least
    if condition.at_least is not None:
        return _probability(answer, condition.answer) >= condition.at_least
    return top_answer(answer) == label_id(condition.answer)


def _probability(answer: JSONObject, value: bool | int | str | None) -> float:
    if answer.get("type") == "noul":
        noul = answer.get("noul")
        p_true = float(noul) if isinstance(noul, (int, float)) else 0.0
        return p_true if value is True else 1.0 - p_true
    p = answer["probabilities"][label_id(value)]
    return float(p) if isinstance(p, (int, float)) else 0.0


def select_rule(statement_map: StatementMap, record: Mapping[str, Any],
                labels: Mapping[str, JSONValue] | None = None) -> Rule | None:
    """The first rule whose conditions the decision all meets (a reviewer's labels prevail), else None."""
    answers = decision_answers(record)
    for rule in statement_map.rules:
        if all(_meets(c, answers.get(c.question), labels) for c in rule.conditions):
            return rule
    return None


def content_types(request: Mapping[str, Any]) -> list[str]:
    """The database's content types of a logged request: its state (text, or JSON read as text) and media slots."""
    types = set()
    state = request.get("state")
    if (isinstance(state, str) and state.strip()) or (isinstance(state, (dict, list)) and state):
        types.add("CONTENT_TYPE_TEXT")
    types.update(ct for slot, ct in MODALITY_CONTENT_TYPES.items() if request.get(slot))
    return sorted(types)


def application_date(decided_at: JSONValue) -> str:
    """`decided_at` (ISO 8601; "Z" or an offset; naive is UTC) as the database's UTC date, YYYY-MM-DD."""
    if not isinstance(decided_at, str):
        raise RecordError(f"decided_at is {decided_at!r}, not an ISO 8601 time")
    try:
        moment = datetime.fromisoformat(decided_at[:-1] + "+00:00" if decided_at.endswith("Z") else decided_at)
    except ValueError:
        raise RecordError(f"decided_at {decided_at!r} is not an ISO 8601 time") from None
    day = (moment if moment.tzinfo is None else moment.astimezone(timezone.utc)).date().isoformat()
    first, last = db.APPLICATION_DATE_RANGE
    if not first <= day <= last:
        raise RecordError(f"decided_at {decided_at}: the database takes application dates {first}..{last}")
    return day


def record_puid(record: Mapping[str, Any]) -> tuple[str, str | None]:
    """The statement's puid: the request id, else one derived from the record; and a warning when derived."""
    request_id = record.get("request_id")
    if isinstance(request_id, str) and re.fullmatch(db.PUID_PATTERN, request_id):
        return request_id, None
    puid = derived_puid(record)
    why = "has no request id" if not request_id else f"request id {request_id!r} is not a valid puid ([a-zA-Z0-9_-])"
    return puid, f"the decision {why}: puid {puid} (the sha256 of its record)"


def derived_puid(record: Mapping[str, Any]) -> str:
    canonical = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "omni-" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:40]


def appeal_sentence(appeal: Mapping[str, Any]) -> str:
    """What became of an appeal, for `decision_facts`: pending, upheld or reversed, with the days."""
    made = str(appeal.get("appealed_at") or "")[:10]
    result, day = appeal.get("result"), str(appeal.get("decided_at") or "")[:10]
    if result == "upheld":
        return f"Appealed on {made}; the appeal was decided on {day}: the decision was upheld."
    if result == "reversed":
        return f"Appealed on {made}; the appeal was decided on {day}: the decision was reversed and no longer stands."
    return f"Appealed on {made}; the appeal is pending."


def statement_for(record: Mapping[str, Any], labels: Mapping[str, JSONValue] | None, rule: Rule,
                  evidence_facts: bool = False, appeal: Mapping[str, Any] | None = None) -> JSONObject:
    """The statement of reasons of one logged decision under `rule`. `labels` are a reviewer's labels of the decision
    ({question: value}, possibly empty), None when no reviewer labelled it. RecordError for a record that cannot give
    one (no time, no content). The puid is `record_puid`'s (its warning is `export_statements`' to give).
    `evidence_facts`: the record's kept evidence added to `decision_facts` (see the module docstring)."""
    request = record.get("request")
    if not isinstance(request, dict):
        raise RecordError("no request")
    fields = dict(rule.fields)
    types = sorted({*content_types(request), *fields.pop("content_type", [])})
    if not types:
        raise RecordError("the request has no content (an empty state and no media): no content_type")
    day = application_date(record.get("decided_at"))
    statement: JSONObject = {**fields, "content_type": types, "application_date": day,
                             "automated_detection": fields.get("automated_detection", "Yes"),
                             "automated_decision": "AUTOMATED_DECISION_FULLY" if labels is None
                             else "AUTOMATED_DECISION_PARTIALLY",
                             "puid": record_puid(record)[0]}
    if fields.get("content_date") == "application_date":
        statement["content_date"] = day
    if evidence_facts and isinstance(statement.get("decision_facts"), str):
        sentences = evidence_sentences(record.get("evidence"), [c.question for c in rule.conditions], labels)
        statement["decision_facts"] = with_facts(statement["decision_facts"], sentences,
                                                 db.TEXT_LIMITS_CHARS["decision_facts"])
    if appeal is not None and isinstance(statement.get("decision_facts"), str):     # DSA Art. 20: its redress
        facts, said = str(statement["decision_facts"]), appeal_sentence(appeal)
        if len(facts) + len(said) + 1 <= db.TEXT_LIMITS_CHARS["decision_facts"]:
            statement["decision_facts"] = f"{facts}\n{said}"
    return {name: statement[name] for name in db.FIELD_ORDER if name in statement}


# ------------------------------------------------------------------------------------------------ a whole log
def export_statements(records: Iterable[Mapping[str, Any]], statement_map: StatementMap,
                      labels: Mapping[str, Mapping[str, JSONValue]] | None = None,
                      tally: ExportTally | None = None, evidence_facts: bool = False,
                      appeals: Mapping[str, Mapping[str, Any]] | None = None) -> Iterator[JSONObject]:
    """One statement per decision the map selects, in log order.

    `labels` maps a request id to a reviewer's labels of that decision ({question: value}; `{}` when only the fact
    that it was labelled is known): those decisions are AUTOMATED_DECISION_PARTIALLY and their labels prevail over the
    model's answers. `tally` (if given) is filled as records go: counts, skipped records and warnings. Once every
    record is read, a condition of the map that no decision could meet raises StatementMapError naming it and the
    questions the log has, so a caller writing the statements should write them to a temporary file and keep it
    only when this generator ends without an error. `evidence_facts`: each statement's `decision_facts` adds the
    facts its decision relied on, from the evidence its record kept. `appeals` maps a request id to its appeal
    (`omni.review.appeals`: appealed_at, result, decided_at): its `decision_facts` then says it was appealed and
    what became of it (the Transparency Database takes no field of its own for redress)."""
    labels = labels or {}
    tally = tally if tally is not None else ExportTally()
    conditions = [c for rule in statement_map.rules for c in rule.conditions]
    could_meet: set[str] = set()
    asked: dict[str, set[str]] = {}                          # question id -> the types and options the log has
    puids: set[str] = set()
    for number, record in enumerate(records, 1):
        tally.records += 1
        try:
            answers = decision_answers(record)
        except RecordError as exc:
            tally.skipped.append(f"record {number}: {exc}")
            continue
        for qid, answer in answers.items():
            options = answer.get("probabilities") if isinstance(answer.get("probabilities"), dict) else {}
            asked.setdefault(qid, set()).add(f"{answer.get('type')}" + (f" ({', '.join(options)})" if options else ""))
        request_id = record.get("request_id")
        mine = labels.get(request_id) if isinstance(request_id, str) else None
        could_meet.update(c.path for c in conditions if _meets(c, answers.get(c.question), mine) is not None)
        rule = select_rule(statement_map, record, mine)
        if rule is None:
            tally.unselected += 1
            continue
        try:
            appeal = (appeals or {}).get(request_id) if isinstance(request_id, str) else None
            statement = statement_for(record, mine, rule, evidence_facts, appeal)
            tally.appealed += appeal is not None
        except RecordError as exc:
            tally.skipped.append(f"record {number} (request {request_id}): {exc}")
            continue
        if evidence_facts and not isinstance(record.get("evidence"), dict):
            tally.without_evidence += 1
        _, warning = record_puid(record)
        if statement["puid"] in puids:
            statement["puid"] = derived_puid(record)
            warning = f"request id {request_id!r} was already used by an earlier decision: puid {statement['puid']}"
        puids.add(statement["puid"])
        if warning:
            tally.warnings.append(f"record {number}: {warning}")
        tally.statements += 1
        tally.by_rule[rule.label] = tally.by_rule.get(rule.label, 0) + 1
        yield statement
    unmet = [c for c in conditions if c.path not in could_meet]
    if tally.records and unmet:
        seen = "; ".join(f"{q}: {', '.join(sorted(kinds))}" for q, kinds in sorted(asked.items())) or "none"
        raise StatementMapError("; ".join(f"{c.path}: no logged decision asks a {c.question_type} question "
                                          f"{c.question!r}" + (f" with the option {label_id(c.answer)!r}"
                                                               if c.answer is not None and c.question_type != "noul"
                                                               else "")
                                          for c in unmet) + f" (the log's questions: {seen})")
