"""A team on the review queues (issue 22): k reviewers per item labelling blind, consensus, the disagreements queue and
its adjudications; filters on an item list; skipped items last."""
from __future__ import annotations

import json

import pytest

from omni.learn.dataset import load_dataset
from omni.review.directory import REVIEW_DATASET_FILE, ReviewDir, dataset_path
from omni.review.filters import ItemFilter, ReviewInputError
from omni.review.history import UndoRefused
from omni.review.queues import DISAGREEMENTS, ReviewQueues, Viewer
from tests.unit.review.test_directory import CONFIG, decided, request

ALICE, BOB, CAROL = Viewer("alice"), Viewer("bob"), Viewer("carol")
EVERY = {"ok": "true", "team": "power", "grade": "1"}


def kept_dir(tmp_path, k: int = 1, oks=(0.55, 0.65, 0.75), route=None) -> tuple[ReviewDir, list[str]]:
    """Kept decisions whose `ok` answers are `oks` (team 0.9, grade 0.85 sure): the least sure first."""
    review_dir = ReviewDir(tmp_path / "review", k=k)
    keys = [review_dir.keep_decision(request(f"unit {i}"), decided(ok, {"power": 0.9, "hvac": 0.1},
                                                                     {"0": 0.1, "1": 0.85, "2": 0.05}),
                                     route=route(i) if route else None)
            for i, ok in enumerate(oks)]
    return review_dir, keys


@pytest.fixture
def pair(tmp_path):
    """Three kept decisions under k=2."""
    review_dir, keys = kept_dir(tmp_path, k=2)
    return ReviewQueues(review_dir, config=CONFIG), keys


def queue_of(queues: ReviewQueues, queue_id: str) -> dict:
    return next(q for q in queues.queues() if q["id"] == queue_id)


def test_with_k2_each_reviewer_labels_blind_and_the_item_is_done_once_two_labelled_every_question(pair):
    queues, [key, *_] = pair
    queues.label("kept", key, EVERY, ALICE)
    assert queues.item("kept", key, ALICE)["labels"] == EVERY
    seen_by_bob = queues.item("kept", key, BOB)
    assert seen_by_bob["labels"] == {} and seen_by_bob["history"] == [] and "by_reviewer" not in seen_by_bob
    assert seen_by_bob["labelled_by"] == {"ok": ["alice"], "team": ["alice"], "grade": ["alice"]}
    assert seen_by_bob["consensus"] == {} and seen_by_bob["review_state"] == "partly" and seen_by_bob["k"] == 2
    assert queue_of(queues, "kept")["reviewed"] == 0 and queue_of(queues, "kept")["k"] == 2
    assert {e["key"]: e["labelled"] for e in queues.items("kept", viewer=BOB)}[key] == 0   # bob has labelled nothing
    assert (queues.review_dir.root / REVIEW_DATASET_FILE).read_text() == ""         # no consensus, no dataset line

    queues.label("kept", key, {"ok": "true", "team": "power"}, BOB)
    assert queues.item("kept", key, BOB)["review_state"] == "partly"                 # grade: one reviewer only
    assert queue_of(queues, "kept")["reviewed"] == 0
    answer = queues.label("kept", key, {"grade": "1"}, BOB)
    assert answer["labels"] == EVERY and answer["review_state"] == "done"            # bob's own; the item's state
    item = queues.item("kept", key, BOB)
    assert item["consensus"] == EVERY and item["review_state"] == "done"
    assert [h["reviewer"] for h in item["history"]] == ["bob"] * 3                   # still only bob's own
    assert queue_of(queues, "kept")["reviewed"] == 1
    assert queue_of(queues, DISAGREEMENTS)["items"] == 0
    [record] = load_dataset(dataset_path(queues.review_dir.root), CONFIG)
    assert record.labels == EVERY
    line = json.loads((queues.review_dir.root / REVIEW_DATASET_FILE).read_text())
    assert line["x_review"]["labelled_by"]["grade"] == ["alice", "bob"]


def test_disagreements_form_their_own_queue_and_a_label_there_adjudicates(pair):
    queues, [agreed, split, alone] = pair
    queues.label("kept", agreed, EVERY, ALICE)
    queues.label("kept", agreed, EVERY, BOB)
    queues.label("kept", split, EVERY, ALICE)
    queues.label("kept", split, {**EVERY, "team": "hvac", "grade": "2"}, BOB)
    queues.label("kept", alone, {"ok": "false"}, CAROL)
    assert [q["id"] for q in queues.queues()] == ["kept", DISAGREEMENTS]
    assert queue_of(queues, DISAGREEMENTS) == {"id": DISAGREEMENTS, "kind": DISAGREEMENTS, "name": DISAGREEMENTS,
                                               "items": 1, "reviewed": 0, "failed": 0, "failures": [], "k": 2}
    assert [e["key"] for e in queues.items(DISAGREEMENTS, viewer=CAROL)] == [split]
    item = queues.item(DISAGREEMENTS, split, CAROL)
    assert item["disagreements"] == ["team", "grade"] and item["labels"] == item["consensus"] == {"ok": "true"}
    assert item["by_reviewer"] == {"alice": EVERY, "bob": {**EVERY, "team": "hvac", "grade": "2"}}
    assert len(item["history"]) == 6                                               # everyone's, to adjudicate
    with pytest.raises(KeyError):
        queues.item(DISAGREEMENTS, agreed, CAROL)                                   # agreed: not in that queue

    [event] = queues.label(DISAGREEMENTS, split, {"team": "hvac"}, CAROL)["events"]
    assert queues.item(DISAGREEMENTS, split, CAROL)["disagreements"] == ["grade"]
    answer = queues.label(DISAGREEMENTS, split, {"grade": "1"}, CAROL)
    assert answer["labels"] == {"ok": "true", "team": "hvac", "grade": "1"}
    assert queues.items(DISAGREEMENTS, viewer=CAROL) == [] and queue_of(queues, DISAGREEMENTS)["items"] == 0
    assert queues.item("kept", split, ALICE)["consensus"] == {"ok": "true", "team": "hvac", "grade": "1"}
    assert queues.item("kept", split, ALICE)["labels"] == EVERY                     # alice's own labels stay hers
    adjudication = [h for h in queues.item(DISAGREEMENTS, split, CAROL)["history"] if h["queue"] == DISAGREEMENTS]
    assert [(h["question"], h["new"], h["reviewer"], h["action"]) for h in adjudication] == [
        ("team", "hvac", "carol", "label"), ("grade", "1", "carol", "label")]
    line = next(json.loads(t) for t in (queues.review_dir.root / REVIEW_DATASET_FILE).read_text().splitlines()
                if json.loads(t)["x_review"]["key"] == split)
    assert line["labels"] == {"ok": True, "team": "hvac", "grade": 1}
    assert line["x_review"]["adjudicated"] == {"team": "hvac", "grade": 1}
    assert line["x_review"]["adjudicated_by"] == {"team": "carol", "grade": "carol"}

    queues.label(DISAGREEMENTS, split, {"team": "power"}, Viewer("dana"))        # dana adjudicates again
    with pytest.raises(UndoRefused, match="changed since by dana"):
        queues.undo(DISAGREEMENTS, split, event, CAROL)
    [grade] = answer["events"]
    assert queues.undo(DISAGREEMENTS, split, grade, CAROL)["labels"] == {"ok": "true", "team": "power"}
    assert [e["key"] for e in queues.items(DISAGREEMENTS)] == [split]             # grade differs again: back
    again = ReviewQueues(ReviewDir(queues.review_dir.root, k=2), config=CONFIG)     # and so after a restart
    assert [e["key"] for e in again.items(DISAGREEMENTS)] == [split]


def test_with_k1_there_is_no_disagreements_queue(tmp_path):
    review_dir, [key, *_] = kept_dir(tmp_path)
    queues = ReviewQueues(review_dir, config=CONFIG)
    queues.label("kept", key, EVERY, ALICE)
    queues.label("kept", key, {"ok": "false"}, BOB)
    assert [q["id"] for q in queues.queues()] == ["kept"]
    with pytest.raises(KeyError):
        queues.items(DISAGREEMENTS)


def test_filters_combine(tmp_path):
    def route(i: int) -> dict:
        return {"queue": "policy", "reasons": [], "x_outcome": {"overall": ("act", "review", "pass")[i % 3]}}

    review_dir, keys = kept_dir(tmp_path, oks=(0.45, 0.35, 0.75, 0.8, 0.95, 0.97), route=route)
    queues = ReviewQueues(review_dir, config=CONFIG, policy=lambda: None)
    confidence = [(e["key"], e["confidence"]) for e in queues.items("policy")]
    assert confidence == list(zip(keys, [0.55, 0.65, 0.75, 0.8, 0.85, 0.85], strict=True))
    queues.label("policy", keys[0], EVERY, ALICE)                      # done
    queues.label("policy", keys[1], {"ok": "false"}, BOB)              # partly
    queues.comment("policy", keys[2], "look at the fan", BOB)
    queues.flag("policy", keys[3], "wrong unit", ALICE)

    def listed(**where) -> list[str]:
        return [e["key"] for e in queues.items("policy", where=ItemFilter(**where), viewer=ALICE)]

    assert listed(state="done") == [keys[0]] and listed(state="partly") == [keys[1]]
    assert listed(state="unlabelled") == keys[2:]
    assert listed(state="flagged") == [keys[3]]
    assert listed(reviewer="bob") == [keys[1], keys[2]] and listed(reviewer="alice") == [keys[0], keys[3]]
    assert listed(outcome="act") == [keys[0], keys[3]] and listed(outcome="pass") == [keys[2], keys[5]]
    assert listed(min_confidence=0.7, max_confidence=0.8) == [keys[2], keys[3]]
    assert listed(question="ok", answer="true") == keys[2:]                         # noul 0.45 and 0.35: false
    assert listed(question="ok", answer="false") == [keys[0], keys[1]]
    assert listed(question="team", min_confidence=0.9) == keys                      # the question's confidence
    assert listed(question="ok", min_confidence=0.9) == [keys[4], keys[5]]
    assert listed(question="ok", answer="true", outcome="act", reviewer="alice", state="flagged") == [keys[3]]
    assert listed(question="ok", answer="true", state="done") == []
    assert listed(question="colour") == []                                         # no item has it
    entry = queues.items("policy", where=ItemFilter(state="done"), viewer=ALICE)[0]
    assert {name: entry[name] for name in ("state", "flagged", "reviewers", "outcome", "skipped", "labelled")} == {
        "state": "done", "flagged": False, "reviewers": ["alice"], "outcome": "act", "skipped": False, "labelled": 3}


@pytest.mark.parametrize(("where", "field", "message"), [
    ({"answer": "true"}, "answer", "give question too"),
    ({"state": "finished"}, "state", "unlabelled, partly, done, flagged"),
    ({"outcome": "maybe"}, "outcome", "act, review, pass"),
    ({"min_confidence": 1.5}, "min_confidence", "0..1"),
    ({"min_confidence": 0.8, "max_confidence": 0.2}, "min_confidence", "above max_confidence"),
])
def test_bad_filters_name_the_field(where, field, message):
    with pytest.raises(ReviewInputError, match=message) as caught:
        ItemFilter(**where)
    assert caught.value.field == field


def test_skipped_items_go_last_in_the_list_of_who_skipped_them(tmp_path):
    review_dir, keys = kept_dir(tmp_path)
    queues = ReviewQueues(review_dir, config=CONFIG)
    assert [e["key"] for e in queues.items("kept", viewer=ALICE)] == keys
    skip = queues.skip("kept", keys[0], "come back later", ALICE)
    mine = queues.items("kept", viewer=ALICE)
    assert [e["key"] for e in mine] == [keys[1], keys[2], keys[0]] and mine[-1]["skipped"]
    assert [e["key"] for e in queues.items("kept", viewer=BOB)] == keys              # bob's order is unchanged
    queues.undo("kept", keys[0], skip["id"], ALICE)
    assert [e["key"] for e in queues.items("kept", viewer=ALICE)] == keys


def test_an_item_names_the_model_that_answered_and_the_list_filters_by_it(tmp_path):
    """Decisions answered by the base and by adapters share a queue; each entry names its model; `model` keeps one."""
    review_dir = ReviewDir(tmp_path / "review")
    models = ["clef-omni", "line-4", "line-4", None]
    keys = []
    for i, model in enumerate(models):
        response = decided(0.55 + i / 100, {"power": 0.9, "hvac": 0.1}, {"0": 0.1, "1": 0.85, "2": 0.05})
        if model is not None:
            response["model"] = model
        keys.append(review_dir.keep_decision(request(f"unit {i}"), response))
    queues = ReviewQueues(review_dir, config=CONFIG)
    assert [e["model"] for e in queues.items("kept")] == models

    def listed(model: str) -> list[str]:
        return [e["key"] for e in queues.items("kept", where=ItemFilter(model=model))]

    assert listed("line-4") == keys[1:3] and listed("clef-omni") == keys[:1] and listed("other") == []
