"""Subset sum: exact against enumeration, greedy within its proven gap."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.cluster import EXACT_MAX, greedy_subset, subset_sum


def best_total(weights: list[float], capacity: float) -> float:
    best = 0.0
    for r in range(len(weights) + 1):
        for combo in itertools.combinations(weights, r):
            total = sum(combo)
            if total <= capacity + 1e-9:
                best = max(best, total)
    return best


@settings(deadline=None)  # timing on a shared machine is not the test
@given(
    st.lists(st.floats(min_value=0, max_value=50, allow_nan=False), max_size=12),
    st.floats(min_value=0, max_value=120, allow_nan=False),
)
def test_exact_subset_sum_matches_enumeration(weights: list[float], capacity: float) -> None:
    keep = subset_sum(weights, capacity)
    total = float(np.asarray(weights)[keep].sum()) if weights else 0.0
    assert total <= capacity + 1e-9
    assert total == pytest.approx(best_total(weights, capacity), abs=1e-9)


def test_exact_up_to_the_limit() -> None:
    rng = np.random.default_rng(3)
    weights = rng.integers(1, 1000, EXACT_MAX).astype(float)
    capacity = float(weights.sum() / 2 + 0.5)
    keep = subset_sum(weights, capacity)
    # with 32 random integers up to 1000, a subset hitting floor(capacity) exists
    assert weights[keep].sum() == np.floor(capacity)


@settings(deadline=None)  # timing on a shared machine is not the test
@given(
    st.lists(st.floats(min_value=0.01, max_value=5, allow_nan=False), min_size=1, max_size=80),
    st.floats(min_value=0, max_value=100, allow_nan=False),
)
def test_greedy_gap_is_below_the_lightest_item_left_out(
    weights: list[float], capacity: float
) -> None:
    w = np.asarray(weights)
    keep = greedy_subset(w, capacity)
    total = float(w[keep].sum())
    assert total <= capacity + 1e-9
    if not keep.all():
        assert capacity - total < float(w[~keep].min()) + 1e-9


def test_everything_fits_keeps_everything() -> None:
    assert subset_sum([1, 2, 3], 6).all()
    assert not subset_sum([7, 8], 6).any()


def test_bad_input() -> None:
    with pytest.raises(ValueError):
        subset_sum([1, 2], -1)
    with pytest.raises(ValueError):
        subset_sum([1, float("inf")], 3)


@settings(deadline=None)  # timing on a shared machine is not the test
@given(
    st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=60),
    st.integers(min_value=0, max_value=400),
)
def test_greedy_in_runs_equals_item_by_item(weights: list[int], capacity: int) -> None:
    w = np.asarray(weights, dtype=float)
    expected = np.zeros(w.size, dtype=bool)
    room = capacity + 1e-9
    for i in np.argsort(-w, kind="stable").tolist():
        if w[i] <= room:
            expected[i] = True
            room -= w[i]
    np.testing.assert_array_equal(greedy_subset(w, capacity), expected)
