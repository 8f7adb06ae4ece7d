"""No loss from partitioning: one shared multiplier across workers."""

from __future__ import annotations

import numpy as np
import pytest

from crawler.cluster import partition_value, shared_multiplier_split, site_weights
from crawler.schedulers import limit, optimal_allocation


def _cluster(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.0, 0.5, 2000) ** 2
    sites = rng.integers(0, 100, 2000)
    return p, sites


def test_shared_multiplier_keeps_the_global_optimum() -> None:
    p, sites = _cluster(0)
    caps = np.array([60.0, 60.0, 60.0])
    split = shared_multiplier_split(p, sites, caps)
    assert np.all(split.budgets <= caps + 1e-9)
    # the budgets are what the sites take at the shared allocation
    weights = site_weights(split.x, sites, 100)
    np.testing.assert_allclose(
        split.budgets, np.bincount(split.assignment, weights=weights, minlength=3)
    )
    # each worker's own optimum at its budget is the global allocation restricted to it
    local = partition_value(p, sites, split.assignment, split.budgets)
    assert local == pytest.approx(split.value, rel=1e-6)
    # only the packing gap is lost, and running each worker at its full capacity
    # recovers nearly all of it
    assert split.value >= 0.999 * split.limit
    full = partition_value(p, sites, split.assignment, caps)
    assert split.value - 1e-9 <= full <= split.limit + 1e-9
    assert full >= 0.9999 * split.limit


def test_naive_even_split_loses_against_the_shared_multiplier() -> None:
    """Sites dealt by URL count with equal budgets: the hot sites crowd one worker."""
    p, sites = _cluster(1)
    hot = sites < 10  # the first ten sites change far more
    p = np.where(hot, np.minimum(0.9, p * 8 + 0.2), p)
    caps = np.array([50.0, 50.0, 50.0])
    by_count = np.zeros(100, dtype=np.int64)
    by_count[10:] = np.arange(90) % 3  # hot sites all on worker 0
    naive = partition_value(p, sites, by_count, caps)
    split = shared_multiplier_split(p, sites, caps)
    shared = partition_value(p, sites, split.assignment, caps)
    assert naive < 0.97 * shared
    assert shared >= 0.999 * limit(p, caps.sum())


def test_x_is_the_global_optimum_at_the_largest_total_that_packs() -> None:
    """Indivisible sites cannot fill two workers exactly: the total is lowered a little."""
    p, sites = _cluster(2)
    caps = np.array([200.0, 200.0])
    split = shared_multiplier_split(p, sites, caps)
    assert 0.999 * caps.sum() <= split.packed_total < caps.sum()
    np.testing.assert_allclose(split.x, optimal_allocation(p, split.packed_total))
    # with room to spare (every URL polled every slot fits), nothing is lowered
    roomy = shared_multiplier_split(p, sites, np.array([1500.0, 1500.0]))
    assert roomy.packed_total == 3000.0
    assert roomy.value == pytest.approx(roomy.limit)
