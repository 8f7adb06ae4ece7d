"""g, its inverse and the water-fill (crawler/schedulers/_lagrange.py) against plain
references: bisection for the inverse, sorting for the water level."""

from __future__ import annotations

import numpy as np
import pytest

from crawler.schedulers._lagrange import gain, inverse_gain, water_fill, water_level


def bisected_inverse(level: np.ndarray) -> np.ndarray:
    """u with g(u) = level by 200 bisections of [0, 800] (slow and sure)."""
    lo, hi = np.zeros_like(level), np.full_like(level, 800.0)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        below = gain(mid) < level
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return 0.5 * (lo + hi)


def test_gain_is_the_marginal_value_of_a_poll() -> None:
    u = np.array([1e-3, 0.5, 1.0, 3.0, 30.0])
    assert np.allclose(gain(u), 1.0 - np.exp(-u) * (1.0 + u), rtol=1e-9, atol=1e-15)
    assert gain(0.0) == 0.0 and gain(700.0) == 1.0
    assert np.all(np.diff(gain(np.logspace(-6, 1.4, 1000))) > 0)


def test_inverse_gain_is_exact_to_1e_10() -> None:
    # every decade from 1e-8 up to 1 - 1e-6 (u about 16.7): relative 1e-10 of u
    levels = np.concatenate([np.logspace(-8, -0.01, 3000), 1.0 - np.logspace(-6, -1, 1000)])
    got = inverse_gain(levels)
    want = bisected_inverse(levels)
    assert np.max(np.abs(got - want) / want) < 1e-10
    # below, g's own rounding (1 - e^-u (1 + u) loses digits as u -> 0) limits both
    tiny = np.logspace(-16, -8, 500)
    assert np.max(np.abs(inverse_gain(tiny) / bisected_inverse(tiny) - 1.0)) < 1e-7
    # nearer 1, g is too flat for any u to be that exact: g(u) is the level to rounding
    near = 1.0 - np.logspace(-13, -6, 500)
    assert np.max(np.abs(gain(inverse_gain(near)) - near)) <= 4e-16


def test_inverse_gain_edges() -> None:
    out = inverse_gain(np.array([-1.0, 0.0, 1.0, 2.0]))
    assert out[0] == 0.0 and out[1] == 0.0 and np.isposinf(out[2]) and np.isposinf(out[3])


def sorted_level(r: np.ndarray, capacity: float) -> float:
    """The water level by sorting: the k largest capped at 1, u = sum(rest) / (C - k)."""
    rs = np.sort(r)[::-1]
    tail = np.concatenate([np.cumsum(rs[::-1])[::-1], [0.0]])
    for k in range(int(capacity) + 1):
        u = tail[k] / (capacity - k)
        if rs[k] <= u:
            return float(u)
    raise AssertionError("no level")


@pytest.mark.parametrize("seed", range(6))
def test_water_level_matches_sorting(seed: int) -> None:
    rng = np.random.default_rng(seed)
    r = rng.pareto(1.2, 2000) * rng.uniform(0.01, 1.0)
    capacity = float(rng.uniform(5, 400))
    u = water_level(r, capacity)
    assert u == pytest.approx(sorted_level(r, capacity), rel=1e-12)
    assert np.minimum(1.0, r / u).sum() == pytest.approx(capacity, rel=1e-12)
    assert water_level(r.astype(np.float32), capacity) == pytest.approx(u, rel=1e-6)


def test_water_fill_edges() -> None:
    r = np.array([np.inf, np.inf, 1.0, 0.5, 0.0])
    assert np.array_equal(water_fill(r, 1.0), [0.5, 0.5, 0, 0, 0])
    assert np.array_equal(water_fill(r, 4.0), [1, 1, 1, 1, 0])
    x = water_fill(r, 3.0)
    assert x[:2].tolist() == [1.0, 1.0] and x.sum() == pytest.approx(3.0) and x[4] == 0.0
    assert np.array_equal(water_fill(np.zeros(3), 1.0), np.zeros(3))
