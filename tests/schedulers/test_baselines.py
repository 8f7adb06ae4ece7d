"""Baselines: the oracles (Proportional, WeightedProportional, Optimal), the Estimator and the
adaptive interval (Nutch / StormCrawler)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from crawler import schedulers
from crawler.schedulers import expected_hits, optimal_allocation
from crawler.schedulers.adaptive import AdaptiveInterval
from crawler.schedulers.estimator import Estimator, rate_estimate
from crawler.schedulers.oracles import CachedAllocation

ORACLES = ["proportional", "weighted_proportional", "optimal"]


def zipf(alpha: float, beta: float, n: int) -> np.ndarray:
    return alpha / np.arange(1, n + 1) ** beta


def overwrite_run(s: schedulers.Scheduler, p: np.ndarray, slots: int, seed: int = 0) -> list[int]:
    """Hits per slot when URL i (id i) changes with probability p_i per slot and a poll hits
    iff it changed since the URL's previous poll."""
    rng = np.random.default_rng(seed)
    last = np.zeros(p.size, dtype=np.int64)
    out = []
    for t in range(1, slots + 1):
        sel = s.select()
        hits = rng.random(sel.size) < -np.expm1(np.log1p(-p[sel]) * (t - last[sel]))
        last[sel] = t
        s.feedback(sel, hits)
        out.append(int(hits.sum()))
    return out


# ----- oracles ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ORACLES)
def test_oracles_need_rates(name: str) -> None:
    s = schedulers.create(name, capacity=2, seed=0)
    assert s.needs_rates
    with pytest.raises(ValueError, match="rates"):
        s.add([1, 2, 3])


def test_registered() -> None:
    for name in [*ORACLES, "estimator", "adaptive", "fpa"]:
        assert name in schedulers.names()


@pytest.mark.parametrize("weighted", [False, True])
def test_optimal_frequencies_are_the_lagrange_solution(weighted: bool) -> None:
    p = zipf(0.9, 1.5, 200)
    w = np.linspace(0.1, 1.0, 200) if weighted else None
    s = schedulers.create("optimal", capacity=3.5, seed=1)
    s.add(np.arange(200), importance=w, rates=p)
    ids, x = s.frequencies()
    assert np.array_equal(ids, np.arange(200))
    assert np.allclose(x, optimal_allocation(p, 3.5, w))


def test_proportional_is_water_filled() -> None:
    p = np.array([0.9, 0.5, 0.04, 0.02, 0.01, 0.01, 0.0])
    s = schedulers.create("proportional", capacity=2.5, seed=1)
    s.add(np.arange(p.size), rates=p)
    x = s.frequencies()[1]
    assert x.sum() == pytest.approx(2.5)
    assert x[0] == 1.0 and x[1] == 1.0 and x[-1] == 0.0
    assert np.allclose(x[2:6] / p[2:6], x[2] / p[2])  # proportional below the cap


def test_weighted_proportional_uses_importance() -> None:
    p = np.array([0.1, 0.1, 0.2, 0.05])
    w = np.array([1.0, 0.5, 0.25, 1.0])
    s = schedulers.create("weighted_proportional", capacity=1, seed=1)
    s.add(np.arange(4), importance=w, rates=p)
    x = s.frequencies()[1]
    assert np.allclose(x, w * p / (w * p).sum())


def test_allocation_is_cached_until_the_set_or_capacity_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = schedulers.create("optimal", capacity=2, seed=1)
    assert isinstance(s, CachedAllocation)
    calls = []
    original = type(s)._allocation

    def counting(self: Any) -> np.ndarray:
        calls.append(1)
        return original(self)

    monkeypatch.setattr(type(s), "_allocation", counting)
    s.add(np.arange(50), rates=zipf(0.3, 1.0, 50))
    for _ in range(20):
        sel = s.select()
        s.feedback(sel, np.zeros(sel.size, dtype=bool))
    assert len(calls) == 1
    s.set_capacity(3)
    s.select()
    s.add([100], rates=[0.5])
    s.select()
    s.remove([100])
    s.select()
    assert len(calls) == 4


def test_proportional_hits_match_the_analytic_value() -> None:
    n, capacity = 100, 5.0
    p = zipf(0.3, 1.0, n)
    s = schedulers.create("proportional", capacity=capacity, seed=2)
    s.add(np.arange(n), rates=p)
    hits = overwrite_run(s, p, 4000)
    analytic = expected_hits(s.frequencies()[1], p)
    assert np.mean(hits[500:]) == pytest.approx(analytic, rel=0.04)


@pytest.mark.slow
def test_optimal_reaches_the_limit_on_the_papers_environment() -> None:
    p = zipf(0.3, 1.0, 500)
    s = schedulers.create("optimal", capacity=1, seed=3)
    s.add(np.arange(500), rates=p)
    hits = overwrite_run(s, p, 30000)
    assert np.mean(hits[5000:]) == pytest.approx(0.8806, abs=0.02)


# ----- estimator ----------------------------------------------------------------------------


def test_rate_estimate_handles_extremes() -> None:
    p = rate_estimate([0, 10, 5, 0], [10, 10, 10, 0], [50, 50, 10, 0])
    assert 0 < p[0] < 0.01 < p[1] < 1
    assert p[2] == pytest.approx(1 - (1 - 5.5 / 11) ** 1)
    assert np.isnan(p[3])


def test_estimator_switches_phase_and_estimates_converge() -> None:
    n, capacity = 50, 5
    p = np.random.default_rng(7).uniform(0.01, 0.15, n)
    s = schedulers.create("estimator", capacity=capacity, seed=4, estimation_polls_per_url=300)
    assert isinstance(s, Estimator)
    s.add(np.arange(n))
    assert s.phase_length() == 3000
    rng = np.random.default_rng(5)
    last = np.zeros(n, dtype=np.int64)
    for t in range(1, 3002):
        if t <= 3000:
            assert s.estimating
            assert np.allclose(s.frequencies()[1], capacity / n)
        sel = s.select()
        if t <= 3000:  # round robin: everybody in turn
            assert sel.tolist() == [((t - 1) * capacity + j) % n for j in range(capacity)]
        hits = rng.random(sel.size) < -np.expm1(np.log1p(-p[sel]) * (t - last[sel]))
        last[sel] = t
        s.feedback(sel, hits)
    assert not s.estimating
    estimate = s._estimate
    assert np.median(np.abs(estimate / p - 1)) < 0.15
    assert np.corrcoef(estimate, p)[0, 1] > 0.9
    x = s.frequencies()[1]
    assert x.sum() == pytest.approx(capacity)
    assert np.allclose(x, estimate / estimate.sum() * capacity)
    s.add([1000])
    assert s._estimate[-1] == pytest.approx(estimate.mean())


def test_estimator_phase_length_parameters() -> None:
    s = schedulers.create("estimator", capacity=3, seed=1, estimation_slots=4)
    assert isinstance(s, Estimator)
    s.add(np.arange(30))
    for _ in range(4):
        s.select()
        assert s.estimating
    s.select()
    assert not s.estimating
    d = schedulers.create("estimator", capacity=3, seed=1)
    assert isinstance(d, Estimator)
    d.add(np.arange(30))
    assert d.phase_length() == 100  # 10 polls per URL by default


# ----- adaptive interval --------------------------------------------------------------------


def adaptive(**params: Any) -> AdaptiveInterval:
    s = schedulers.create("adaptive", capacity=10, seed=1, **params)
    assert isinstance(s, AdaptiveInterval)
    s.add(np.arange(100))  # starts at n / C = 10 slots; bounds [1, 10 * 10]
    return s


def test_adaptive_nutch_factors_and_clamps() -> None:
    s = adaptive()
    assert np.allclose(s._interval, 10.0)
    assert s.interval_bounds() == (1.0, 100.0)
    s.feedback([0, 1], [False, True])
    assert s._interval[0] == pytest.approx(14.0) and s._interval[1] == pytest.approx(8.0)
    for _ in range(30):
        s.feedback([0, 1], [False, True])
    assert s._interval[0] == 100.0 and s._interval[1] == 1.0
    x = s.frequencies()[1]
    assert x[0] == pytest.approx(0.01) and x[1] == 1.0 and x[2] == pytest.approx(0.1)


def test_adaptive_stormcrawler_factors() -> None:
    s = adaptive(variant="stormcrawler")
    s.feedback([0, 1], [False, True])
    assert s._interval[0] == pytest.approx(15.0)
    assert s._interval[1] == pytest.approx(0.5 * 10 + 0.5 * 1)
    t = adaptive(variant="stormcrawler", inc=0.1, dec=0.25, min_interval=2, max_interval=12)
    t.feedback([0, 1], [False, True])
    assert t._interval[0] == pytest.approx(11.0)
    assert t._interval[1] == pytest.approx(0.75 * 10 + 0.25 * 2)
    t.feedback([0], [False])
    assert t._interval[0] == 12.0


def test_adaptive_polls_the_most_overdue() -> None:
    s = adaptive()
    s._interval[:] = 10.0
    s._last[:] = 0.0
    s._last[[5, 7, 9]] = -20.0  # overdue ratio 2.1 at slot 1
    s._interval[3] = 0.5  # ratio 2
    chosen = s.select()
    assert chosen.size == 10
    assert {3, 5, 7, 9} <= set(chosen.tolist())
    assert np.all(s._last[chosen] == 1.0)
    lazy = adaptive(fill_budget=False)
    lazy._last[:] = 0.0
    lazy._last[[5, 7]] = -20.0
    assert sorted(lazy.select().tolist()) == [5, 7]


def test_adaptive_learns_on_the_papers_environment() -> None:
    p = zipf(0.3, 1.5, 500)
    s = schedulers.create("adaptive", capacity=1, seed=3)
    s.add(np.arange(500))
    hits = overwrite_run(s, p, 6000)
    assert np.mean(hits[3000:]) > 3 * 0.1235  # Uniform: 0.1235; the limit: 0.5610


# ----- all: parameters and state ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("estimator", {"estimation_slots": -1}),
        ("estimator", {"estimation_slots": 2.5}),
        ("estimator", {"estimation_polls_per_url": 0}),
        ("estimator", {"estimation_polls_per_url": "x"}),
        ("adaptive", {"variant": "heritrix"}),
        ("adaptive", {"inc": -0.1}),
        ("adaptive", {"dec": 1.0}),
        ("adaptive", {"min_interval": 0.5}),
        ("adaptive", {"min_interval": 5, "max_interval": 2}),
        ("adaptive", {"max_factor": 0}),
        ("optimal", {"realization": "random"}),
        ("proportional", {"N": 3}),
    ],
)
def test_bad_parameters(name: str, params: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        schedulers.create(name, capacity=2, **params)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("proportional", {}),
        ("weighted_proportional", {"realization": "sampling"}),
        ("optimal", {}),
        ("estimator", {"estimation_polls_per_url": 2}),
        ("adaptive", {}),
        ("adaptive", {"variant": "stormcrawler", "fill_budget": False}),
    ],
)
def test_state_round_trip_continues_identically(name: str, params: dict[str, Any]) -> None:
    n = 60
    p = zipf(0.5, 1.0, n)
    s = schedulers.create(name, capacity=4.5, seed=9, **params)
    s.add(np.arange(n), importance=np.linspace(0.3, 1, n), rates=p)
    rng = np.random.default_rng(1)
    for _ in range(40):
        sel = s.select()
        s.feedback(sel, rng.random(sel.size) < 0.4)
    r = schedulers.restore(s.state())
    assert r.params() == s.params()
    for _ in range(60):
        a, b = s.select(), r.select()
        assert np.array_equal(a, b)
        hits = rng.random(a.size) < 0.4
        s.feedback(a, hits)
        r.feedback(b, hits)
    assert np.array_equal(s.frequencies()[1], r.frequencies()[1])
