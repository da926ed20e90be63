"""omni.learn.dataset: JSONL records with labels; every bad line reported with its number."""
import base64
import json

import pytest

from omni.learn.dataset import DatasetError, label_index, load_dataset

QUESTIONS = {"ok": {"type": "noul", "instructions": "Is it fine?"},
             "team": {"type": "choice", "criteria": {"sales": "Sales", "billing": None}},
             "level": {"type": "score", "criteria": ["low", "mid", "high"]}}


def line(labels, **extra):
    return json.dumps({"state": "s", "questions": QUESTIONS, "labels": labels, **extra})


def write(tmp_path, *lines, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def problems_of(path):
    with pytest.raises(DatasetError) as info:
        load_dataset(path)
    return info.value.problems


def test_labels_become_option_ids_and_questions_keep_request_order(tmp_path):
    path = write(tmp_path, line({"ok": True, "team": "billing", "level": 2}), "", line({"ok": "false"}))
    records = load_dataset(path)
    assert [r.line for r in records] == [1, 3]
    assert records[0].labels == {"ok": "true", "team": "billing", "level": "2"}
    assert records[1].labels == {"ok": "false"}
    questions = {q.id: q for q in records[0].request.questions}
    assert [q.id for q in records[0].request.questions] == ["ok", "team", "level"]
    assert label_index(questions["team"], "billing") == 0 and label_index(questions["team"], "sales") == 1
    assert label_index(questions["level"], "2") == 2 and label_index(questions["ok"], "false") == 1


def test_every_bad_line_is_reported_with_its_number(tmp_path):
    path = write(tmp_path,
                 line({"ok": True}),                             # 1 fine
                 line({"nope": True}),                           # 2 unknown question id
                 line({"team": "marketing"}),                    # 3 not an option
                 line({"level": 3}),                             # 4 level out of range
                 line({"ok": "yes"}),                            # 5 not a noul answer
                 "{not json",                                    # 6
                 json.dumps({"state": "s", "questions": QUESTIONS}),           # 7 no labels
                 json.dumps({"questions": QUESTIONS, "labels": {"ok": True}}),  # 8 request invalid (no state)
                 line({"ok": True}, images=["missing.png"]))     # 9 media file missing
    found = dict(problems_of(path))
    assert sorted(found) == [2, 3, 4, 5, 6, 7, 8, 9]
    assert "labels.nope: unknown question id" in found[2]
    assert "'marketing' is not an option" in found[3] and "sales, billing" in found[3]
    assert "0..2" in found[4]
    assert "true or false" in found[5]
    assert "not valid JSON" in found[6]
    assert "labels: missing" in found[7]
    assert "state: Field required" in found[8]
    assert "images[0]: file not found: missing.png" in found[9]


def test_error_message_names_the_file_and_line(tmp_path):
    path = write(tmp_path, line({"team": "marketing"}))
    with pytest.raises(DatasetError) as info:
        load_dataset(path)
    assert str(info.value).startswith(f"{path}:1: labels.team:")


def test_media_paths_resolve_relative_to_the_dataset_file(tmp_path):
    (tmp_path / "media").mkdir()
    (tmp_path / "media" / "a.wav").write_bytes(b"RIFF-fake-audio")
    (tmp_path / "media" / "b.png").write_bytes(b"\x89PNG-fake")
    sub = tmp_path / "sets"
    sub.mkdir()
    path = write(sub, line({"ok": True}, audio=["../media/a.wav"], images=["../media/b.png"]))
    (record,) = load_dataset(path)
    media = record.request.media
    assert [(m.kind, m.label, m.data) for m in media] == [("image", "images[0]", b"\x89PNG-fake"),
                                                           ("audio", "audio[0]", b"RIFF-fake-audio")]


def test_data_urls_go_through_the_request_validator(tmp_path):
    url = "data:image/png;base64," + base64.b64encode(b"png-bytes").decode()
    path = write(tmp_path, line({"ok": True}, images=[url]), line({"ok": True}, images=["data:image/png;base64,@@"]),
                 line({"ok": True}, images=[url, "x.png"]), line({"ok": True}, videos=["https://x/y.mp4"]))
    found = dict(problems_of(path))
    assert sorted(found) == [2, 3, 4]
    assert "invalid base64" in found[2] and "mix of data URLs and file paths" in found[3]
    assert "remote URLs are not fetched" in found[4]


def test_missing_and_empty_dataset_files(tmp_path):
    assert "cannot read the dataset" in problems_of(tmp_path / "absent.jsonl")[0][1]
    assert "no records" in problems_of(write(tmp_path, "", "  "))[0][1]
