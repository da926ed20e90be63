"""render_request is the inverse of parse_request: whatever body parses, its rendering parses to the same request
(in every media form: Clef slots, llama.cpp files, TypeSafe assets in JSON and as parts). Bounded in examples."""
from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given

from omni.contract.errors import InvalidRequest, UnknownModel
from omni.contract.render import render_question, render_request
from omni.contract.request import parse_request
from omni.contract.types import Part
from tests.unit.contract.test_parse_properties import CONFIG, PNG, SETTINGS, bodies

pytestmark = pytest.mark.unit
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt "


def same(a, b) -> bool:
    """Equal requests: state, questions, model, flags, and the media's slots, order and bytes."""
    return ((a.state, a.questions, a.model, a.truncate, a.isolation) == (b.state, b.questions, b.model, b.truncate,
                                                                           b.isolation)
            and [(m.slot, m.index, m.data) for m in a.media] == [(m.slot, m.index, m.data) for m in b.media])


@SETTINGS
@given(bodies)
def test_any_body_that_parses_renders_to_a_body_that_parses_the_same(body):
    try:
        request = parse_request(body, CONFIG)
    except (InvalidRequest, UnknownModel):
        return
    rendered = render_request(request)
    json.dumps(rendered, allow_nan=False)                 # a body a client could send
    assert same(parse_request(rendered, CONFIG), request)


def test_assets_parts_and_placeholders_render_as_clef_slots_with_the_same_prompt():
    png64 = base64.b64encode(PNG).decode()
    body = {"state": "Look at {{front}} and {{back}}.",
            "questions": {"ok": {"type": "noul", "instructions": "Is {{front}} fine?"},
                          "team": {"type": "choice", "criteria": {"z": None, "a": "first"}},
                          "grade": {"type": "score", "criteria": ["low", {"level": "high"}]}},
            "assets": {"{{front}}": {"type": "image", "format": "png", "data_base64": png64},
                       "{{back}}": {"type": "image", "part": "back.png"}},
            "audio": [{"content_type": "audio/wav", "base64": base64.b64encode(WAV).decode()}],
            "x_isolation": "isolated", "truncate": False}
    request = parse_request(body, CONFIG, [Part("back.png", PNG + b"2")])
    rendered = render_request(request, media_entries=["media/a.png", "media/b.png", "media/c.wav"])
    assert rendered["images"] == ["media/a.png", "media/b.png"] and rendered["audio"] == ["media/c.wav"]
    assert "assets" not in rendered and "{{front}}" not in json.dumps(rendered)
    assert rendered["x_isolation"] == "isolated" and rendered["truncate"] is False
    again = parse_request(render_request(request), CONFIG)   # data URLs: the same request back
    assert same(again, request)


def test_questions_render_as_the_wire_writes_them():
    request = parse_request({"state": "s", "questions": {
        "plain": {"type": "noul"}, "custom": {"type": "noul", "criteria": {"true": "yes", "false": None}},
        "pick": {"type": "choice", "criteria": {"b": None, "a": "A"}}, "lvl": {"type": "score", "criteria": ["x", "y"]}}},
        CONFIG)
    wire = {q.id: render_question(q) for q in request.questions}
    assert wire == {"plain": {"type": "noul"}, "custom": {"type": "noul", "criteria": {"true": "yes", "false": None}},
                    "pick": {"type": "choice", "criteria": {"b": None, "a": "A"}},
                    "lvl": {"type": "score", "criteria": ["x", "y"]}}


def test_media_entries_must_match_the_media():
    request = parse_request({"state": "s", "questions": {"q": {"type": "noul"}},
                             "images": ["data:image/png;base64," + base64.b64encode(PNG).decode()]}, CONFIG)
    with pytest.raises(ValueError, match="1 media items"):
        render_request(request, media_entries=[])
