"""The evidence map's top pick (omni.model.evidence_map._top): the same indices, in the same order, as a stable
descending sort — with ties, and for long vectors where a partial pick cuts first."""
from __future__ import annotations

import numpy as np
import pytest

from omni.model.evidence_map import _top


@pytest.mark.parametrize("size", [0, 1, 5, 100, 30_000])
@pytest.mark.parametrize("top", [1, 3, 16])
def test_the_top_pick_is_the_stable_sorts(size, top):
    rng = np.random.default_rng(size + top)
    for trial in range(30):
        values = rng.random(size)
        if trial % 2:
            values = np.round(values, 2)                     # many ties, some reaching the cut
        assert _top(values, top) == np.argsort(-values, kind="stable")[:top].tolist()


def test_a_flat_long_vector_keeps_the_earliest():
    assert _top(np.full(10_000, 1e-4), 3) == [0, 1, 2]
