"""Every validation rule of a System One body: one test per rule, each checking the field path and the limit."""
import base64

import pytest

from omni.contract.config import EngineConfig
from omni.contract.errors import InvalidRequest, UnknownModel
from omni.contract.request import parse_request
from omni.contract.types import NOUL_DEFAULT_FALSE, NOUL_DEFAULT_TRUE

CFG = EngineConfig()


def body(**over):
    b = {"state": "s", "questions": {"q": {"type": "noul", "instructions": "?"}}}
    b.update(over)
    return b


def issues_of(b, config=CFG):
    with pytest.raises(InvalidRequest) as info:
        parse_request(b, config)
    return [(i.loc, i.msg, i.type) for i in info.value.issues]


def test_valid_request_keeps_order_and_ignores_unknown_fields():
    r = parse_request(body(questions={"b": {"type": "noul"}, "a": {"type": "noul"}}, surprise=1,
                           model=" jev-latest "), CFG)
    assert [q.id for q in r.questions] == ["b", "a"] and r.model == " jev-latest " and r.truncate is True


def test_an_unknown_model_is_refused_after_the_body_is_valid():
    with pytest.raises(UnknownModel) as info:
        parse_request(body(model="gpt-9"), CFG)
    assert info.value.served == ("clef-omni", "jev-latest")
    assert issues_of(body(model="gpt-9", state=None))[0][0] == ("state",)   # body issues come first


def test_body_must_be_object():
    assert issues_of([1, 2]) == [((), "Input should be a valid dictionary or object", "model_attributes_type")]


def test_state_required():
    b = body(); del b["state"]
    assert issues_of(b) == [(("state",), "Field required", "missing")]


@pytest.mark.parametrize("state", [1, 2.5, True, None])
def test_state_must_be_string_object_or_array(state):
    assert issues_of(body(state=state))[0][:1] == (("state",),)


@pytest.mark.parametrize("state", ["text", {"a": 1}, [1, "x"]])
def test_state_forms_accepted(state):
    assert parse_request(body(state=state), CFG).state == state


def test_questions_required():
    b = body(); del b["questions"]
    assert issues_of(b) == [(("questions",), "Field required", "missing")]


def test_questions_must_be_object():
    assert issues_of(body(questions=[{"type": "noul"}]))[0][2] == "dict_type"


def test_questions_not_empty():
    assert issues_of(body(questions={}))[0][:1] == (("questions",),)


def test_question_cap_default_64_and_configurable():
    qs = {f"q{i}": {"type": "noul"} for i in range(65)}
    loc, msg, kind = issues_of(body(questions=qs))[0]
    assert loc == ("questions",) and "at most 64" in msg and "not 65" in msg and kind == "too_long"
    assert len(parse_request(body(questions=dict(list(qs.items())[:64])), CFG).questions) == 64
    small = EngineConfig(max_questions=3)
    assert "at most 3" in issues_of(body(questions=dict(list(qs.items())[:4])), small)[0][1]


def test_question_id_non_empty():
    assert issues_of(body(questions={"": {"type": "noul"}}))[0][2] == "string_too_short"


def test_question_id_max_256_chars():
    ok = "é" * 256
    assert parse_request(body(questions={ok: {"type": "noul"}}), CFG).questions[0].id == ok
    _loc, msg, kind = issues_of(body(questions={"x" * 257: {"type": "noul"}}))[0]
    assert "at most 256" in msg and kind == "string_too_long"


def test_question_must_be_object():
    assert issues_of(body(questions={"q": "noul"}))[0] == (("questions", "q"), "Input should be a valid dictionary",
                                                          "dict_type")


def test_type_required():
    assert issues_of(body(questions={"q": {"instructions": "x"}}))[0] == (("questions", "q", "type"),
                                                                         "Field required", "missing")


def test_unknown_type_is_union_tag_invalid():
    loc, msg, kind = issues_of(body(questions={"q": {"type": "rank"}}))[0]
    assert loc == ("questions", "q") and kind == "union_tag_invalid" and "'rank'" in msg


def test_instructions_optional_and_any_entry():
    for instr in (None, "", "text", {"question": "x"}, ["a"]):
        parse_request(body(questions={"q": {"type": "noul", "instructions": instr}}), CFG)
    assert issues_of(body(questions={"q": {"type": "noul", "instructions": 3}}))[0][0] == (
        "questions", "q", "noul", "instructions")


def test_noul_criteria_optional_defaults():
    q = parse_request(body(), CFG).questions[0]
    assert [(o.id, o.description) for o in q.options] == [("true", NOUL_DEFAULT_TRUE), ("false", NOUL_DEFAULT_FALSE)]


def test_noul_criteria_one_sided_null_and_extra_keys():
    q = parse_request(body(questions={"q": {"type": "noul", "criteria": {"true": "yes!", "false": None, "x": 1}}}),
                      CFG).questions[0]
    assert [(o.id, o.description) for o in q.options] == [("true", "yes!"), ("false", None)]


def test_noul_criteria_must_be_object():
    assert issues_of(body(questions={"q": {"type": "noul", "criteria": ["a"]}}))[0][0] == ("questions", "q", "noul",
                                                                                           "criteria")


def test_choice_criteria_required():
    assert issues_of(body(questions={"q": {"type": "choice"}}))[0] == (("questions", "q", "choice", "criteria"),
                                                                      "Field required", "missing")


def test_choice_needs_two_options():
    _loc, msg, kind = issues_of(body(questions={"q": {"type": "choice", "criteria": {"a": None}}}))[0]
    assert "at least 2" in msg and kind == "too_short"


def test_choice_max_255_options():
    ok = {f"o{i}": None for i in range(255)}
    assert len(parse_request(body(questions={"q": {"type": "choice", "criteria": ok}}), CFG).questions[0].options) == 255
    loc, msg, _kind = issues_of(body(questions={"q": {"type": "choice", "criteria": {**ok, "x": None}}}))[0]
    assert loc == ("questions", "q", "choice", "criteria") and "at most 255" in msg and "not 256" in msg


def test_choice_option_id_non_empty():
    assert issues_of(body(questions={"q": {"type": "choice", "criteria": {"": None, "b": None}}}))[0][2] == \
        "string_too_short"


def test_choice_must_be_map():
    assert issues_of(body(questions={"q": {"type": "choice", "criteria": ["a", "b"]}}))[0][2] == "dict_type"


def test_score_levels_list_2_to_10():
    assert len(parse_request(body(questions={"q": {"type": "score", "criteria": list("abcdefghij")}}),
                             CFG).questions[0].options) == 10
    _loc, msg, kind = issues_of(body(questions={"q": {"type": "score", "criteria": list("abcdefghijk")}}))[0]
    assert "at most 10" in msg and "not 11" in msg and kind == "too_long"
    assert issues_of(body(questions={"q": {"type": "score", "criteria": ["a"]}}))[0][2] == "too_short"


def test_score_map_form_rejected():
    assert issues_of(body(questions={"q": {"type": "score", "criteria": {"0": "a", "1": "b"}}}))[0][2] == "list_type"


def test_score_null_level_rejected():
    assert issues_of(body(questions={"q": {"type": "score", "criteria": ["a", None]}}))[0][0] == (
        "questions", "q", "score", "criteria", 1)


def test_truncate_must_be_bool():
    assert issues_of(body(truncate="no"))[0][0] == ("truncate",)


def test_model_must_be_string():
    assert issues_of(body(model=3))[0][0] == ("model",)


def test_all_issues_reported_together():
    got = issues_of({"questions": {"a": {"type": "rank"}, "b": {"type": "choice"}}})
    assert {i[0] for i in got} == {("state",), ("questions", "a"), ("questions", "b", "choice", "criteria")}


def test_media_data_url_and_object_forms():
    png = b"\x89PNG\r\n\x1a\n-fake"
    b64 = base64.b64encode(png).decode()
    r = parse_request(body(images=[f"data:image/png;base64,{b64}"], audio=[{"content_type": "audio/wav", "base64": b64}],
                           videos=[]), CFG)
    assert [(m.kind, m.label, m.data, m.declared_type) for m in r.media] == [
        ("image", "images[0]", png, "image/png"), ("audio", "audio[0]", png, "audio/wav")]


@pytest.mark.parametrize("item", ["https://example.com/a.png", "/etc/passwd", "data:image/png,rawtext",
                                  "data:image/png;base64,@@@", {"content_type": "image/png"}, 42])
def test_media_bad_items_refused_with_index(item):
    loc, _msg, kind = issues_of(body(images=["data:image/png;base64,AAAA", item]))[0]
    assert loc == ("images", 1) and kind == "media_item"


def test_media_field_must_be_list():
    assert issues_of(body(videos="data:video/mp4;base64,AAAA"))[0][0] == ("videos",)


@pytest.mark.parametrize(("raw", "fragment"), [(b"", "Expecting value"), (b"\xff", "not UTF-8"),
                                               (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
                                               (b"9" * 5000, "4300 digits")])
def test_load_json_turns_every_unreadable_document_into_json_invalid(raw, fragment):
    from omni.contract.json_values import load_json

    with pytest.raises(InvalidRequest) as info:
        load_json(raw, ("body",))
    issue = info.value.issues[0]
    assert issue.type == "json_invalid" and issue.loc == ("body",) and fragment in issue.msg


def test_state_nested_deeper_than_64_levels_is_refused():
    parse_request(body(state=[[["ok"]]]), CFG)
    deep = "x"
    for _ in range(65):
        deep = [deep]
    loc, msg, _kind = issues_of(body(state=deep))[0]
    assert loc == ("state",) and "more than 64 levels" in msg


@pytest.mark.parametrize("where", ["state", "instructions", "option", "question_id", "state_key"])
def test_unpaired_surrogates_are_refused_where_they_are(where):
    bad = "ok \ud800"
    q = {"type": "choice", "instructions": "?", "criteria": {"a": None, "b": None}}
    b = body(questions={"q": q})
    if where == "state":
        b["state"] = bad
    elif where == "state_key":
        b["state"] = {bad: 1}
    elif where == "instructions":
        q["instructions"] = {"x": [bad]}
    elif where == "option":
        q["criteria"] = {bad: None, "b": None}
    else:
        b["questions"] = {bad: q}
    loc, msg, _kind = issues_of(b)[0]
    assert "unpaired surrogate" in msg
    assert loc[0] == ("state" if where.startswith("state") else "questions")
