"""omni.contract.request_line.read_request_line / parse_request_line: a dataset line whose labels are optional (a backlog
line) fails with the wire's own InvalidRequest, at the place in the body where the problem is."""
import json

import pytest

from omni.contract.config import EngineConfig
from omni.contract.errors import InvalidRequest
from omni.contract.request_line import parse_request_line, read_request_line

QUESTIONS = {"ok": {"type": "noul", "instructions": "Is it fine?"}}


def issue_of(text, root):
    with pytest.raises(InvalidRequest) as info:
        read_request_line(text, root)
    (issue,) = info.value.issues
    return issue


def test_labels_are_optional_and_never_checked(tmp_path):
    for labels in ({}, {"ok": True}, {"nope": "x"}, "junk"):
        line = read_request_line(json.dumps({"state": "s", "questions": QUESTIONS, "labels": labels}), tmp_path)
        assert line.body == {"state": "s", "questions": QUESTIONS} and line.parts == ()
    request = parse_request_line(json.dumps({"state": "s", "questions": QUESTIONS}).encode(), tmp_path, EngineConfig())
    assert request.state == "s" and [q.id for q in request.questions] == ["ok"]


def test_path_media_become_parts_of_their_slot_with_the_path_as_written(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.png").write_bytes(b"\x89PNG-a")
    (tmp_path / "m" / "b.wav").write_bytes(b"RIFF-b")
    url = "data:image/png;base64,AAAA"
    text = json.dumps({"state": "s", "questions": QUESTIONS, "audio": ["m/b.wav"], "images": ["m/a.png"],
                       "videos": [], "files": [url]})
    line = read_request_line(text, tmp_path)
    assert [(p.name, p.data, p.origin) for p in line.parts] == [("images", b"\x89PNG-a", "file m/a.png"),
                                                                ("audio", b"RIFF-b", "file m/b.wav")]
    assert line.files == ("m/a.png", "m/b.wav")
    assert line.body == {"state": "s", "questions": QUESTIONS, "videos": [], "files": [url]}


def test_each_line_fault_is_an_issue_where_it_is(tmp_path):
    url = "data:image/png;base64,AAAA"
    assert issue_of("{nope", tmp_path).type == "json_invalid"
    missing = issue_of(json.dumps({"state": "s", "images": [url, url], "audio": ["gone.wav"]}), tmp_path)
    assert missing.loc == ("audio", 0) and missing.type == "file_not_found" and "gone.wav" in missing.msg
    mixed = issue_of(json.dumps({"state": "s", "images": [url, "x.png"]}), tmp_path)
    assert mixed.loc == ("images",) and "one form per field" in mixed.msg
    (tmp_path / "a.mp4").write_bytes(b"fake")
    remote = issue_of(json.dumps({"state": "s", "videos": ["a.mp4", "https://x/y.mp4"]}), tmp_path)
    assert remote.loc == ("videos", 1) and "remote URLs are not fetched" in remote.msg


def test_a_value_that_is_not_an_object_is_left_for_the_request_parser(tmp_path):
    assert read_request_line("[1, 2]", tmp_path).body == [1, 2]
    with pytest.raises(InvalidRequest):
        parse_request_line("[1, 2]", tmp_path, EngineConfig())
