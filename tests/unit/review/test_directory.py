"""Review directories and queues: labels saved as a dataset `omni eval` reads, surviving a restart; queues ordered by
uncertainty; media served as stored; nothing outside the named sources reachable."""
from __future__ import annotations

import base64
import json

import pytest

from fixtures.media import image_bytes, wav_bytes
from omni.contract.answers import answer_confidence, top_answer
from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.learn.dataset import load_dataset
from omni.review.directory import REVIEW_DATASET_FILE, ReviewDir, dataset_path
from omni.review.queues import ReviewQueues

CONFIG = EngineConfig()
QUESTIONS = {"ok": {"type": "noul", "instructions": "Is it fine?"},
             "team": {"type": "choice", "criteria": {"power": None, "hvac": "Air"}},
             "grade": {"type": "score", "criteria": ["low", "mid", "high"]}}
PNG = image_bytes("PNG", "RGB", 40, 30)
WAV = wav_bytes(0.3, 16000, 1)


def url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def decided(ok: float, team: dict, grade: dict) -> dict:
    return {"answers": {"ok": {"type": "noul", "noul": ok},
                        "team": {"type": "choice", "choice": max(team, key=team.get), "probabilities": team,
                                 "confidence": max(team.values())},
                        "grade": {"type": "score", "score": 1.0, "probabilities": grade,
                                  "confidence": max(grade.values())}}}


def request(state: str = "Unit 7 rattles.", media: bool = True):
    body = {"state": state, "questions": QUESTIONS}
    if media:
        body.update(images=[url("image/png", PNG)], audio=[url("audio/wav", WAV)])
    return parse_request(body, CONFIG)


@pytest.fixture
def kept(tmp_path):
    """A review directory with three kept decisions of different confidence."""
    review_dir = ReviewDir(tmp_path / "review")
    keys = {}
    for name, ok in (("sure", 0.99), ("unsure", 0.55), ("middling", 0.8)):
        keys[name] = review_dir.keep_decision(request(f"{name} unit"), decided(ok, {"power": 0.9, "hvac": 0.1},
                                                                                 {"0": 0.1, "1": 0.85, "2": 0.05}))
    return review_dir, keys


def test_answers_give_the_models_pick_and_its_confidence():
    answers = decided(0.3, {"power": 0.2, "hvac": 0.8}, {"0": 0.1, "1": 0.2, "2": 0.7})["answers"]
    assert [top_answer(a) for a in answers.values()] == ["false", "hvac", "2"]
    assert [answer_confidence(a) for a in answers.values()] == pytest.approx([0.7, 0.8, 0.7])


def test_queues_order_by_lowest_confidence_or_by_distance_to_the_threshold(kept):
    review_dir, keys = kept
    queues = ReviewQueues(review_dir, config=CONFIG)
    assert queues.queues() == [{"id": "kept", "kind": "kept", "name": "kept decisions", "items": 3, "reviewed": 0,
                                 "failed": 0, "failures": [], "k": 1}]      # issue 22: each queue says its k
    by_confidence = [item["key"] for item in queues.items("kept")]
    assert by_confidence == [keys["unsure"], keys["middling"], keys["sure"]]
    near = [item["key"] for item in queues.items("kept", order="threshold", threshold=0.8)]
    assert near == [keys["middling"], keys["sure"], keys["unsure"]]      # confidences 0.8, 0.85, 0.55
    with pytest.raises(ValueError, match="order must be one of"):
        queues.items("kept", order="random")


def test_labels_are_saved_as_a_dataset_that_eval_reads_and_survive_a_restart(kept, tmp_path):
    review_dir, keys = kept
    queues = ReviewQueues(review_dir, config=CONFIG)
    # issue 22: a label answers the history events it made too (one per changed question), beside the labels
    assert queues.label("kept", keys["unsure"], {"ok": "false", "grade": "2"})["labels"] == {"ok": "false", "grade": "2"}
    assert queues.label("kept", keys["unsure"], {"team": "power", "grade": None})["labels"] == {"ok": "false",
                                                                                               "team": "power"}
    records = load_dataset(dataset_path(review_dir.root), CONFIG)            # the directory is a dataset
    assert len(records) == 1 and records[0].labels == {"ok": "false", "team": "power"}
    assert [(m.slot, m.data) for m in records[0].request.media] == [("images", PNG), ("audio", WAV)]
    line = json.loads((review_dir.root / REVIEW_DATASET_FILE).read_text())
    assert line["labels"] == {"ok": False, "team": "power"}                  # the dataset's own label forms
    assert line["x_review"]["corrected"] == ["ok"] and line["x_review"]["model"]["team"] == "power"
    assert line["images"][0].startswith("media/") and (review_dir.root / line["images"][0]).read_bytes() == PNG

    again = ReviewQueues(ReviewDir(review_dir.root), config=CONFIG)           # a restart
    assert again.item("kept", keys["unsure"])["labels"] == {"ok": "false", "team": "power"}
    assert {i["key"]: i["labelled"] for i in again.items("kept")}[keys["unsure"]] == 2
    assert again.queues()[0]["reviewed"] == 0          # two of its three questions: not reviewed yet (issue 22, 6)
    again.label("kept", keys["unsure"], {"grade": "1"})
    assert again.queues()[0]["reviewed"] == 1


def test_clearing_every_label_removes_the_line(kept):
    review_dir, keys = kept
    queues = ReviewQueues(review_dir, config=CONFIG)
    queues.label("kept", keys["sure"], {"ok": "true"})
    assert queues.label("kept", keys["sure"], {"ok": None})["labels"] == {}   # issue 22: with its events beside
    assert (review_dir.root / REVIEW_DATASET_FILE).read_text() == ""


def test_bad_labels_are_refused_with_the_allowed_answers(kept):
    review_dir, keys = kept
    queues = ReviewQueues(review_dir, config=CONFIG)
    with pytest.raises(ValueError, match="power, hvac"):
        queues.label("kept", keys["sure"], {"team": "plumbing"})
    with pytest.raises(ValueError, match="true or false"):
        queues.label("kept", keys["sure"], {"ok": "maybe"})
    with pytest.raises(ValueError, match="not a question"):
        queues.label("kept", keys["sure"], {"colour": "red"})
    assert not (review_dir.root / REVIEW_DATASET_FILE).exists()


def test_items_show_their_media_and_nothing_else_is_reachable(kept):
    review_dir, keys = kept
    queues = ReviewQueues(review_dir, config=CONFIG)
    item = queues.item("kept", keys["sure"])
    assert [(m["slot"], m["type"]) for m in item["media"]] == [("images", "image/png"), ("audio", "audio/wav")]
    assert [q["model"] for q in item["questions"]] == ["true", "power", "1"]
    assert queues.media("kept", keys["sure"], 0) == (PNG, "image/png")
    for call in (lambda: queues.media("kept", keys["sure"], 2), lambda: queues.item("kept", "d-nope"),
                 lambda: queues.items("../../etc")):
        with pytest.raises(KeyError):
            call()


def test_media_are_stored_once_per_content(kept):
    review_dir, _ = kept
    stored = sorted(p.name for p in (review_dir.root / "media").iterdir())
    assert len(stored) == 2 and stored[0].endswith((".png", ".wav"))


def test_a_torn_last_decision_line_is_skipped(kept):
    review_dir, _ = kept
    with open(review_dir.decisions_file, "a") as handle:
        handle.write('{"key": "d-torn", "request": {"st')
    assert len(review_dir.decisions()) == 3


def test_a_batch_output_is_a_queue_of_its_answered_lines_read_from_its_input(tmp_path):
    folder = tmp_path / "batch"
    folder.mkdir()
    (folder / "unit.png").write_bytes(PNG)
    lines = [{"state": f"unit {n}", "questions": QUESTIONS, "images": ["unit.png"]} for n in range(3)]
    (folder / "in.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    records = [{"line": 1, "input": "in.jsonl", "response": decided(0.9, {"power": 0.6, "hvac": 0.4},
                                                                     {"0": 0.9, "1": 0.05, "2": 0.05})},
               {"line": 2, "input": "in.jsonl", "error": {"status": 422, "body": {"detail": []}}},
               {"line": 3, "input": "in.jsonl", "error": {"status": 503, "body": {}}},
               {"line": 3, "input": "in.jsonl", "response": decided(0.7, {"power": 0.9, "hvac": 0.1},
                                                                     {"0": 0.9, "1": 0.05, "2": 0.05})}]
    out = folder / "out.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"line": 4, "inp')    # a torn last write
    review_dir = ReviewDir(tmp_path / "review")
    queues = ReviewQueues(review_dir, [out], config=CONFIG, keep_decisions=False)
    [queue] = queues.queues()
    assert (queue["kind"], queue["name"], queue["items"]) == ("batch", "out.jsonl", 2)   # line 2 failed; 3 retried
    keys = [item["key"] for item in queues.items(queue["id"])]
    assert keys == [f"{queue['id']}-1", f"{queue['id']}-3"]                 # confidence 0.6 (team), then 0.7 (ok)
    item = queues.item(queue["id"], keys[1])
    assert item["state"] == "unit 2" and queues.media(queue["id"], keys[1], 0) == (PNG, "image/png")
    queues.label(queue["id"], keys[1], {"team": "hvac"})
    [record] = load_dataset(dataset_path(review_dir.root), CONFIG)
    assert record.labels == {"team": "hvac"} and record.request.state == "unit 2"
    assert json.loads(review_dir.labels_file.read_text())["x_review"]["source"] == "out.jsonl"


def test_the_same_request_answered_the_same_way_is_kept_once(tmp_path):
    """Issue 22, bug 13: identical Asks were each kept, as duplicates in the kept queue (also across a restart)."""
    review_dir = ReviewDir(tmp_path / "rv")
    answers = decided(0.9, {"power": 0.8, "hvac": 0.2}, {"0": 0.1, "1": 0.8, "2": 0.1})
    first = review_dir.keep_decision(request(), answers)
    assert review_dir.keep_decision(request(), answers) == first
    other = review_dir.keep_decision(request(), decided(0.2, {"power": 0.8, "hvac": 0.2}, {"0": 0.1, "1": 0.8, "2": 0.1}))
    assert other != first                                               # answered differently: its own decision
    assert ReviewDir(tmp_path / "rv").keep_decision(request(), answers) == first      # after a restart too
    assert ReviewDir(tmp_path / "rv").keep_decision(request("Another unit."), answers) not in (first, other)
    assert len(ReviewDir(tmp_path / "rv").decisions()) == 3
