"""The incremental re-pack: feasible, and it moves the least weight (properties)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.cluster import UNASSIGNED, balanced_fill, best_fit_decreasing, repack, subset_sum


@st.composite
def drifted_clusters(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A packed cluster, then drifted weights, a departure and a join."""
    n_workers = draw(st.integers(2, 5))
    caps = np.array(draw(st.lists(st.integers(20, 40), min_size=n_workers, max_size=n_workers)))
    weights = np.array(draw(st.lists(st.integers(1, 12), min_size=1, max_size=18)), dtype=float)
    start = best_fit_decreasing(weights, caps).onto_workers()
    drift = np.array(
        draw(st.lists(st.floats(0.5, 1.6), min_size=weights.size, max_size=weights.size))
    )
    new_weights = np.round(weights * drift, 3)
    alive = np.ones(n_workers + 1, dtype=bool)
    if draw(st.booleans()):
        alive[draw(st.integers(0, n_workers - 1))] = False
    caps_after = np.append(caps, draw(st.integers(20, 40))).astype(float)
    return start, new_weights, caps_after, alive


@settings(deadline=None, max_examples=150)
@given(drifted_clusters())
def test_repack_moves_exactly_the_least_weight(
    case: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    previous, weights, caps, alive = case
    result = repack(previous, weights, caps, alive=alive)
    a = result.assignment
    # every site has a live owner
    assert np.all(a >= 0) and np.all(alive[a])
    # a site on a live worker that was not over capacity never moves
    loads_before = np.bincount(previous, weights=weights, minlength=caps.size)
    for site, owner in enumerate(previous.tolist()):
        if alive[owner] and loads_before[owner] <= caps[owner] + 1e-9:
            assert a[site] == owner
    # from an overloaded worker exactly load - (best subset that fits) moves: the minimum
    moved_min = 0.0
    for worker in np.flatnonzero(alive & (loads_before > caps + 1e-9)):
        mine = np.flatnonzero(previous == worker)
        keep = subset_sum(weights[mine], float(caps[worker]))
        moved_min += float(weights[mine][~keep].sum())
    assert result.lower_bound == pytest.approx(moved_min)
    if result.shortfall is None:
        assert result.moved_weight == pytest.approx(moved_min)
        # no overflow means every live worker fits
        assert np.all(result.loads[alive] <= caps[alive] + 1e-9)
        assert not result.overflow.any()
    else:
        # overflowing sites shed by a live worker stay where they were
        assert result.overflow.any()
        assert result.moved_weight <= moved_min + 1e-9
        stayed = result.overflow & (previous >= 0) & alive[previous]
        assert np.all(result.assignment[stayed] == previous[stayed])


@settings(deadline=None)
@given(drifted_clusters())
def test_repack_of_a_fitting_assignment_moves_nothing(
    case: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    previous, weights, caps, _ = case
    first = repack(previous, weights, caps)
    again = repack(first.assignment, weights, caps)
    if first.shortfall is None:
        assert again.moved_weight == 0.0
        np.testing.assert_array_equal(again.assignment, first.assignment)


def test_departed_worker_sites_are_placed_not_counted_as_moves() -> None:
    result = repack([0, 0, 1, 1], [3, 4, 2, 2], [10, 10], alive=[False, True])
    assert result.assignment.tolist() == [1, 1, 1, 1]
    assert result.moved_weight == 0.0
    assert result.placed_weight == 7.0


def test_new_sites_are_placed_and_overflow_reported() -> None:
    result = repack([0, UNASSIGNED, UNASSIGNED], [8, 5, 5], [10, 10])
    assert result.assignment.tolist() == [0, 1, 1]
    result = repack([0, UNASSIGNED, UNASSIGNED], [8, 5, 6], [10, 10])
    assert result.shortfall is not None and result.shortfall.workers == 1
    assert result.overflow.tolist() == [False, True, False]
    assert set(result.assignment.tolist()) <= {0, 1}


def test_a_join_receives_sites_only_under_a_fill_target() -> None:
    previous = np.array([0, 0, 0, 1, 1, 1])
    weights = np.array([3.0, 3, 3, 3, 3, 3])
    caps = np.array([10.0, 10, 10])
    assert repack(previous, weights, caps).moved_weight == 0.0
    fill = balanced_fill(weights, caps)
    assert fill == pytest.approx(0.65)
    spread = repack(previous, weights, caps, fill=fill)
    assert spread.moved_sites == 2
    assert np.bincount(spread.assignment).tolist() == [2, 2, 2]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"previous": [0, 5], "weights": [1, 1], "capacities": [5, 5]},
        {"previous": [0], "weights": [1, 1], "capacities": [5]},
        {"previous": [0], "weights": [1], "capacities": [5], "fill": 0.0},
        {"previous": [0], "weights": [1], "capacities": [5], "alive": [False]},
    ],
)
def test_bad_input(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        repack(**kwargs)  # type: ignore[arg-type]
