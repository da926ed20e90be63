"""DSA statements of reasons from logged decisions (omni.governance.statement_map, omni.governance.statements).

The map is checked against the database's values and rules when it is read (errors name the key or the TOML line),
selects decisions by the model's answers or a reviewer's labels, and each statement carries what the service knows
(detection, automation, content types, date, puid) and the map's rest. Records are built as the decision log writes
them: the request rendered, the answers of the real answer builder."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from omni.contract.answers import build_answers
from omni.contract.config import EngineConfig
from omni.contract.errors import OmniError
from omni.contract.render import render_request
from omni.contract.request import parse_request
from omni.governance import statement_schema as db
from omni.governance.statement_map import StatementMapError, load_statement_map, parse_statement_map
from omni.governance.statements import (
    ExportTally,
    RecordError,
    application_date,
    content_types,
    export_statements,
    select_rule,
    statement_for,
)

QUESTIONS = {"hateful": {"type": "noul", "instructions": "Does it attack people for who they are?"},
             "action": {"type": "choice", "criteria": {"keep": None, "remove": None, "label": None}},
             "severity": {"type": "score", "criteria": ["none", "minor", "major"]}}
BASE = """
[defaults]
source_type = "SOURCE_VOLUNTARY"
territorial_scope = "EU"
decision_facts = "An automated classifier assessed the post."
category = "STATEMENT_CATEGORY_ILLEGAL_OR_HARMFUL_SPEECH"
decision_ground = "DECISION_GROUND_INCOMPATIBLE_CONTENT"
incompatible_content_ground = "Community guidelines, section 3"
incompatible_content_explanation = "The post breaks the rule on hateful conduct."
"""
RULE = """
[[rules]]
name = "hateful"
when = {question = "hateful", answer = true}
decision_visibility = ["DECISION_VISIBILITY_CONTENT_REMOVED"]
"""


def logged(hateful: float = 0.95, action: dict[str, float] | None = None, severity: tuple[float, ...] = (0.1, 0.2, 0.7),
           *, state: object = "You people are vermin.", media: dict[str, int] | None = None,
           request_id: str | None = "req-1", decided_at: str = "2026-12-02T05:00:00.123456Z",
           questions: tuple[str, ...] = ("hateful", "action", "severity")) -> dict:
    """One decision-log record (omni-decision/1) as the log writes it; media entries are stored paths."""
    action = action or {"keep": 0.1, "remove": 0.8, "label": 0.1}
    body = {"state": state if state != "" else "x", "questions": {q: QUESTIONS[q] for q in questions}}
    parsed = parse_request(body, EngineConfig())
    by_id = {q.id: q for q in parsed.questions}
    probabilities = {"hateful": [hateful, 1 - hateful], "severity": list(severity),
                     "action": [action[o.id] for o in by_id["action"].prompt_options] if "action" in by_id else []}
    answers = build_answers(parsed.questions, [probabilities[q.id] for q in parsed.questions])
    request = render_request(parsed, [])
    request["state"] = state
    for slot, count in (media or {}).items():
        request[slot] = [f"media/{i:064x}.bin" for i in range(count)]
    return {"format": "omni-decision/1", "request_id": request_id, "decided_at": decided_at, "request": request,
            "response": {"model": "clef-omni", "answers": answers, "usage": {"input_tokens": 99, "output_tokens": 0}},
            "audit": {"format": "omni-audit/1", "request_id": request_id, "decided_at": decided_at}}


def loaded(text: str):
    return parse_statement_map(text, "map.toml")


def refused(text: str) -> str:
    with pytest.raises(StatementMapError) as caught:
        loaded(text)
    return str(caught.value)


def export(records, text: str = BASE + RULE, labels=None):
    tally = ExportTally()
    return list(export_statements(records, loaded(text), labels, tally)), tally


# ------------------------------------------------------------------------------------------------ reading the map
def test_a_map_file_is_read_and_normalised(tmp_path):
    path = tmp_path / "map.toml"
    path.write_text(BASE + RULE, encoding="utf-8")
    statement_map = load_statement_map(path)
    (rule,) = statement_map.rules
    assert rule.name == "hateful" and rule.label == "rules[0] (hateful)"
    assert rule.fields["territorial_scope"] == sorted(db.EU_COUNTRY_CODES)
    assert len(rule.fields["territorial_scope"]) == 27
    assert rule.fields["decision_visibility"] == ["DECISION_VISIBILITY_CONTENT_REMOVED"]
    assert [c.question_type for c in rule.conditions] == ["noul"]
    assert "content_date" in statement_map.notes[0]                     # the map does not say it: the user is told


def test_bad_toml_is_refused_with_its_line():
    message = refused(BASE + '\n[[rules]]\nname = "unclosed\n')
    assert message.startswith("map.toml: not valid TOML") and re.search(r"line \d+", message)


def test_an_unreadable_file_is_a_map_error_the_cli_reports(tmp_path):
    with pytest.raises(StatementMapError, match="missing.toml: cannot read") as caught:
        load_statement_map(tmp_path / "missing.toml")
    assert isinstance(caught.value, OmniError)                          # `omni` prints it and exits 2


@pytest.mark.parametrize(("text", "expected"), [
    ("[defautls]\n" + RULE,
     r"^map.toml: defautls: unknown key \(did you mean defaults\?\); the map takes defaults, rules"),
    (BASE, r"rules: at least one \[\[rules\]\] table is required"),
    (BASE + RULE.replace("decision_visibility", "decison_visibility"),
     r"rules\[0\]\.decison_visibility: not a statement field the map can set \(did you mean decision_visibility\?\)"),
    (BASE + RULE + 'puid = "x"\n', r"rules\[0\]\.puid: filled by the export"),
    (BASE + RULE + 'application_date = "2026-01-01"\n', r"rules\[0\]\.application_date: filled by the export"),
    (BASE + RULE.replace("REMOVED", "REMOVE"),
     (r"rules\[0\]\.decision_visibility\[0\]: 'DECISION_VISIBILITY_CONTENT_REMOVE' is not one of the database's values "
     r"\(did you mean DECISION_VISIBILITY_CONTENT_REMOVED\?\); allowed: DECISION_VISIBILITY_CONTENT_REMOVED, ")),
    (BASE.replace('"EU"', '["FR", "US"]') + RULE, r"defaults\.territorial_scope\[1\]: 'US' is not one of"),
    (BASE.replace('"EU"', '"EUROPE"') + RULE, r'defaults\.territorial_scope: must be a list of country codes, or "EU"'),
    (BASE + RULE + 'content_date = "2026-01-01"\n',
     r"rules\[0\]\.content_date: '2026-01-01' is not one of .*application_date"),
    (BASE + RULE + 'content_language = "english"\n', r"rules\[0\]\.content_language: 'english' is not one of"),
    (BASE + RULE + "decision_visibility_other = 3\n",
     r"rules\[0\]\.decision_visibility_other: must be a non-empty string"),
    (BASE.replace('"An automated classifier assessed the post."', '"' + "x" * 5001 + '"') + RULE,
     r"defaults\.decision_facts: 5001 characters; the database takes at most 5000"),
    (BASE + RULE + 'decision_ground_reference_url = "our rules"\n',
     r"decision_ground_reference_url: must be an http\(s\) URL"),
])
def test_a_bad_key_or_value_names_its_key_path_and_what_is_allowed(text, expected):
    assert re.search(expected, refused(text))


@pytest.mark.parametrize(("text", "expected"), [
    (BASE.replace('category = "STATEMENT_CATEGORY_ILLEGAL_OR_HARMFUL_SPEECH"', "") + RULE,
     r"rules\[0\]\.category: required by the database; set it in the rule or in \[defaults\]"),
    (BASE + RULE.replace('decision_visibility = ["DECISION_VISIBILITY_CONTENT_REMOVED"]', ""),
     r"rules\[0\]: the database needs at least one restriction: decision_visibility, decision_monetary"),
    (BASE + RULE + 'decision_ground = "DECISION_GROUND_ILLEGAL_CONTENT"\n',      # the defaults' fields no longer fit
     (r"rules\[0\]\.illegal_content_legal_ground: required when rules\[0\]\.decision_ground is "
     r"DECISION_GROUND_ILLEGAL_CONTENT")),
    (BASE + RULE + 'decision_ground = "DECISION_GROUND_ILLEGAL_CONTENT"\nillegal_content_legal_ground = "StGB 130"\n'
     'illegal_content_explanation = "Incitement."\n',
     (r"defaults\.incompatible_content_ground: only with decision_ground DECISION_GROUND_INCOMPATIBLE_CONTENT "
     r"\(rules\[0\]\.decision_ground is DECISION_GROUND_ILLEGAL_CONTENT\)")),
    (BASE + RULE.replace("CONTENT_REMOVED", "OTHER"),
     (r"rules\[0\]\.decision_visibility_other: required when rules\[0\]\.decision_visibility is "
     r"DECISION_VISIBILITY_OTHER")),
    (BASE + RULE + 'decision_visibility_other = "hidden from search"\n',
     r"rules\[0\]\.decision_visibility_other: only with decision_visibility DECISION_VISIBILITY_OTHER"),
    (BASE + RULE + 'content_type = ["CONTENT_TYPE_OTHER"]\n', r"rules\[0\]\.content_type_other: required when"),
    (BASE + RULE + 'category_specification_other = "spam"\n',
     r"rules\[0\]\.category_specification_other: only with category_specification KEYWORD_OTHER"),
    (BASE + RULE + 'source_identity = "a user"\n',
     r"rules\[0\]\.source_identity: not taken with defaults\.source_type SOURCE_VOLUNTARY"),
])
def test_the_databases_rules_between_fields_are_checked_on_each_rule(text, expected):
    assert re.search(expected, refused(text))


@pytest.mark.parametrize(("when", "expected"), [
    ('{answer = true}', r"rules\[0\]\.when\.question: missing"),
    ('{question = "hateful"}', r"rules\[0\]\.when: give either answer .* or score_at_least"),
    ('{question = "severity", answer = 2, score_at_least = 1.5}', r"rules\[0\]\.when: give either answer"),
    ('{question = "hateful", answer = 0.5}', r"rules\[0\]\.when\.answer: must be true/false \(noul\), a choice id"),
    ('{question = "severity", answer = 12}', r"rules\[0\]\.when\.answer: a score level is 0\.\.9, not 12"),
    ('{question = "hateful", answer = true, at_least = 1.5}', r"rules\[0\]\.when\.at_least: a number in \[0, 1\]"),
    ('{question = "hateful", answer = true, at_least = 0}', r"rules\[0\]\.when\.at_least: a probability in \(0, 1\]"),
    ('{question = "severity", score_at_least = 1, at_least = 0.5}', r"rules\[0\]\.when\.at_least: only with answer"),
    ('{question = "hateful", anwser = true}', r"rules\[0\]\.when\.anwser: unknown key \(did you mean answer\?\)"),
    ('[{question = "hateful", answer = true}, {question = "action"}]', r"rules\[0\]\.when\[1\]: give either"),
    ('"hateful"', r"rules\[0\]\.when: must be a table"),
])
def test_a_bad_condition_names_its_key_path(when, expected):
    assert re.search(expected, refused(BASE + RULE.replace('{question = "hateful", answer = true}', when)))


def test_a_rule_without_when_is_refused():
    assert re.search(r"rules\[0\]\.when: missing", refused(BASE + RULE.replace(
        'when = {question = "hateful", answer = true}\n', "")))


# ------------------------------------------------------------------------------------------------ selection
def rule_of(when: str) -> str:
    return BASE + RULE.replace('{question = "hateful", answer = true}', when)


@pytest.mark.parametrize(("when", "record", "selected"), [
    ('{question = "hateful", answer = true}', logged(hateful=0.6), True),          # the model's top answer
    ('{question = "hateful", answer = true}', logged(hateful=0.4), False),
    ('{question = "hateful", answer = true, at_least = 0.9}', logged(hateful=0.6), False),
    ('{question = "hateful", answer = true, at_least = 0.9}', logged(hateful=0.95), True),
    ('{question = "hateful", answer = false, at_least = 0.9}', logged(hateful=0.05), True),   # P(false) = 1 - noul
    ('{question = "hateful", answer = false, at_least = 0.9}', logged(hateful=0.2), False),
    ('{question = "action", answer = "remove"}', logged(), True),
    ('{question = "action", answer = "label"}', logged(), False),
    ('{question = "action", answer = "label", at_least = 0.3}',
     logged(action={"keep": 0.3, "remove": 0.35, "label": 0.35}), True),
    ('{question = "severity", answer = 2}', logged(severity=(0.1, 0.2, 0.7)), True),
    ('{question = "severity", answer = 1}', logged(severity=(0.1, 0.2, 0.7)), False),
    ('{question = "severity", score_at_least = 1.5}', logged(severity=(0.1, 0.2, 0.7)), True),    # score 1.6
    ('{question = "severity", score_at_least = 1.7}', logged(severity=(0.1, 0.2, 0.7)), False),
    ('[{question = "hateful", answer = true}, {question = "action", answer = "remove"}]', logged(), True),
    ('[{question = "hateful", answer = true}, {question = "action", answer = "keep"}]', logged(), False),
    ('{question = "action", answer = "remove"}', logged(questions=("hateful",)), False),   # not asked: not met
])
def test_a_rule_selects_the_decisions_whose_answers_meet_its_conditions(when, record, selected):
    assert (select_rule(loaded(rule_of(when)), record) is not None) is selected


def test_the_first_rule_that_holds_gives_the_statement():
    text = BASE + RULE + RULE.replace('name = "hateful"', 'name = "second"').replace("REMOVED", "DEMOTED")
    assert select_rule(loaded(text), logged()).name == "hateful"
    text = BASE + RULE.replace("answer = true}", "answer = true, at_least = 0.99}") + RULE.replace(
        'name = "hateful"', 'name = "second"')
    assert select_rule(loaded(text), logged(hateful=0.95)).name == "second"


def test_a_reviewers_label_prevails_over_the_model():
    statement_map = loaded(rule_of('{question = "hateful", answer = true, at_least = 0.9}'))
    assert select_rule(statement_map, logged(hateful=0.99), {"hateful": False}) is None      # overturned
    assert select_rule(statement_map, logged(hateful=0.1), {"hateful": True}) is not None    # caught by a person
    assert select_rule(statement_map, logged(hateful=0.99), {"action": "keep"}) is not None  # not this question
    scored = loaded(rule_of('{question = "severity", score_at_least = 1.5}'))
    assert select_rule(scored, logged(severity=(0.9, 0.05, 0.05)), {"severity": 2}) is not None
    assert select_rule(scored, logged(), {"severity": 1}) is None
    choice = loaded(rule_of('{question = "action", answer = "remove"}'))
    assert select_rule(choice, logged(), {"action": "label"}) is None


# ---------------------------------------------------------------------------------------------- questions the log lacks
@pytest.mark.parametrize(("when", "expected"), [
    ('{question = "hatefull", answer = true}', r"rules\[0\]\.when: no logged decision asks a noul question 'hatefull'"),
    ('{question = "action", answer = "delete"}',
     r"rules\[0\]\.when: no logged decision asks a choice question 'action' with the option 'delete'"),
    ('{question = "action", answer = true}', r"no logged decision asks a noul question 'action'"),   # the wrong type
    ('{question = "severity", answer = 5}', r"asks a score question 'severity' with the option '5'"),
])
def test_a_condition_no_logged_decision_could_meet_is_an_error_naming_it(when, expected):
    records = [logged(), logged(request_id="req-2", questions=("hateful",))]
    with pytest.raises(StatementMapError) as caught:
        export(records, rule_of(when))
    message = str(caught.value)
    assert re.search(expected, message)
    assert ("the log's questions: action: choice (keep, remove, label); hateful: noul; severity: score (0, 1, 2)"
            in message)


def test_a_question_some_decisions_lack_is_no_error():
    statements, tally = export([logged(questions=("hateful",)), logged(request_id="req-2")],
                               rule_of('{question = "action", answer = "remove"}'))
    assert [s["puid"] for s in statements] == ["req-2"] and tally.unselected == 1


def test_an_empty_log_gives_no_statements_and_no_error():
    statements, tally = export([], rule_of('{question = "nowhere", answer = true}'))
    assert statements == [] and tally.records == 0


# ------------------------------------------------------------------------------------------------ each field
def test_content_types_come_from_the_modalities():
    assert content_types(logged()["request"]) == ["CONTENT_TYPE_TEXT"]
    assert content_types(logged(media={"images": 2, "audio": 1, "videos": 1})["request"]) == [
        "CONTENT_TYPE_AUDIO", "CONTENT_TYPE_IMAGE", "CONTENT_TYPE_TEXT", "CONTENT_TYPE_VIDEO"]
    assert content_types(logged(state="", media={"images": 1})["request"]) == ["CONTENT_TYPE_IMAGE"]
    assert content_types(logged(state={"caption": "hi"}, media={"videos": 1})["request"]) == [
        "CONTENT_TYPE_TEXT", "CONTENT_TYPE_VIDEO"]                                       # a JSON state is text too
    hash_only = logged(state="  ", media={"audio": 1})["request"]
    hash_only["audio"] = [{"sha256": "ab" * 32, "type": "wav", "bytes": 1000}]      # --decision-log-media hash-only
    assert content_types(hash_only) == ["CONTENT_TYPE_AUDIO"]


def test_the_maps_content_types_are_added_to_the_derived_ones():
    statement = statement_for(logged(media={"images": 1}), None, loaded(
        BASE + RULE + 'content_type = ["CONTENT_TYPE_SYNTHETIC_MEDIA", "CONTENT_TYPE_IMAGE"]\n').rules[0])
    assert statement["content_type"] == ["CONTENT_TYPE_IMAGE", "CONTENT_TYPE_SYNTHETIC_MEDIA", "CONTENT_TYPE_TEXT"]


def test_a_labelled_decision_is_partially_automated():
    rule = loaded(BASE + RULE).rules[0]
    assert statement_for(logged(), None, rule)["automated_decision"] == "AUTOMATED_DECISION_FULLY"
    assert statement_for(logged(), {}, rule)["automated_decision"] == "AUTOMATED_DECISION_PARTIALLY"
    statements, _ = export([logged(), logged(request_id="req-2")], labels={"req-2": {"hateful": True}})
    assert [s["automated_decision"] for s in statements] == ["AUTOMATED_DECISION_FULLY", "AUTOMATED_DECISION_PARTIALLY"]


def test_detection_is_automated_unless_the_map_says_otherwise():
    assert statement_for(logged(), None, loaded(BASE + RULE).rules[0])["automated_detection"] == "Yes"
    notice = BASE.replace("SOURCE_VOLUNTARY", "SOURCE_ARTICLE_16") + RULE + 'automated_detection = "No"\n'
    assert statement_for(logged(), None, loaded(notice).rules[0])["automated_detection"] == "No"


@pytest.mark.parametrize(("decided_at", "day"), [
    ("2026-12-02T05:00:00.123456Z", "2026-12-02"),
    ("2026-12-02T23:30:00+00:00", "2026-12-02"),
    ("2026-12-03T01:30:00+02:00", "2026-12-02"),           # the UTC date
    ("2026-12-02T23:30:00", "2026-12-02"),                 # naive: UTC
])
def test_the_application_date_is_the_utc_date_of_the_decision(decided_at, day):
    assert application_date(decided_at) == day


@pytest.mark.parametrize(("decided_at", "expected"), [
    ("yesterday", "not an ISO 8601 time"), (None, "not an ISO 8601 time"),
    ("2019-12-31T12:00:00Z", "the database takes application dates 2020-01-01..2038-01-01"),
])
def test_a_decision_time_the_database_cannot_take_is_a_record_error(decided_at, expected):
    with pytest.raises(RecordError, match=expected):
        application_date(decided_at)


def test_content_date_is_the_application_date_only_when_the_map_says_so():
    assert "content_date" not in statement_for(logged(), None, loaded(BASE + RULE).rules[0])
    statement_map = loaded(BASE + 'content_date = "application_date"\n' + RULE)
    assert statement_map.notes == ()
    statement = statement_for(logged(decided_at="2027-03-04T10:00:00Z"), None, statement_map.rules[0])
    assert statement["content_date"] == statement["application_date"] == "2027-03-04"


def test_the_puid_is_the_request_id_or_a_stable_one_derived_from_the_record():
    records = [logged(), logged(request_id=None), logged(request_id="svc:42.a"), logged(request_id="req-1"),
               logged(request_id=None, hateful=0.97)]
    statements, tally = export(records)
    puids = [s["puid"] for s in statements]
    assert puids[0] == "req-1"
    assert all(re.fullmatch(db.PUID_PATTERN, p) for p in puids) and len(set(puids)) == 5
    assert all(p.startswith("omni-") and len(p) == 45 for p in puids[1:])
    again, _ = export(records)
    assert [s["puid"] for s in again] == puids                                  # a re-export gives the same puids
    assert [w.split(":")[0] for w in tally.warnings] == ["record 2", "record 3", "record 4", "record 5"]
    assert "has no request id" in tally.warnings[0] and "'svc:42.a' is not a valid puid" in tally.warnings[1]
    assert "'req-1' was already used by an earlier decision" in tally.warnings[2]


def test_a_record_that_cannot_give_a_statement_is_skipped_with_its_reason():
    broken = {"format": "omni-decision/1", "request_id": "bad", "decided_at": "2026-12-02T05:00:00Z"}
    records = [broken, logged(request_id="old", decided_at="2019-01-01T00:00:00Z"),
               logged(request_id="blank", state=" "), logged(request_id="fine")]
    statements, tally = export(records)
    assert [s["puid"] for s in statements] == ["fine"]
    assert tally.records == 4 and tally.statements == 1 and tally.by_rule == {"rules[0] (hateful)": 1}
    assert tally.skipped[0] == "record 1: no response.answers"
    assert tally.skipped[1].startswith("record 2 (request old): decided_at 2019-01-01T00:00:00Z")
    assert tally.skipped[2] == "record 3 (request blank): the request has no content (an empty state and no media): " \
                               "no content_type"


# ------------------------------------------------------------------------------------------------ the output
def test_a_statement_is_the_databases_payload_in_its_documented_order():
    text = BASE.replace('"EU"', '["DE", "AT", "DE"]') + RULE + 'content_language = "DE"\n'
    statements, tally = export([logged(media={"images": 1}, decided_at="2026-12-02T05:00:00Z")], text)
    assert statements == [{
        "decision_visibility": ["DECISION_VISIBILITY_CONTENT_REMOVED"],
        "decision_ground": "DECISION_GROUND_INCOMPATIBLE_CONTENT",
        "incompatible_content_ground": "Community guidelines, section 3",
        "incompatible_content_explanation": "The post breaks the rule on hateful conduct.",
        "content_type": ["CONTENT_TYPE_IMAGE", "CONTENT_TYPE_TEXT"],
        "category": "STATEMENT_CATEGORY_ILLEGAL_OR_HARMFUL_SPEECH",
        "territorial_scope": ["AT", "DE"],
        "content_language": "DE",
        "application_date": "2026-12-02",
        "decision_facts": "An automated classifier assessed the post.",
        "source_type": "SOURCE_VOLUNTARY",
        "automated_detection": "Yes",
        "automated_decision": "AUTOMATED_DECISION_FULLY",
        "puid": "req-1"}]
    assert list(statements[0]) == [name for name in db.FIELD_ORDER if name in statements[0]]
    assert json.loads(json.dumps(statements[0])) == statements[0]
    assert tally.warnings == [] and tally.skipped == []


def test_an_illegal_content_rule_gives_the_illegal_content_fields():
    text = BASE.replace("incompatible_content", "# incompatible_content") + RULE + """
decision_ground = "DECISION_GROUND_ILLEGAL_CONTENT"
illegal_content_legal_ground = "Section 130 StGB"
illegal_content_explanation = "Incitement to hatred."
category_specification = ["KEYWORD_HATE_SPEECH", "KEYWORD_OTHER", "KEYWORD_HATE_SPEECH"]
category_specification_other = "Slurs"
decision_account = "DECISION_ACCOUNT_SUSPENDED"
"""
    (statement,), _ = export([logged()], text)
    assert statement["decision_ground"] == "DECISION_GROUND_ILLEGAL_CONTENT"
    assert statement["illegal_content_legal_ground"] == "Section 130 StGB"
    assert not any(k.startswith("incompatible_content") for k in statement)
    assert statement["category_specification"] == ["KEYWORD_HATE_SPEECH", "KEYWORD_OTHER"]
    assert statement["decision_account"] == "DECISION_ACCOUNT_SUSPENDED"


def test_the_map_on_the_learning_page_reads_and_selects_as_the_page_says():
    page = (Path(__file__).parents[3] / "docs" / "learning.md").read_text(encoding="utf-8")
    text = page.split("## `omni export statements`")[1].split("```toml\n")[1].split("```")[0]
    statement_map = loaded(text)
    assert [r.name for r in statement_map.rules] == ["remove", "demote"]
    records = [logged(hateful=0.95), logged(hateful=0.7, request_id="req-2"), logged(hateful=0.3, request_id="req-3")]
    statements, tally = export(records, text)
    assert [(s["puid"], s["decision_visibility"]) for s in statements] == [
        ("req-1", ["DECISION_VISIBILITY_CONTENT_REMOVED"]), ("req-2", ["DECISION_VISIBILITY_CONTENT_DEMOTED"])]
    assert tally.unselected == 1 and len(statement_map.notes) == 1            # content_date: the user is told
