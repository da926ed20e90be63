"""omni.learn.metrics against values computed by hand on small arrays."""
import math

import numpy as np
import pytest

from omni.learn import metrics

# four binary rows: predictions 0, 1, 0, 1; labels 0, 0, 0, 1 → three right
P4 = np.array([[0.9, 0.1], [0.4, 0.6], [0.7, 0.3], [0.2, 0.8]])
Y4 = np.array([0, 0, 0, 1])


def test_accuracy_counts_argmax_hits_and_breaks_ties_to_the_first_column():
    assert metrics.accuracy(P4, Y4) == 0.75
    assert metrics.accuracy([[0.5, 0.5]], [0]) == 1.0
    assert metrics.accuracy([[0.5, 0.5]], [1]) == 0.0


def test_macro_f1_by_hand():
    # class 0: TP 2, FN 1, FP 0 → F1 = 4/5; class 1: TP 1, FN 0, FP 1 → F1 = 2/3
    assert metrics.macro_f1(P4, Y4) == pytest.approx((0.8 + 2 / 3) / 2)


def test_macro_f1_ignores_classes_never_seen_nor_predicted_and_scores_predicted_only_ones_zero():
    p = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.8, 0.1]])
    # labels 0, 1, 0: class 0 TP1 FN1 → 2/3; class 1 TP1 FP1 → 2/3; class 2 absent everywhere → not averaged
    assert metrics.macro_f1(p, [0, 1, 0]) == pytest.approx(2 / 3)
    # a class that is only predicted (never true) counts with F1 0
    assert metrics.macro_f1([[0.2, 0.8]], [0]) == 0.0


def test_nll_is_the_mean_negative_log_of_the_true_probability():
    expected = -(math.log(0.9) + math.log(0.4) + math.log(0.7) + math.log(0.8)) / 4
    assert metrics.negative_log_likelihood(P4, Y4) == pytest.approx(expected)
    assert metrics.negative_log_likelihood([[1.0, 0.0]], [1]) == pytest.approx(-math.log(1e-12))


def test_brier_is_the_multiclass_sum_of_squares():
    # rows: (0.1²+0.1²), (0.6²+0.6²), (0.3²+0.3²), (0.2²+0.2²) = 0.02, 0.72, 0.18, 0.08
    assert metrics.brier_score(P4, Y4) == pytest.approx((0.02 + 0.72 + 0.18 + 0.08) / 4)
    assert metrics.brier_score([[0.2, 0.5, 0.3]], [1]) == pytest.approx(0.04 + 0.25 + 0.09)


def test_ece_by_hand_with_15_bins():
    # confidences 0.9 (bin 13: (13/15, 14/15]), 0.6 (bin 8), 0.7 (bin 10: (10/15, 11/15]), 0.8 (bin 11)
    # every bin holds one row: |1-0.9| + |0-0.6| + |1-0.7| + |1-0.8| = 0.1 + 0.6 + 0.3 + 0.2, over 4
    assert metrics.expected_calibration_error(P4, Y4) == pytest.approx(1.2 / 4)


def test_ece_pools_rows_of_one_bin():
    p = np.array([[0.62, 0.38], [0.64, 0.36], [0.36, 0.64]])    # all in bin 9 = (0.6, 2/3]
    labels = [0, 1, 1]                                           # correct, wrong, correct → accuracy 2/3
    mean_confidence = (0.62 + 0.64 + 0.64) / 3
    assert metrics.expected_calibration_error(p, labels) == pytest.approx(abs(2 / 3 - mean_confidence))
    table = metrics.reliability_bins(p, labels)
    assert table.counts[9] == 3 and table.counts.sum() == 3
    assert np.isnan(table.accuracy[0])


def test_a_perfectly_calibrated_set_has_zero_ece():
    p = np.array([[0.75, 0.25]] * 4)
    assert metrics.expected_calibration_error(p, [0, 0, 0, 1]) == pytest.approx(0.0)


def test_precision_threshold_on_a_constructed_case():
    # confidences (sorted): 0.99 ok, 0.95 ok, 0.9 ok, 0.85 WRONG, 0.8 ok, 0.7 ok, 0.6 WRONG, 0.55 WRONG
    confidence = [0.99, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.55]
    correct = [1, 1, 1, 0, 1, 1, 0, 0]
    p = np.array([[c, 1 - c] for c in confidence])
    labels = [0 if ok else 1 for ok in correct]
    # precision of the top k: 1, 1, 1, 3/4, 4/5, 5/6, 5/7, 5/8
    result = metrics.precision_threshold(p, labels, 0.8)
    assert result.threshold == pytest.approx(0.7) and result.coverage == pytest.approx(6 / 8)
    assert result.precision == pytest.approx(5 / 6)
    strict = metrics.precision_threshold(p, labels, 0.95)
    assert strict.threshold == pytest.approx(0.9) and strict.coverage == pytest.approx(3 / 8)
    assert strict.precision == 1.0


def test_precision_threshold_keeps_ties_together_and_reports_none_when_unreachable():
    p = np.array([[0.9, 0.1], [0.9, 0.1], [0.6, 0.4]])
    # the two 0.9 rows are one right, one wrong: no cut separates them → precision 1/2 at best among them
    result = metrics.precision_threshold(p, [0, 1, 0], 0.95)
    assert result.threshold is None and result.coverage == 0.0 and result.precision is None
    assert metrics.precision_threshold(p, [0, 1, 0], 0.6).threshold == pytest.approx(0.6)


def test_zero_padded_columns_do_not_change_any_metric():
    padded = np.hstack([P4, np.zeros((4, 2))])
    for name in ("accuracy", "macro_f1", "negative_log_likelihood", "brier_score", "expected_calibration_error"):
        assert getattr(metrics, name)(padded, Y4) == pytest.approx(getattr(metrics, name)(P4, Y4)), name


def test_summary_and_bad_shapes():
    summary = metrics.summarize(P4, Y4, target_precision=0.95)
    assert summary["count"] == 4 and summary["accuracy"] == 0.75
    # by confidence: 0.9 ok, 0.8 ok, 0.7 ok, 0.6 wrong → cut at 0.7 keeps three of four
    assert summary["precision_threshold"]["threshold"] == pytest.approx(0.7)
    assert summary["precision_threshold"]["coverage"] == pytest.approx(0.75)
    with pytest.raises(ValueError, match=r"expected probabilities \[N, K\] and labels \[N\]"):
        metrics.accuracy(P4, [0, 1])
    with pytest.raises(ValueError, match="a label is outside the probability columns"):
        metrics.accuracy(P4, [0, 1, 2, 0])


def test_confusion_matrix_rows_are_truth():
    matrix = metrics.confusion_matrix([0, 0, 1, 2], [0, 1, 1, 0], 3)
    assert matrix.tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 0]]
