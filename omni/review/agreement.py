"""Agreement between reviewers, and between reviewers and the model: Cohen's and Fleiss' kappa, observed agreement.

Cohen's kappa compares two raters who both labelled the same items; Fleiss' kappa any number of raters, the same
number n per item (they need not be the same people). Both are (p_o - p_e) / (1 - p_e): the agreement observed beyond
the agreement chance would give, from how often each category is used. Undefined (None) without items, or when chance
agreement is already complete (every label the same category).
`question_agreement` applies them to one question of a review: the items at least two reviewers labelled; with exactly
two reviewers over them Cohen's kappa, else Fleiss' on the first n = max(k, 2) labels (by time) of the items that
have as many; and the model's agreement (the share of reviewer labels equal to its top answer, over every item).
Knows nothing of files, HTTP, queues or the model: it sees labels (strings).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from omni.contract.json_values import JSONObject

EPSILON = 1e-12


def cohen_kappa(pairs: Sequence[tuple[str, str]]) -> float | None:
    """Cohen's kappa of two raters; `pairs[i]` is (rater A's label, rater B's label) of item i."""
    if not pairs:
        return None
    categories = sorted({label for pair in pairs for label in pair})
    index = {c: i for i, c in enumerate(categories)}
    table = np.zeros((len(categories), len(categories)))
    for a, b in pairs:
        table[index[a], index[b]] += 1
    table /= table.sum()
    observed = float(np.trace(table))
    chance = float(table.sum(axis=1) @ table.sum(axis=0))
    return None if chance >= 1.0 - EPSILON else (observed - chance) / (1.0 - chance)


def fleiss_kappa(counts: np.ndarray | Sequence[Sequence[int]]) -> float | None:
    """Fleiss' kappa; `counts[i][j]` is how many raters put item i in category j (each row sums to the same n >= 2)."""
    table = np.asarray(counts, dtype=float)
    if table.ndim != 2 or table.shape[0] == 0:
        return None
    raters = table.sum(axis=1)
    if not np.allclose(raters, raters[0]) or raters[0] < 2:
        raise ValueError(f"every item needs the same number (>= 2) of ratings, got {sorted(set(raters.tolist()))}")
    n = raters[0]
    observed = float(np.mean(((table ** 2).sum(axis=1) - n) / (n * (n - 1))))
    shares = table.sum(axis=0) / table.sum()
    chance = float((shares ** 2).sum())
    return None if chance >= 1.0 - EPSILON else (observed - chance) / (1.0 - chance)


def fleiss_observed(counts: np.ndarray | Sequence[Sequence[int]]) -> float:
    """The mean share of agreeing rater pairs per item (Fleiss' P-bar)."""
    table = np.asarray(counts, dtype=float)
    n = table.sum(axis=1)
    return float(np.mean(((table ** 2).sum(axis=1) - n) / (n * (n - 1))))


def question_agreement(items: Sequence[Sequence[tuple[str, str]]], model: Sequence[str | None],
                       k: int = 2) -> JSONObject:
    """Agreement on one question. `items[i]`: (reviewer, label) of every reviewer who labelled item i, first labelled
    first; `model[i]`: the model's top answer to it (None: unknown). {"items": how many items the kappa is over,
    "reviewers": their names, "kappa", "method": "cohen" | "fleiss" | None, "observed": the share of agreement
    observed, "model": the share of reviewer labels equal to the model's answer, "labels": how many that share is
    over}."""
    rated = [list(labels) for labels in items if len({r for r, _ in labels}) >= 2]
    names = sorted({r for labels in rated for r, _ in labels})
    kappa: float | None = None
    observed: float | None = None
    method: str | None = None
    used = 0
    if len(names) == 2:
        first, second = names
        pairs = [(dict(labels)[first], dict(labels)[second]) for labels in rated]
        method, used = "cohen", len(pairs)
        kappa = cohen_kappa(pairs)
        observed = sum(a == b for a, b in pairs) / len(pairs)
    elif len(names) > 2:
        n = max(k, 2)
        firsts = [labels[:n] for labels in rated if len(labels) >= n]
        if firsts:
            categories = sorted({label for labels in firsts for _, label in labels})
            counts = np.array([[sum(1 for _, label in labels if label == c) for c in categories] for labels in firsts])
            method, used = "fleiss", len(firsts)
            kappa, observed = fleiss_kappa(counts), fleiss_observed(counts)
            names = sorted({r for labels in firsts for r, _ in labels})
    judged = [label == answer for labels, answer in zip(items, model, strict=True) if answer is not None
              for _, label in labels]
    return {"items": used, "reviewers": names if method else [], "kappa": _round(kappa), "method": method,
            "observed": _round(observed), "model": _round(sum(judged) / len(judged)) if judged else None,
            "labels": len(judged)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
