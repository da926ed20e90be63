"""Answer shaping: rounding that keeps sums at exactly 1, argmax/tie rules, score expectation, both confidences."""
from fractions import Fraction

import numpy as np
import pytest

from omni.contract.answers import (
    answer_question,
    build_answers,
    round_distribution,
    typesafe_choice_confidence,
    typesafe_score_confidence,
)
from omni.contract.errors import InferenceFailed
from omni.contract.types import Option, Question


def exact_sum(values):
    return sum(Fraction(str(v)) for v in values)


@pytest.mark.parametrize("p", [[1 / 3] * 3, [0.33335, 0.33335, 0.3333], [0.5, 0.5], [1e-9, 1 - 1e-9],
                               [0.12345, 0.23456, 0.64199], list(np.full(7, 1 / 7))])
def test_rounded_distribution_sums_to_exactly_one(p):
    rounded = round_distribution(p, 4)
    assert exact_sum(rounded) == 1
    assert all(abs(r - x) <= 1e-4 for r, x in zip(rounded, p, strict=True))


def test_random_distributions_keep_exact_sum():
    rng = np.random.default_rng(0)
    for n in (2, 3, 10, 255):
        for _ in range(50):
            p = rng.dirichlet(np.ones(n) * 0.3)
            assert exact_sum(round_distribution(p, 4)) == 1


def test_largest_remainder_ties_go_to_the_earlier_item():
    assert round_distribution([1 / 3, 1 / 3, 1 / 3], 4) == [0.3334, 0.3333, 0.3333]


def choice_q(*ids):
    return Question("c", "choice", tuple(Option(i, None) for i in ids))


def test_choice_maps_head_order_back_to_request_order():
    q = choice_q("zeta", "alpha", "mid")          # head order = sorted: alpha, mid, zeta
    a = answer_question(q, [0.2, 0.5, 0.3])
    assert list(a["probabilities"]) == ["zeta", "alpha", "mid"]
    assert a["probabilities"] == {"zeta": 0.3, "alpha": 0.2, "mid": 0.5}
    assert a["choice"] == "mid" and a["confidence"] == 0.5


def test_clef_confidence_equals_the_reported_probability():
    a = answer_question(choice_q("ship", "rework", "scrap"), [0.97855, 0.00665, 0.0148])   # head order: rework, scrap, ship
    assert a["confidence"] == a["probabilities"][a["choice"]]


def test_choice_tie_goes_to_first_in_request_order():
    q = choice_q("b", "a")                        # head order a, b
    assert answer_question(q, [0.5, 0.5])["choice"] == "b"


def test_score_expectation_legend_and_clef_confidence():
    q = Question("s", "score", tuple(Option(str(i), lvl) for i, lvl in enumerate(["none", "minor", {"x": 1}])))
    a = answer_question(q, [0.1, 0.6, 0.3])
    assert a["score"] == pytest.approx(0 * 0.1 + 1 * 0.6 + 2 * 0.3, abs=1e-12)
    assert a["legend"] == {"0": "none", "1": "minor", "2": {"x": 1}}
    assert a["probabilities"] == {"0": 0.1, "1": 0.6, "2": 0.3} and a["confidence"] == 0.6


def test_typesafe_score_confidence_matches_spec_example():
    # systemone-api §5 E4: mode 1, spread 0.1+0.3 = 0.4, U(3) = 2/3 → c = 1 - 0.4/(2/3) = 0.4
    assert typesafe_score_confidence(np.array([0.1, 0.6, 0.3])) == pytest.approx(0.4)
    q = Question("s", "score", tuple(Option(str(i), str(i)) for i in range(3)))
    assert answer_question(q, [0.1, 0.6, 0.3], confidence="typesafe")["confidence"] == 0.4


def test_typesafe_score_confidence_floors_at_zero_and_hits_one():
    assert typesafe_score_confidence(np.array([0.5, 0.0, 0.5])) == 0.0
    assert typesafe_score_confidence(np.array([0.0, 1.0, 0.0, 0.0])) == 1.0


def test_typesafe_choice_confidence():
    assert typesafe_choice_confidence(np.array([0.25, 0.25, 0.25, 0.25])) == pytest.approx(0.0)
    assert typesafe_choice_confidence(np.array([0.9, 0.05, 0.05])) == pytest.approx((0.9 - 1 / 3) / (2 / 3))
    assert answer_question(choice_q("a", "b"), [0.75, 0.25], confidence="typesafe")["confidence"] == 0.5


def test_noul_is_p_true_and_has_no_confidence():
    q = Question("n", "noul", (Option("true", None), Option("false", None)))
    assert answer_question(q, [0.87654, 0.12346]) == {"type": "noul", "noul": 0.8765}


@pytest.mark.parametrize("bad", [[float("nan"), 0.5], [float("inf"), 0.0], [0.0, 0.0], [0.5]])
def test_invalid_probabilities_never_reach_the_wire(bad):
    q = Question("n", "noul", (Option("true", None), Option("false", None)))
    with pytest.raises(InferenceFailed):
        build_answers([q], [bad])
