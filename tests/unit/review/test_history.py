"""The review history (issue 22): every label change kept with its reviewer and time, the state rebuilt from the file
after a restart (a torn last line skipped), undo that reverts only one's own last change, two reviewers at once both
kept, and labels.jsonl naming who gave each label while `omni eval` still reads it."""
from __future__ import annotations

import itertools
import json
import threading

import pytest

from omni.learn.dataset import load_dataset
from omni.review.directory import REVIEW_DATASET_FILE, ReviewDir, dataset_path
from omni.review.history import HISTORY_FILE, ReviewHistory, UndoRefused
from omni.review.queues import ReviewQueues, Viewer
from tests.unit.review.test_directory import CONFIG, decided, request

ALICE, BOB = Viewer("alice"), Viewer("bob")


@pytest.fixture
def team(tmp_path):
    """A review directory with two kept decisions, and its queues."""
    review_dir = ReviewDir(tmp_path / "review")
    keys = [review_dir.keep_decision(request(f"unit {n}"), decided(0.6 + n / 10, {"power": 0.7, "hvac": 0.3},
                                                                     {"0": 0.1, "1": 0.8, "2": 0.1}))
            for n in range(2)]
    return ReviewQueues(review_dir, config=CONFIG), keys


def history_lines(queues: ReviewQueues) -> list[dict]:
    return [json.loads(line) for line in (queues.review_dir.root / HISTORY_FILE).read_text().splitlines()]


def test_every_label_change_is_kept_with_its_reviewer_and_time(team):
    queues, [key, _] = team
    first = queues.label("kept", key, {"ok": "true", "team": "power"}, ALICE)
    assert len(first["events"]) == 2
    assert queues.label("kept", key, {"ok": "true"}, BOB)["events"] == []        # the same value: no change, no event
    changed = queues.label("kept", key, {"ok": "false"}, BOB)
    assert changed == {"labels": {"ok": "false", "team": "power"}, "events": changed["events"],
                       "review_state": "partly"}
    history = queues.item("kept", key, ALICE)["history"]
    assert [(h["question"], h["old"], h["new"], h["reviewer"], h["action"]) for h in history] == [
        ("ok", None, "true", "alice", "label"), ("team", None, "power", "alice", "label"),
        ("ok", "true", "false", "bob", "label")]
    assert all(h["at"].endswith("Z") and h["at"][:2] == "20" for h in history)
    lines = history_lines(queues)                                   # the file holds the same, one event a line
    assert [(e["action"], e["reviewer"], e["queue"], e["key"], e["question"], e["old"], e["new"]) for e in lines] == [
        ("label", "alice", "kept", key, "ok", None, "true"), ("label", "alice", "kept", key, "team", None, "power"),
        ("label", "bob", "kept", key, "ok", "true", "false")]
    assert [e["id"] for e in lines] == [h["id"] for h in history] and lines[2]["id"] == changed["events"][0]


def test_the_item_carries_its_review(team):
    queues, [key, _] = team
    queues.label("kept", key, {"ok": "true"}, ALICE)
    comment = queues.comment("kept", key, "  the photo is blurred  ", BOB)
    flag = queues.flag("kept", key, "needs a second look", BOB)
    skip = queues.skip("kept", key, None, ALICE)
    item = queues.item("kept", key, ALICE)
    assert (comment["text"], comment["reviewer"]) == ("the photo is blurred", "bob")   # stripped
    assert item["comments"] == [comment] and item["flags"] == [flag] and item["skips"] == [skip]
    assert skip["reason"] is None and flag["reason"] == "needs a second look"
    assert item["labels"] == item["consensus"] == {"ok": "true"} and item["labelled_by"] == {"ok": ["alice"]}
    assert (item["k"], item["review_state"], item["flagged"]) == (1, "partly", True)
    assert "by_reviewer" not in item                      # not in the disagreements queue, not an admin
    assert queues.item("kept", key, Viewer("root", sees_all=True))["by_reviewer"] == {"alice": {"ok": "true"}}
    assert item["state"] == "unit 0"                      # `state` stays the request's state
    queues.label("kept", key, {"team": "hvac", "grade": "0"}, ALICE)
    assert queues.item("kept", key, ALICE)["review_state"] == "done"


def test_the_state_survives_a_restart_and_a_torn_last_line_is_skipped(team):
    queues, [key, other] = team
    queues.label("kept", key, {"ok": "false"}, ALICE)
    queues.label("kept", key, {"ok": "true", "grade": "2"}, BOB)
    queues.comment("kept", key, "checked twice", ALICE)
    flag = queues.flag("kept", other, "wrong unit", BOB)
    path = queues.review_dir.root / HISTORY_FILE
    with open(path, "a") as handle:
        handle.write('{"id": "e-torn", "at": "2025-01-01T00:00:00Z", "reviewer": "carol", "ac')   # a crash mid-write
    again = ReviewQueues(ReviewDir(queues.review_dir.root), config=CONFIG)
    item = again.item("kept", key, ALICE)
    assert item["labels"] == {"ok": "true", "grade": "2"} and len(item["history"]) == 3
    assert [c["text"] for c in item["comments"]] == ["checked twice"]
    assert again.item("kept", other, ALICE)["flags"] == [flag]
    again.label("kept", other, {"ok": "true"}, BOB)             # appended after the torn line: read on a restart too
    third = ReviewQueues(ReviewDir(queues.review_dir.root), config=CONFIG)
    assert third.item("kept", other, BOB)["labels"] == {"ok": "true"}
    assert len(ReviewHistory(path).item(other).events) == 2


def test_undo_reverts_a_label_a_flag_and_a_skip_and_the_history_records_it(team):
    queues, [key, _] = team
    queues.label("kept", key, {"ok": "true"}, ALICE)
    [event] = queues.label("kept", key, {"ok": "false"}, ALICE)["events"]
    undone = queues.undo("kept", key, event, ALICE)
    assert undone["labels"] == {"ok": "true"} and undone["event"].startswith("e-")
    revert = history_lines(queues)[-1]
    assert (revert["action"], revert["reverts"], revert["question"], revert["old"], revert["new"],
            revert["reviewer"]) == ("revert", event, "ok", "false", "true", "alice")
    assert queues.item("kept", key, ALICE)["history"][-1]["action"] == "revert"
    flag = queues.flag("kept", key, "odd", ALICE)
    skip = queues.skip("kept", key, "later", ALICE)
    assert queues.undo("kept", key, flag["id"], ALICE)["flags"] == []
    after = queues.undo("kept", key, skip["id"], ALICE)
    assert after["skips"] == [] and after["labels"] == {"ok": "true"}
    item = queues.item("kept", key, ALICE)
    assert not item["flagged"] and item["flags"] == [] and item["skips"] == []
    again = ReviewQueues(ReviewDir(queues.review_dir.root), config=CONFIG)       # the reverts hold after a restart
    assert again.item("kept", key, ALICE)["labels"] == {"ok": "true"} and not again.item("kept", key, ALICE)["flagged"]
    first = history_lines(queues)[0]["id"]
    assert queues.undo("kept", key, first, ALICE)["labels"] == {}              # undo again: back to no label
    assert not (queues.review_dir.root / REVIEW_DATASET_FILE).read_text()       # and the dataset line is gone


def test_undo_refuses_what_is_not_the_reviewers_own_last_change(team):
    queues, [key, other] = team
    [mine] = queues.label("kept", key, {"ok": "true"}, ALICE)["events"]
    with pytest.raises(UndoRefused, match="alice's: only the reviewer who gave it"):
        queues.undo("kept", key, mine, BOB)
    [theirs] = queues.label("kept", key, {"ok": "false"}, BOB)["events"]
    with pytest.raises(UndoRefused, match="changed since by bob .*true -> false"):
        queues.undo("kept", key, mine, ALICE)
    queues.undo("kept", key, theirs, BOB)
    with pytest.raises(UndoRefused, match="already undone"):
        queues.undo("kept", key, theirs, BOB)
    comment = queues.comment("kept", key, "hm", ALICE)
    with pytest.raises(UndoRefused, match="only labels, flags and skips"):
        queues.undo("kept", key, comment["id"], ALICE)
    with pytest.raises(KeyError, match="no event"):
        queues.undo("kept", key, "e-0000000000000000", ALICE)
    with pytest.raises(KeyError, match="no event"):                            # an event of another item
        queues.undo("kept", other, mine, ALICE)
    assert queues.undo("kept", key, mine, ALICE)["labels"] == {}                 # bob's change undone: alice's is last


def test_two_reviewers_labelling_the_same_question_at_once_are_both_kept(team):
    queues, [key, _] = team
    start = threading.Barrier(8)
    answers = {}

    def label(n: int) -> None:
        start.wait()
        answers[n] = queues.label("kept", key, {"team": "power" if n % 2 else "hvac"}, Viewer(f"r{n}"))

    threads = [threading.Thread(target=label, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    history = queues.item("kept", key, ALICE)["history"]
    given = [h for h in history if h["question"] == "team"]
    made = sorted(e for a in answers.values() for e in a["events"])
    assert sorted(h["id"] for h in given) == made and len(made) >= 1
    for before, after in itertools.pairwise(given):             # a chain: each change starts where the last ended
        assert after["old"] == before["new"]
    assert queues.item("kept", key, ALICE)["labels"]["team"] == given[-1]["new"]   # the last one is the label
    reloaded = ReviewQueues(ReviewDir(queues.review_dir.root), config=CONFIG)
    assert reloaded.item("kept", key, ALICE)["labels"]["team"] == given[-1]["new"]


def test_two_reviewers_setting_different_labels_at_once_are_both_in_the_history(team):
    queues, [key, _] = team
    for _ in range(20):                                     # a race each time; both always kept, the last the label
        start = threading.Barrier(2)
        done: dict[str, list[str]] = {}

        def label(viewer: Viewer, answer: str, start=start, done=done) -> None:
            start.wait()
            done[viewer.name] = queues.label("kept", key, {"grade": answer}, viewer)["events"]

        current = queues.item("kept", key, ALICE)["labels"].get("grade")
        a, b = ("0", "1") if current != "0" and current != "1" else (("1", "2") if current == "0" else ("2", "0"))
        threads = [threading.Thread(target=label, args=(ALICE, a)), threading.Thread(target=label, args=(BOB, b))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(done["alice"]) == len(done["bob"]) == 1
        last = [h for h in queues.item("kept", key, ALICE)["history"] if h["question"] == "grade"][-2:]
        assert {h["reviewer"] for h in last} == {"alice", "bob"} and last[1]["old"] == last[0]["new"]
        assert queues.item("kept", key, ALICE)["labels"]["grade"] == last[1]["new"]


def test_labels_jsonl_names_the_reviewer_of_each_label_and_eval_still_reads_it(team):
    queues, [key, other] = team
    queues.label("kept", key, {"ok": "false", "grade": "2"}, ALICE)
    queues.label("kept", key, {"grade": "1"}, BOB)
    queues.label("kept", other, {"team": "hvac"}, BOB)
    lines = {json.loads(t)["x_review"]["key"]: json.loads(t)
             for t in (queues.review_dir.root / REVIEW_DATASET_FILE).read_text().splitlines()}
    review = lines[key]["x_review"]
    assert lines[key]["labels"] == {"ok": False, "grade": 1}
    assert review["labelled_by"] == {"ok": ["alice"], "grade": ["bob"]}
    assert review["by_reviewer"] == {"alice": {"ok": False, "grade": 2}, "bob": {"grade": 1}}
    assert "adjudicated" not in review
    records = {r.request.state: r.labels for r in load_dataset(dataset_path(queues.review_dir.root), CONFIG)}
    assert records == {"unit 0": {"ok": "false", "grade": "1"}, "unit 1": {"team": "hvac"}}


def test_a_review_dir_made_before_the_history_keeps_its_labels_as_given_by_their_reviewer(team):
    queues, [key, other] = team
    queues.label("kept", key, {"ok": "true"}, ALICE)
    queues.label("kept", other, {"grade": "0"}, ALICE)
    root = queues.review_dir.root
    (root / HISTORY_FILE).unlink()                               # as a directory from before issue 22
    lines = [json.loads(t) for t in (root / REVIEW_DATASET_FILE).read_text().splitlines()]
    for line in lines:
        for name in ("labelled_by", "by_reviewer"):
            line["x_review"].pop(name)
    lines[0]["x_review"]["reviewer"] = "dana"
    (root / REVIEW_DATASET_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    again = ReviewQueues(ReviewDir(root), config=CONFIG)
    first, second = (again.item("kept", k, ALICE) for k in (key, other))
    assert first["labels"] == {"ok": "true"} and first["labelled_by"] == {"ok": ["dana"]}
    assert second["labels"] == {"grade": "0"} and second["labelled_by"] == {"grade": ["unknown"]}
    assert [(h["reviewer"], h["new"]) for h in second["history"]] == [("unknown", "0")]
    assert (root / HISTORY_FILE).exists()                        # the history starts from them
    assert load_dataset(dataset_path(root), CONFIG)[0].labels == {"ok": "true"}


def test_bad_notes_are_refused_naming_the_field_and_the_limit(team):
    queues, [key, _] = team
    short = ReviewQueues(queues.review_dir, config=CONFIG, max_comment_chars=10)
    for text, message in (("", "needs text"), ("   ", "needs text"), (None, "needs text"),
                          ("x" * 11, "at most 10 characters; this one has 11")):
        with pytest.raises(ValueError, match=message) as caught:
            short.comment("kept", key, text, ALICE)
        assert caught.value.field == "text"
    assert short.comment("kept", key, "x" * 10, ALICE)["text"] == "x" * 10
    for reason in (None, "", " "):
        with pytest.raises(ValueError, match="a flag needs a reason") as caught:
            queues.flag("kept", key, reason, ALICE)
        assert caught.value.field == "reason"
    with pytest.raises(ValueError, match="at most 500 characters"):
        queues.flag("kept", key, "y" * 501, ALICE)
    with pytest.raises(ValueError, match="at most 500 characters"):
        queues.skip("kept", key, "y" * 501, ALICE)
    with pytest.raises(KeyError):
        queues.comment("kept", "d-nope", "hello", ALICE)
    assert [c["text"] for c in queues.item("kept", key, ALICE)["comments"]] == ["x" * 10]
