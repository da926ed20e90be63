"""Property-based: whatever JSON value a caller sends (in every wire form, avrik's `{data, media_type}` included,
with parts beside it), the one parser returns a DecisionRequest or raises InvalidRequest / UnknownModel, never
anything else. Bounded in examples."""
from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni.contract.config import EngineConfig
from omni.contract.errors import InvalidRequest, UnknownModel
from omni.contract.json_values import load_json
from omni.contract.request import parse_request
from omni.contract.types import DecisionRequest, Part

CONFIG = EngineConfig()
PNG = b"\x89PNG\r\n\x1a\n" + b"x" * 16
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=20), st.sampled_from(["noul", "choice", "score", "image", "png", "jpg", "asset-0",
                                                           "data:image/png;base64,iVBO", "http://x/a.png", ""]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.sampled_from(["type", "criteria", "instructions", "true", "false", "part", "format", "data_base64",
                     "content_type", "base64", "data", "media_type", "a", "b", ""]) | st.text(max_size=8), inner,
    max_size=4), max_leaves=20)
questions = st.dictionaries(st.text(max_size=10), st.fixed_dictionaries(
    {"type": st.sampled_from(["noul", "choice", "score", "rank"]) | values},
    optional={"instructions": values, "criteria": values}) | values, max_size=4)
media_item = st.one_of(st.just("data:image/png;base64," + base64.b64encode(PNG).decode()),
                       st.fixed_dictionaries({"content_type": values, "base64": values}),
                       st.fixed_dictionaries({}, optional={"data": st.just(base64.b64encode(PNG).decode()) | values,
                                                           "media_type": st.just("image/png") | values}), values)
bodies = st.fixed_dictionaries({}, optional={
    "state": values, "questions": questions | values, "model": values, "truncate": values, "x_isolation": values,
    "images": st.lists(media_item, max_size=3) | values, "audio": st.lists(media_item, max_size=2) | values,
    "videos": st.lists(media_item, max_size=2) | values, "files": st.lists(media_item, max_size=2) | values,
    "assets": st.dictionaries(st.text(max_size=6), st.fixed_dictionaries(
        {"type": st.just("image") | values},
        optional={"part": values, "format": values, "data_base64": values}) | values, max_size=3) | values,
    "id": values}) | values
parts = st.lists(st.builds(Part, st.sampled_from(["images", "audio", "videos", "asset-0", "x", ""]),
                           st.binary(max_size=16), st.none() | st.text(max_size=10)), max_size=3)


@SETTINGS
@given(body=bodies, sent=parts)
def test_the_parser_answers_a_request_or_a_client_error_for_any_value(body, sent):
    try:
        request = parse_request(body, CONFIG, sent)
    except (InvalidRequest, UnknownModel) as exc:
        issues = getattr(exc, "issues", ())
        assert all(isinstance(i.msg, str) and i.msg and isinstance(i.loc, tuple) for i in issues)
        return
    assert isinstance(request, DecisionRequest)
    json.dumps(request.state, allow_nan=False)                  # what was accepted can be rendered


@SETTINGS
@given(body=bodies)
def test_any_json_text_loads_or_is_json_invalid_and_nothing_non_finite_gets_through(body):
    text = json.dumps(body, allow_nan=True)
    try:
        loaded = load_json(text.encode())
    except InvalidRequest as exc:
        refused = exc
    else:
        json.dumps(loaded, allow_nan=False)                     # raises on NaN / Infinity
        return
    assert refused.issues[0].type == "json_invalid"


@pytest.mark.parametrize("text", ['{"state": "s", "questions": {"q": {"type": "score", "criteria": ["a", 1e999]}}}',
                                  '{"state": NaN, "questions": {}}', '{"state": "s", "x": -Infinity}'])
def test_non_finite_numbers_are_json_invalid_at_parse_time(text):
    with pytest.raises(InvalidRequest) as info:
        load_json(text)
    assert info.value.issues[0].type == "json_invalid"


def test_a_part_name_that_is_not_a_string_is_a_422_issue():
    body = {"state": "s", "questions": {"q": {"type": "noul"}}, "assets": {"p": {"type": "image", "part": ["a"]}}}
    for part in (["a"], {"a": 1}, 7):
        body["assets"]["p"]["part"] = part
        with pytest.raises(InvalidRequest) as info:
            parse_request(body, CONFIG, [Part("a", PNG)])
        assert info.value.issues[0].loc[:3] == ("assets", "p", "part")
