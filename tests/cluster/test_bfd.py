"""Best Fit Decreasing against brute force, and its shortfall report."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.cluster import best_fit_decreasing, site_weights

CAP = 10.0


def optimal_bins(weights: list[float], capacity: float) -> int:
    """The fewest bins of ``capacity`` that hold ``weights``: every assignment (each item
    into one of the bins opened so far or one new bin), brute force."""
    best = len(weights)

    def place(i: int, loads: list[float]) -> None:
        nonlocal best
        if len(loads) >= best:
            return
        if i == len(weights):
            best = len(loads)
            return
        for b in range(len(loads)):
            if loads[b] + weights[i] <= capacity + 1e-9:
                loads[b] += weights[i]
                place(i + 1, loads)
                loads[b] -= weights[i]
        place(i + 1, [*loads, weights[i]])

    place(0, [])
    return best


def test_brute_force_is_right_on_a_known_case() -> None:
    assert optimal_bins([6, 4, 5, 5, 3, 7], 10) == 3
    assert optimal_bins([6, 6, 6], 10) == 3


weights_st = st.lists(
    st.integers(min_value=1, max_value=100).map(lambda v: v / 10), min_size=1, max_size=8
)


@settings(deadline=None)
@given(weights_st)
def test_bfd_is_feasible_and_within_the_bound(weights: list[float]) -> None:
    packing = best_fit_decreasing(weights, np.zeros(0), new_capacity=CAP)
    loads = np.bincount(packing.assignment, weights=weights)
    assert np.all(loads <= CAP + 1e-9)
    np.testing.assert_allclose(loads, packing.loads)
    opt = optimal_bins(weights, CAP)
    used = packing.bins_used
    assert opt <= used <= math.floor(11 / 9 * opt + 6 / 9)


@settings(deadline=None)  # timing on a shared machine is not the test
@given(
    weights_st,
    st.lists(st.integers(min_value=5, max_value=20), min_size=1, max_size=4),
)
def test_each_site_goes_to_the_tightest_bin_that_fits(
    weights: list[float], caps: list[int]
) -> None:
    """Replay: in decreasing order, each site went to the bin with the least room that fit
    it, or opened a bin when none did."""
    capacities = np.array(caps, dtype=float)
    packing = best_fit_decreasing(weights, capacities)
    rooms = list(capacities)
    for i in sorted(range(len(weights)), key=lambda i: -weights[i]):
        fits = [b for b, room in enumerate(rooms) if room >= weights[i] - 1e-9]
        b = int(packing.assignment[i])
        if fits:
            best = min(rooms[f] for f in fits)
            assert b in fits and rooms[b] == pytest.approx(best)
        else:
            assert b == len(rooms)
            rooms.append(max(float(capacities.max()), weights[i]))
        rooms[b] -= weights[i]


def test_paper_optimum_of_the_domain_environment() -> None:
    """Pages weighted at their change probability pack into the paper's four nodes."""
    pages = [131, 201, 341, 567, 531, 36, 451, 121, 124, 174, 402, 322, 49, 615]
    pages += [235, 135, 95, 343, 32, 123]
    p = [0.3] * 8 + [0.25] * 6 + [0.1] * 4 + [0.05] * 2
    x = np.repeat(p, pages)
    weights = site_weights(x, np.repeat(np.arange(20), pages))
    packing = best_fit_decreasing(weights, np.zeros(0), new_capacity=400)
    np.testing.assert_allclose(sorted(packing.loads), [25.75, 399.1, 399.2, 399.7], atol=1e-9)


def test_shortfall_says_how_many_workers_of_what_capacity() -> None:
    packing = best_fit_decreasing([6, 6, 6, 6, 15], [10, 10])
    short = packing.shortfall
    assert short is not None
    # 15 opens a bin of 15 (too big for 10), two 6s fit the workers, two more need bins
    assert short.workers == 3
    assert short.capacity == 10
    assert short.oversized == 1 and short.largest == 15
    assert "3 more worker(s) of capacity 10" in short.message()
    forced = packing.onto_workers()
    assert set(forced.tolist()) <= {0, 1}
    assert best_fit_decreasing([3, 3], [10]).shortfall is None


def test_onto_workers_puts_overflow_where_the_most_room_is() -> None:
    packing = best_fit_decreasing([9, 8, 7], [10, 10])
    assert packing.assignment.tolist() == [0, 1, 2]
    forced = packing.onto_workers()
    assert forced.tolist() == [0, 1, 1]  # worker 1 had 2 left, worker 0 only 1


def test_existing_loads_and_different_capacities() -> None:
    packing = best_fit_decreasing([4, 2], [10, 6], loads=[5, 0])
    # 4: rooms 5 and 6, tightest is worker 0; 2: rooms 1 and 6 -> worker 1
    assert packing.assignment.tolist() == [0, 1]
    np.testing.assert_allclose(packing.loads, [9, 2])


@pytest.mark.parametrize(
    ("weights", "caps"),
    [([1, -1], [5]), ([1, float("nan")], [5]), ([[1]], [5]), ([1], [0]), ([1], [float("inf")])],
)
def test_bad_input_is_a_clear_error(weights: list[float], caps: list[float]) -> None:
    with pytest.raises(ValueError):
        best_fit_decreasing(weights, caps)


def test_site_weights_sum_the_urls() -> None:
    w = site_weights([0.5, 0.25, 1.0, 0.125], [2, 0, 2, 0], n_sites=4)
    assert w.tolist() == [0.375, 0.0, 1.5, 0.0]
    with pytest.raises(ValueError):
        site_weights([0.5], [3], n_sites=2)
    with pytest.raises(ValueError):
        site_weights([0.5, 0.1], [0])
