"""LAKG / CGLA: the rule table, the fast race against the one-by-one rule, auto-N,
initial states, state round trip, convergence."""

from __future__ import annotations

import numpy as np
import pytest

from crawler import schedulers
from crawler.schedulers import limit, optimal_allocation
from crawler.schedulers._realize import poll_shares
from crawler.schedulers.lakg import (
    AUTO_K,
    AUTO_MAX_N,
    AUTO_MIN_N,
    LAKG,
    UNIT_BITS,
    auto_states,
    level_table,
)

SCALE = 2.0**-UNIT_BITS


def make(capacity: float = 2.0, n: int = 4, **params: object) -> LAKG:
    params.setdefault("gamma", 1.0)
    s = LAKG(capacity, seed=params.pop("seed", 3), **params)  # type: ignore[arg-type]
    s.add(np.arange(n))
    return s


def set_states(s: LAKG, states: list[int] | np.ndarray) -> None:
    s._state = np.asarray(states, dtype=np.int32)
    s._x = s._levels[s._state] * SCALE
    s._recount()


def exact_total(s: LAKG) -> int:
    return int(s._levels[s._state].sum())


def simulate(s: LAKG, p: np.ndarray, slots: int, seed: int = 0) -> np.ndarray:
    """Overwrite model: a poll hits iff the URL changed at least once since its last poll."""
    rng = np.random.default_rng(seed)
    last = np.zeros(p.size, dtype=np.int64)
    logq = np.log1p(-p)
    hits = np.zeros(slots)
    for t in range(1, slots + 1):
        ids = s.select()
        h = rng.random(ids.size) < -np.expm1(logq[ids] * (t - last[ids]))
        last[ids] = t
        s.feedback(ids, h)
        hits[t - 1] = h.sum()
    return hits


# ----- the rule table -----------------------------------------------------------------


# N = 10, gamma = 1, C = 2, four URLs: sum(x) = sum(s) / 10, full when sum(s) >= 20.
@pytest.mark.parametrize(
    ("states", "hit", "expected"),
    [
        ([5, 5, 5, 4], True, 6),  # hit, not full (19/10 < 2), s < N: s + 1
        ([5, 5, 5, 5], True, 5),  # hit, full (exactly C counts as full): unchanged
        ([10, 5, 2, 1], True, 10),  # hit, not full, s = N: unchanged
        ([5, 5, 5, 5], False, 4),  # miss, full, s > 1: s - 1
        ([5, 5, 5, 4], False, 5),  # miss, not full: unchanged
        ([1, 10, 9, 1], False, 1),  # miss, full, s = 1: unchanged
    ],
)
def test_rule_table(states: list[int], hit: bool, expected: int) -> None:
    s = make(N=10, gamma=1.0)
    set_states(s, states)
    s.feedback([0], [hit])
    assert s.states()[0] == expected
    assert s.states()[1:].tolist() == states[1:]
    assert s._total == exact_total(s)


def test_knapsack_rechecked_after_every_update() -> None:
    # sum(s) = 19: one rise fills the knapsack, so of two hits exactly one rises ...
    for seed in range(10):
        s = make(N=10, seed=seed)
        set_states(s, [5, 5, 5, 4])
        s.feedback([0, 1], [True, True])
        assert sorted(s.states()[:2].tolist()) == [5, 6]
        # ... and then a miss takes the knapsack back under C, and the next hit may rise.
    s = make(N=10, seed=1)
    set_states(s, [5, 5, 5, 5])
    s.feedback([0, 1], [False, False])
    assert sorted(s.states()[:2].tolist()) == [4, 5]


def test_thesis_mode_tests_knapsack_once_per_slot() -> None:
    s = make(N=10, mode="thesis")
    set_states(s, [5, 5, 5, 4])  # sum(x) = 1.9 <= C: every hit rises
    s.feedback([0, 1, 2], [True, True, False])
    assert s.states().tolist() == [6, 6, 5, 4]
    set_states(s, [5, 5, 5, 5])  # sum(x) = C is still room in the thesis (<= C)
    s.feedback([0, 1], [True, False])
    assert s.states().tolist() == [6, 5, 5, 5]
    set_states(s, [6, 5, 5, 5])  # sum(x) > C: every miss falls, hits do not rise
    s.feedback([0, 1, 2], [False, False, True])
    assert s.states().tolist() == [5, 4, 5, 5]


def test_importance_coin() -> None:
    n = 4000
    s = LAKG(n, seed=5, N=10)  # C = n: never full
    weights = np.where(np.arange(n) < n // 2, 0.25, 1.0)
    s.add(np.arange(n), importance=weights)
    set_states(s, np.full(n, 3))
    s.feedback(np.arange(n), np.ones(n, dtype=bool))
    rose = s.states() == 4
    assert rose[n // 2 :].all()
    share = rose[: n // 2].mean()
    assert abs(share - 0.25) < 0.03  # binomial sd ~ 0.01
    # Importance never affects a fall.
    s2 = LAKG(0.001, seed=5, N=10)
    s2.add(np.arange(n), importance=weights)
    set_states(s2, np.full(n, 3))
    s2.feedback(np.arange(n), np.zeros(n, dtype=bool))
    assert (s2.states() == 2).all()


# ----- the fast race is the one-by-one rule ---------------------------------------------


@pytest.mark.parametrize(
    ("mode", "gamma", "weighted"),
    [("sequential", 1.0, False), ("sequential", 1.3, True), ("thesis", 1.2, True)],
)
def test_fast_learn_equals_reference(mode: str, gamma: float, weighted: bool) -> None:
    n, capacity, n_states = 60, 6.5, 40
    rng = np.random.default_rng(11)
    weights = rng.uniform(0.2, 1.0, n) if weighted else None
    fast = LAKG(capacity, seed=9, N=n_states, gamma=gamma, mode=mode)
    slow = LAKG(capacity, seed=9, N=n_states, gamma=gamma, mode=mode)
    slow._learn = slow._learn_reference  # type: ignore[method-assign]
    for s in (fast, slow):
        s.add(np.arange(n), importance=weights)
    start = rng.integers(1, n_states + 1, n)
    set_states(fast, start)
    set_states(slow, start)
    flips = 0
    for _ in range(300):
        polled = rng.choice(n, size=int(rng.integers(1, 25)), replace=False)
        hits = rng.random(polled.size) < rng.uniform(0.2, 0.8)
        before = fast._total >= capacity / SCALE
        fast.feedback(polled, hits)
        slow.feedback(polled, hits)
        flips += before != (fast._total >= capacity / SCALE)
        assert np.array_equal(fast.states(), slow.states())
        assert fast._total == slow._total == exact_total(fast)
        assert np.array_equal(fast.frequencies()[1], slow.frequencies()[1])
    assert flips > 20  # the race crossed the threshold often


def test_sum_of_x_does_not_drift() -> None:
    s = LAKG(3, seed=2, gamma=1.3, N=500)
    p = 0.6 / np.arange(1, 201) ** 1.2
    s.add(np.arange(200))
    simulate(s, p, 1500)
    _ids, x = s.frequencies()
    assert s._total == exact_total(s)
    assert s._wanted_total() == s._total * SCALE
    assert abs(x.sum() - s._wanted_total()) < 1e-9
    assert np.array_equal(x, s._levels[s._state] * SCALE)
    assert np.allclose(x, (s.states() / 500.0) ** 1.3, rtol=1e-6, atol=1e-10)


# ----- resolution, initial states, parameters ----------------------------------------


def test_level_table() -> None:
    table = level_table(1000, 1.3)
    assert table[0] == 0 and table[1000] == 2**UNIT_BITS
    assert np.all(np.diff(table) > 0)
    s = np.arange(1, 1001)
    assert np.allclose(table[1:] * SCALE, (s / 1000) ** 1.3, rtol=1e-6)
    assert np.all(np.diff(level_table(2**18, 4.0)) > 0)  # forced strictly increasing


def test_auto_states_rule() -> None:
    for n, capacity, gamma in [(500, 1.0, 1.0), (300, 3.0, 1.3), (10**6, 10**4, 1.0)]:
        got = auto_states(n, capacity, gamma)
        assert (1.0 / got) ** gamma <= capacity / n / AUTO_K * (1 + 1e-9)
        assert (1.0 / (got / 2.0**0.25 - 1)) ** gamma > capacity / n / AUTO_K  # smallest
    assert auto_states(10, 20.0, 4.0) == AUTO_MIN_N
    assert auto_states(10**9, 1.0, 1.0) == AUTO_MAX_N
    # More URLs: a finer resolution, chosen on adding and kept on restore.
    s = LAKG(1.0, seed=0)
    s.add(np.arange(50))
    small = s.n_states
    s.add(np.arange(50, 5000))
    assert s.n_states == auto_states(5000, 1.0, s.gamma) > small
    assert LAKG.from_state(s.state()).n_states == s.n_states  # type: ignore[attr-defined]


def test_auto_n_remap_keeps_x() -> None:
    s = LAKG(2.0, seed=0, init="even")
    s.add(np.arange(100))
    set_states(s, np.random.default_rng(0).integers(1, s.n_states + 1, 100))
    before = s.frequencies()[1]
    s.add(np.arange(100, 2000))  # the resolution rises several grid steps
    after = s.frequencies()[1][:100]
    assert s.n_states > 4 * auto_states(100, 2.0, s.gamma)
    assert np.abs(after - before).max() <= s.gamma * 0.5 / s.n_states  # nearest fine state
    assert s._total == exact_total(s)
    # Removing most URLs: the resolution falls again, x kept to the coarse grid.
    x_kept = s.frequencies()[1][:100]
    s.remove(np.arange(100, 2000))
    assert s.n_states < auto_states(2000, 2.0, s.gamma)
    assert np.allclose(s.frequencies()[1], x_kept, atol=1.0 / s.n_states)
    assert s._total == exact_total(s)


def test_init_modes() -> None:
    low = make(capacity=2.0, n=50, N=100, init="low")
    assert (low.states() == 1).all()
    even = make(capacity=2.0, n=50, N=100, gamma=1.3, init="even")
    expected = int(np.ceil(100 * (2.0 / 50) ** (1 / 1.3)))
    assert (even.states() == expected).all()
    assert even.frequencies()[1][0] >= 2.0 / 50
    # URLs added later start at the share of the current n.
    even.add(np.arange(50, 200))
    later = int(np.ceil(100 * (2.0 / 200) ** (1 / 1.3)))
    assert (even.states()[50:] == later).all() and (even.states()[:50] == expected).all()
    # More capacity than URLs: all at the top.
    assert (make(capacity=10.0, n=5, N=100, init="even").states() == 100).all()


@pytest.mark.parametrize(
    "params",
    [
        {"N": 1},
        {"N": 0},
        {"N": 2.5},
        {"N": True},
        {"gamma": 0.0},
        {"gamma": -1.0},
        {"gamma": float("nan")},
        {"gamma": "x"},
        {"init": "high"},
        {"mode": "fast"},
        {"realization": "random"},
    ],
)
def test_bad_parameters(params: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        LAKG(1.0, **params)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        schedulers.create("lakg", 1.0, **params)


def test_registry_and_params() -> None:
    s = schedulers.create("lakg", capacity=3, seed=7, N=64, gamma=1.0, init="low")
    assert isinstance(s, LAKG) and s.name == "lakg"
    assert s.params() == {
        "capacity": 3.0,
        "seed": 7,
        "realization": "stride",
        "N": 64,
        "gamma": 1.0,
        "init": "low",
        "mode": "sequential",
    }


# ----- state, add/remove, realizations ------------------------------------------------


@pytest.mark.parametrize("realization", ["stride", "sampling"])
def test_state_round_trip(realization: str) -> None:
    p = 0.5 / np.arange(1, 81) ** 1.1
    weights = np.linspace(0.3, 1.0, 80)
    s = schedulers.create("lakg", 4.0, seed=21, realization=realization, gamma=1.2)
    s.add(np.arange(80), importance=weights)
    simulate(s, p, 400, seed=1)
    st = s.state()
    r = schedulers.restore(st)
    assert isinstance(r, LAKG) and r.n_states == s.n_states  # type: ignore[attr-defined]
    rng = np.random.default_rng(4)
    for _ in range(300):
        a, b = s.select(), r.select()
        assert np.array_equal(a, b)
        hits = rng.random(a.size) < 0.4
        s.feedback(a, hits)
        r.feedback(b, hits)
    assert np.array_equal(s.frequencies()[1], r.frequencies()[1])
    assert np.array_equal(s.frequencies()[0], r.frequencies()[0])
    assert s._total == r._total  # type: ignore[attr-defined]


def test_add_remove_mid_run_keeps_sum() -> None:
    rng = np.random.default_rng(8)
    s = LAKG(5.0, seed=8, gamma=1.2)
    s.add(np.arange(0, 400, 2))
    p = rng.uniform(0.001, 0.3, 1000)
    for t in range(600):
        ids = s.select()
        if t % 50 == 10:
            s.add(np.arange(1 + t, 1 + t + 40, 2))
        if t % 70 == 30:
            s.remove(ids[:3])  # removed between select and feedback
            s.remove(rng.choice(s.frequencies()[0], 5, replace=False))
        s.feedback(ids, rng.random(ids.size) < p[ids])
        assert s._total == exact_total(s)
    ids, x = s.frequencies()
    assert np.array_equal(x, s._levels[s._state] * SCALE)
    assert abs(x.sum() - s._wanted_total()) < 1e-9
    assert np.all(np.diff(ids) > 0) and s._state.size == ids.size


@pytest.mark.parametrize("capacity", [1.0, 7.0, 25.0, 39.5])
def test_shares_match_water_filling(capacity: float) -> None:
    rng = np.random.default_rng(int(capacity))
    s = make(capacity=capacity, n=40, N=50, gamma=1.3)
    for _ in range(20):
        set_states(s, rng.integers(1, 51, 40) ** rng.integers(1, 3) % 50 + 1)
        want = poll_shares(s._x, s._wanted_total(), capacity)
        got = s._shares()
        assert np.allclose(got, want, rtol=1e-9, atol=1e-12)
        assert abs(got.sum() - capacity) < 1e-9 and got.max() <= 1.0


def test_select_and_fractional_capacity() -> None:
    s = make(capacity=1.0, n=30)
    sizes = [s.select().size for _ in range(100)]
    assert set(sizes) <= {0, 1} and sum(sizes) >= 95  # stride may skip a slot at the start
    s = make(capacity=0.5, n=30)
    # (the base's stride waits for a credit to reach 1, so the first slots may be empty)
    assert 0 < sum(s.select().size for _ in range(100)) <= 50
    s = make(capacity=2.0, n=30, realization="sampling")
    for _ in range(50):
        ids = s.select()
        assert ids.size == 2 and np.unique(ids).size == 2


# ----- learning -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("realization", ["stride", "sampling"])
def test_converges_toward_optimum(realization: str) -> None:
    n, capacity = 20, 2.0
    p = 0.5 / np.arange(1, n + 1) ** 1.2
    s = LAKG(capacity, seed=1, realization=realization)
    s.add(np.arange(n))
    hits = simulate(s, p, 8000, seed=2)
    x = s.frequencies()[1]
    best = optimal_allocation(p, capacity)
    assert abs(x.sum() - capacity) < 0.05
    assert np.corrcoef(x, best)[0, 1] > 0.95
    ratio = hits[4000:].mean() / limit(p, capacity)
    # The sampler is worth less than regular polling (docs/schedulers.md).
    assert ratio > (0.95 if realization == "stride" else 0.8)


def test_cgla_importance_shifts_polls() -> None:
    # Equal change rates: the weighted automata earn the larger share.
    n = 20
    weights = np.where(np.arange(n) < 10, 1.0, 0.3)
    s = LAKG(2.0, seed=4, N=64, gamma=1.0)  # the thesis's CGLA
    s.add(np.arange(n), importance=weights)
    simulate(s, np.full(n, 0.1), 3000, seed=3)
    x = s.frequencies()[1]
    assert x[:10].mean() > 2 * x[10:].mean()
