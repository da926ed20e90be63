"""Classification metrics of probability forecasts: accuracy, macro-F1, NLL, Brier, ECE, precision threshold.

Every function takes `probabilities` [N, K] (rows sum to 1; a row may be zero-padded past its own options) and
`labels` [N] (the index of the true option in that row). Pure numpy: knows nothing of torch, questions, models or
files. Definitions (the tests pin them with hand-computed values):

- accuracy: share of rows whose argmax (first maximum) equals the label.
- macro-F1: mean F1 over the classes that occur in the labels or the predictions (sklearn's `average="macro"`).
- NLL: mean −ln p[label] (p clipped at 1e-12, so a certain miss costs 27.6, not infinity).
- Brier: mean over rows of Σ_k (p_k − y_k)² (the multi-class form: a binary row counts twice the one-column
  value).
- ECE: top-label calibration error over `bins` equal-width confidence bins (i/B, (i+1)/B] (confidence 0 joins
  bin 0): Σ_b |B_b|/N · |accuracy(B_b) − mean confidence(B_b)|.
- precision threshold: the lowest confidence t such that the rows with confidence ≥ t reach the target precision
  (their accuracy); coverage is the share of rows with confidence ≥ t (what can be decided automatically).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

PROBABILITY_FLOOR = 1e-12
ECE_BINS = 15


def _check(probabilities: npt.ArrayLike, labels: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    if p.ndim != 2 or y.shape != (p.shape[0],):
        raise ValueError(f"expected probabilities [N, K] and labels [N], got {p.shape} and {y.shape}")
    if len(y) and (y.min() < 0 or y.max() >= p.shape[1]):
        raise ValueError("a label is outside the probability columns")
    return p, y


def predictions(probabilities: npt.ArrayLike) -> np.ndarray:
    """Argmax per row (ties → the first column)."""
    return np.asarray(probabilities, dtype=np.float64).argmax(axis=1)


def confidences(probabilities: npt.ArrayLike) -> np.ndarray:
    """Top-label confidence per row: max_k p_k."""
    return np.asarray(probabilities, dtype=np.float64).max(axis=1)


def accuracy(probabilities: npt.ArrayLike, labels: npt.ArrayLike) -> float:
    p, y = _check(probabilities, labels)
    return float(np.mean(predictions(p) == y)) if len(y) else float("nan")


def confusion_matrix(labels: npt.ArrayLike, predicted: npt.ArrayLike, n_classes: int) -> np.ndarray:
    """[n_classes, n_classes] counts; row = true class, column = predicted class."""
    matrix = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(matrix, (np.asarray(labels, dtype=np.int64), np.asarray(predicted, dtype=np.int64)), 1)
    return matrix


def macro_f1(probabilities: npt.ArrayLike, labels: npt.ArrayLike) -> float:
    p, y = _check(probabilities, labels)
    if not len(y):
        return float("nan")
    predicted = predictions(p)
    matrix = confusion_matrix(y, predicted, p.shape[1])
    scores = []
    for k in sorted(set(y.tolist()) | set(predicted.tolist())):
        true_positive = matrix[k, k]
        denominator = matrix[k, :].sum() + matrix[:, k].sum()    # 2TP + FN + FP
        scores.append(2.0 * true_positive / denominator if denominator else 0.0)
    return float(np.mean(scores))


def negative_log_likelihood(probabilities: npt.ArrayLike, labels: npt.ArrayLike) -> float:
    p, y = _check(probabilities, labels)
    if not len(y):
        return float("nan")
    return float(np.mean(-np.log(np.clip(p[np.arange(len(y)), y], PROBABILITY_FLOOR, None))))


def brier_score(probabilities: npt.ArrayLike, labels: npt.ArrayLike) -> float:
    p, y = _check(probabilities, labels)
    if not len(y):
        return float("nan")
    onehot = np.zeros_like(p)
    onehot[np.arange(len(y)), y] = 1.0
    return float(np.mean(np.sum((p - onehot) ** 2, axis=1)))


@dataclass(frozen=True)
class ReliabilityBins:
    """Per confidence bin: edges [B+1], counts [B], mean confidence [B] and accuracy [B] (NaN where empty)."""

    edges: np.ndarray
    counts: np.ndarray
    mean_confidence: np.ndarray
    accuracy: np.ndarray


def reliability_bins(probabilities: npt.ArrayLike, labels: npt.ArrayLike, bins: int = ECE_BINS) -> ReliabilityBins:
    p, y = _check(probabilities, labels)
    confidence = confidences(p)
    correct = (predictions(p) == y).astype(np.float64)
    index = np.clip(np.ceil(confidence * bins).astype(np.int64) - 1, 0, bins - 1)   # bin i = (i/B, (i+1)/B]
    counts = np.bincount(index, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_confidence = np.bincount(index, weights=confidence, minlength=bins) / counts
        bin_accuracy = np.bincount(index, weights=correct, minlength=bins) / counts
    return ReliabilityBins(np.linspace(0.0, 1.0, bins + 1), counts, mean_confidence, bin_accuracy)


def expected_calibration_error(probabilities: npt.ArrayLike, labels: npt.ArrayLike, bins: int = ECE_BINS) -> float:
    table = reliability_bins(probabilities, labels, bins)
    total = table.counts.sum()
    if not total:
        return float("nan")
    filled = table.counts > 0
    gaps = np.abs(table.accuracy[filled] - table.mean_confidence[filled])
    return float(np.sum(table.counts[filled] / total * gaps))


@dataclass(frozen=True)
class PrecisionThreshold:
    """`threshold` None when no confidence level reaches the target (then nothing is auto-decided)."""

    target_precision: float
    threshold: float | None
    coverage: float
    precision: float | None


def precision_threshold(probabilities: npt.ArrayLike, labels: npt.ArrayLike,
                        target_precision: float = 0.95) -> PrecisionThreshold:
    """The lowest top-label confidence cut whose auto-decided rows reach `target_precision` (max coverage)."""
    p, y = _check(probabilities, labels)
    if not len(y):
        return PrecisionThreshold(target_precision, None, 0.0, None)
    confidence = confidences(p)
    correct = predictions(p) == y
    order = np.argsort(-confidence, kind="stable")
    sorted_confidence, sorted_correct = confidence[order], correct[order]
    cumulative_correct = np.cumsum(sorted_correct)
    # a cut must keep every row tied at its confidence: only the last row of each tie group is a valid end
    last_of_group = np.append(sorted_confidence[1:] != sorted_confidence[:-1], True)
    kept_counts = np.arange(1, len(y) + 1)
    reaches = last_of_group & (cumulative_correct / kept_counts >= target_precision - 1e-12)
    best = int(np.flatnonzero(reaches)[-1]) if reaches.any() else None
    if best is None:
        return PrecisionThreshold(target_precision, None, 0.0, None)
    kept = best + 1
    return PrecisionThreshold(target_precision, float(sorted_confidence[best]), kept / len(y),
                              float(cumulative_correct[best] / kept))


def summarize(probabilities: npt.ArrayLike, labels: npt.ArrayLike, target_precision: float = 0.95,
              bins: int = ECE_BINS) -> dict[str, Any]:
    """Every metric of one group of rows as a JSON-ready dict."""
    p, y = _check(probabilities, labels)
    threshold = precision_threshold(p, y, target_precision)
    return {"count": len(y), "accuracy": accuracy(p, y), "macro_f1": macro_f1(p, y),
            "nll": negative_log_likelihood(p, y), "brier": brier_score(p, y),
            "ece": expected_calibration_error(p, y, bins), "precision_threshold": asdict(threshold)}
