"""Agreement (issue 22): Cohen's and Fleiss' kappa on textbook values, the choice between them per question, the
model's agreement with the reviewers, and the same through the review queues."""
from __future__ import annotations

import pytest

from omni.review.agreement import cohen_kappa, fleiss_kappa, fleiss_observed, question_agreement
from omni.review.directory import ReviewDir
from omni.review.queues import DISAGREEMENTS, ReviewQueues, Viewer
from tests.unit.review.test_directory import CONFIG, decided, request

# Wikipedia, "Fleiss' kappa", worked example: 10 subjects, 14 raters each, 5 categories -> P-bar 0.378, kappa 0.210
FLEISS_EXAMPLE = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
                  [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]
# Wikipedia, "Cohen's kappa", first example: 50 grant proposals read by A and B -> p_o 0.7, p_e 0.5, kappa 0.4
COHEN_EXAMPLE = [("yes", "yes")] * 20 + [("yes", "no")] * 5 + [("no", "yes")] * 10 + [("no", "no")] * 15


def test_fleiss_kappa_of_the_textbook_example():
    assert fleiss_kappa(FLEISS_EXAMPLE) == pytest.approx(0.210, abs=5e-4)
    assert fleiss_observed(FLEISS_EXAMPLE) == pytest.approx(0.378, abs=5e-4)


def test_cohen_kappa_of_the_textbook_example():
    assert cohen_kappa(COHEN_EXAMPLE) == pytest.approx(0.4)
    assert cohen_kappa([(b, a) for a, b in COHEN_EXAMPLE]) == pytest.approx(0.4)        # symmetric


def test_kappa_is_one_for_full_agreement_and_undefined_without_chance_to_disagree():
    assert cohen_kappa([("a", "a"), ("b", "b")]) == pytest.approx(1.0)
    assert cohen_kappa([("a", "b"), ("b", "a")]) == pytest.approx(-1.0)
    assert cohen_kappa([("a", "a")] * 3) is None                     # one category only: kappa is undefined
    assert cohen_kappa([]) is None
    assert fleiss_kappa([[3, 0], [3, 0]]) is None
    assert fleiss_kappa([[2, 0], [0, 2]]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="same number"):
        fleiss_kappa([[2, 0], [1, 2]])


def test_two_reviewers_get_cohens_kappa_and_the_model_its_share():
    items = [[("ann", a), ("ben", b)] for a, b in COHEN_EXAMPLE] + [[("ann", "yes")]]   # one item with one label
    model = ["yes"] * len(items)
    result = question_agreement(items, model, k=2)
    assert result["method"] == "cohen" and result["items"] == 50 and result["reviewers"] == ["ann", "ben"]
    assert result["kappa"] == pytest.approx(0.4) and result["observed"] == pytest.approx(0.7)
    yes = 20 * 2 + 5 + 10 + 1                                       # reviewer labels equal to the model's "yes"
    assert result["labels"] == 101 and result["model"] == pytest.approx(yes / 101)


def test_more_reviewers_get_fleiss_kappa_on_the_first_k_labels():
    names = [f"r{n}" for n in range(14)]
    items = []
    for counts in FLEISS_EXAMPLE:
        labels = [str(c) for c, count in enumerate(counts) for _ in range(count)]
        items.append(list(zip(names, labels, strict=True)))
    result = question_agreement(items, [None] * len(items), k=14)
    assert result["method"] == "fleiss" and result["items"] == 10 and len(result["reviewers"]) == 14
    assert result["kappa"] == pytest.approx(0.210, abs=5e-4) and result["observed"] == pytest.approx(0.378, abs=5e-4)
    assert result["model"] is None and result["labels"] == 0
    # k=2 with three reviewers: each item's first two labels by time; an item with one label is left out
    three = [[("a", "x"), ("b", "x"), ("c", "y")], [("b", "y"), ("c", "y")], [("c", "x"), ("a", "y")], [("a", "x")]]
    small = question_agreement(three, ["x", "y", None, "x"], k=2)
    assert small["method"] == "fleiss" and small["items"] == 3 and small["observed"] == pytest.approx(2 / 3)
    assert small["kappa"] == pytest.approx(fleiss_kappa([[2, 0], [0, 2], [1, 1]]))
    assert small["model"] == pytest.approx(5 / 6) and small["labels"] == 6      # x,x of x,x,y; y,y; x


def test_without_two_reviewers_on_an_item_there_is_no_kappa():
    result = question_agreement([[("a", "x")], [("b", "y")]], ["x", "x"], k=2)
    assert (result["method"], result["kappa"], result["items"], result["observed"]) == (None, None, 0, None)
    assert result["model"] == pytest.approx(0.5)


def test_the_queues_report_agreement_per_question(tmp_path):
    review_dir = ReviewDir(tmp_path / "review", k=2)
    answers = decided(0.9, {"power": 0.9, "hvac": 0.1}, {"0": 0.1, "1": 0.85, "2": 0.05})   # true, power, 1
    keys = [review_dir.keep_decision(request(f"unit {n}"), answers) for n in range(4)]
    queues = ReviewQueues(review_dir, config=CONFIG)
    ann, ben = Viewer("ann"), Viewer("ben")
    pairs = [("true", "true"), ("true", "false"), ("false", "false"), ("true", "true")]
    for key, (a, b) in zip(keys, pairs, strict=True):
        queues.label("kept", key, {"ok": a}, ann)
        queues.label("kept", key, {"ok": b}, ben)
    queues.label("kept", keys[0], {"team": "power"}, ann)
    queues.label(DISAGREEMENTS, keys[1], {"ok": "true"}, Viewer("cy"))        # an adjudication is no reviewer label
    report = queues.agreement()
    assert report["k"] == 2 and set(report["questions"]) == {"ok", "team"}
    ok = report["questions"]["ok"]
    # ann: t t f t, ben: t f f t -> p_o 3/4; p_e = 3/4*2/4 + 1/4*2/4 = 1/2 -> kappa 1/2; model "true": 5 of 8
    assert (ok["method"], ok["items"], ok["reviewers"]) == ("cohen", 4, ["ann", "ben"])
    assert ok["kappa"] == pytest.approx(0.5) and ok["observed"] == pytest.approx(0.75)
    assert ok["model"] == pytest.approx(5 / 8) and ok["labels"] == 8
    team = report["questions"]["team"]
    assert (team["method"], team["kappa"], team["model"], team["labels"]) == (None, None, 1.0, 1)
