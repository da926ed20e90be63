"""avrik's media object `{"data": BASE64, "media_type": "image/png"}` (what avrik-sdk's `image()` sends) is one more
form of the one parser: alone, mixed with data URLs and Clef objects in the same list, in every slot, and every bad
input is an `InvalidRequest` issue at its exact place (`images.1.data`) with a plain message."""
from __future__ import annotations

import base64

import pytest

from omni.contract.config import EngineConfig
from omni.contract.errors import InvalidRequest
from omni.contract.render import render_request
from omni.contract.request import parse_request

CFG = EngineConfig()
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR-fake"
JPEG = b"\xff\xd8\xff\xe0-fake"
B64 = base64.b64encode(PNG).decode()
GOOD = {"data": B64, "media_type": "image/png"}


def body(**over):
    return {"state": "s", "questions": {"q": {"type": "noul", "instructions": "?"}}, **over}


def media_of(b):
    return [(m.slot, m.index, m.data, m.declared_type, m.origin) for m in parse_request(b, CFG).media]


def issues_of(b):
    with pytest.raises(InvalidRequest) as info:
        parse_request(b, CFG)
    return [(i.loc, i.msg, i.type) for i in info.value.issues]


def test_the_avrik_object_is_an_image_with_its_media_type_as_the_declared_type():
    assert media_of(body(images=[GOOD])) == [("images", 0, PNG, "image/png", None)]


def test_it_parses_to_the_same_item_as_the_same_bytes_sent_as_a_data_url():
    assert media_of(body(images=[GOOD])) == media_of(body(images=[f"data:image/png;base64,{B64}"]))


def test_mixed_with_data_urls_and_clef_objects_in_one_list_each_keeps_its_place():
    jpeg = base64.b64encode(JPEG).decode()
    got = media_of(body(images=[f"data:image/jpeg;base64,{jpeg}", GOOD, {"content_type": "image/jpeg", "base64": jpeg},
                                {"data": jpeg, "media_type": "image/jpeg"}]))
    assert [(slot, i, data, declared) for slot, i, data, declared, _ in got] == [
        ("images", 0, JPEG, "image/jpeg"), ("images", 1, PNG, "image/png"), ("images", 2, JPEG, "image/jpeg"),
        ("images", 3, JPEG, "image/jpeg")]


@pytest.mark.parametrize(("extra", "declared"), [({}, None), ({"media_type": None}, None), ({"media_type": ""}, None),
                                                 ({"media_type": "image/webp"}, "image/webp"),
                                                 ({"media_type": "not even a type"}, "not even a type")])
def test_media_type_is_optional_and_only_reported(extra, declared):
    """Like every declared type it is never trusted: the format is sniffed from the bytes later."""
    assert media_of(body(images=[{"data": B64, **extra}])) == [("images", 0, PNG, declared, None)]


def test_audio_and_video_slots_take_the_object_too():
    got = media_of(body(audio=[{"data": B64, "media_type": "audio/wav"}], videos=[{"data": B64}]))
    assert got == [("audio", 0, PNG, "audio/wav", None), ("videos", 0, PNG, None, None)]


def test_unknown_keys_are_ignored_and_a_clef_object_with_a_media_type_key_stays_clef():
    assert media_of(body(images=[{**GOOD, "detail": "high", "name": "unit.png"}])) == [
        ("images", 0, PNG, "image/png", None)]
    assert media_of(body(images=[{"content_type": "image/jpeg", "base64": B64, "media_type": "image/png"}])) == [
        ("images", 0, PNG, "image/jpeg", None)]


def test_whitespace_in_the_base64_is_ignored_as_in_every_other_form():
    wrapped = "\n".join(B64[i:i + 8] for i in range(0, len(B64), 8))
    assert media_of(body(images=[{"data": f" {wrapped}\n"}]))[0][2] == PNG


@pytest.mark.parametrize(("item", "loc", "kind", "words"), [
    ({"media_type": "image/png"}, ("images", 1, "data"), "missing", "Field required"),
    ({"data": None}, ("images", 1, "data"), "string_type", "data must be a base64 string, not null"),
    ({"data": 42}, ("images", 1, "data"), "string_type", "not a number"),
    ({"data": [B64]}, ("images", 1, "data"), "string_type", "not an array"),
    ({"data": {"b": B64}}, ("images", 1, "data"), "string_type", "not an object"),
    ({"data": ""}, ("images", 1, "data"), "media_item", "empty media item"),
    ({"data": " \n "}, ("images", 1, "data"), "media_item", "empty media item"),
    ({"data": "@@@@"}, ("images", 1, "data"), "media_item", "invalid base64 payload"),
    ({"data": B64.rstrip("=") + "A"}, ("images", 1, "data"), "media_item", "invalid base64 payload"),
    ({"data": "-_-_"}, ("images", 1, "data"), "media_item", "invalid base64 payload"),
    ({"data": f"data:image/png;base64,{B64}"}, ("images", 1, "data"), "media_item", "not a data URL"),
    ({"data": B64, "media_type": 7}, ("images", 1, "media_type"), "string_type",
     "media_type must be a string such as \"image/png\""),
    ({"data": B64, "media_type": ["image/png"]}, ("images", 1, "media_type"), "string_type", "not an array"),
    ({"data": B64, "base64": B64}, ("images", 1), "media_item", "not both"),
])
def test_every_bad_object_is_an_issue_at_its_exact_place(item, loc, kind, words):
    got = issues_of(body(images=[GOOD, item]))
    assert len(got) == 1, got
    got_loc, msg, got_kind = got[0]
    assert (got_loc, got_kind) == (loc, kind) and words in msg, got[0]


def test_a_bad_data_and_a_bad_media_type_are_both_reported_with_the_rest_of_the_body():
    got = issues_of({"questions": {"q": {"type": "noul"}}, "images": [{"data": 1, "media_type": 2}]})
    assert {(loc, kind) for loc, _msg, kind in got} == {
        (("state",), "missing"), (("images", 0, "data"), "string_type"), (("images", 0, "media_type"), "string_type")}


def test_the_message_names_the_place_in_dotted_form():
    with pytest.raises(InvalidRequest) as info:
        parse_request(body(images=[{"data": "@@@@", "media_type": "image/png"}]), CFG)
    assert str(info.value) == "images.0.data: invalid base64 payload"


def test_a_failed_item_keeps_its_place_so_later_items_keep_their_index():
    with pytest.raises(InvalidRequest) as info:
        parse_request(body(images=[{"data": ""}, GOOD, "nope"]), CFG)
    assert [i.loc for i in info.value.issues] == [("images", 0, "data"), ("images", 2)]


def test_files_stays_llama_cpp_data_urls_only():
    """`files` routes each entry by its data URL's type; an object there is refused as before."""
    loc, msg, _kind = issues_of(body(files=[GOOD]))[0]
    assert loc == ("files", 0) and "data URL" in msg
    loc, msg, _kind = issues_of(body(files=GOOD))[0]
    assert loc == ("files",) and msg == "files must be a list of data URLs"


def test_a_slot_that_is_not_a_list_names_every_form():
    loc, msg, kind = issues_of(body(images=GOOD))[0]
    assert (loc, kind) == (("images",), "list_type") and "{data, media_type}" in msg


def test_rendered_back_it_parses_to_the_same_request():
    request = parse_request(body(images=[GOOD, f"data:image/png;base64,{B64}"]), CFG)
    assert parse_request(render_request(request), CFG) == request
