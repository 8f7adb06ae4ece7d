"""The optimum under host caps and per-URL bounds, against an independent reference.

The reference is the incremental greedy: start every URL at its lower bound and hand out
the rest of the budget in small steps, each to the URL whose next step is worth the most
among those whose upper bound, host cap and the budget leave room. For a separable concave
objective under nested (laminar) capacity constraints that greedy is optimal up to the step
size, and it shares no code with the solver (no multipliers, no bisection).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler.schedulers import (
    Limits,
    constrained_allocation,
    constrained_limit,
    constrained_whole_slot_limit,
    expected_hits,
    limit,
    optimal_allocation,
    solve_constrained,
    whole_slot_limit,
)
from crawler.schedulers._constrained import fitted_lower
from crawler.schedulers._optimum import change_rates

STEPS = 1500


def value(x: np.ndarray, p: np.ndarray, w: np.ndarray, model: str) -> np.ndarray:
    if model == "disappear":
        return w * p * x
    r = change_rates(p)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(x > 0, x * -np.expm1(-r / np.where(x > 0, x, 1.0)), 0.0)
    return np.asarray(w * v)


def greedy_reference(
    p: np.ndarray,
    capacity: float,
    w: np.ndarray,
    groups: np.ndarray,
    caps: dict[int, float],
    lower: np.ndarray,
    upper: np.ndarray,
    model: str = "overwrite",
) -> float:
    # A URL's next step is worth what its value gains from x[i] to x[i] + size: a URL whose
    # x and step size did not change since its last gain was computed keeps that gain (the
    # same number, computed once), so a step computes about one gain instead of one per URL.
    # The loop's scalars are Python floats, whose arithmetic is NumPy's float64 arithmetic.
    gains: dict[int, tuple[float, float, float]] = {}
    x = lower.astype(np.float64).copy()
    step = capacity / STEPS
    room = float(capacity - x.sum())
    cap_room = {g: float(c - x[groups == g].sum()) for g, c in caps.items()}
    at, top, group = x.tolist(), upper.tolist(), [int(g) for g in groups]
    pair_p = [np.full(2, pi) for pi in p]  # value() reads them, never writes
    pair_w = [np.full(2, wi) for wi in w]
    while room > 1e-12:
        best, best_gain, best_size = -1, 0.0, 0.0
        for i in range(p.size):
            size = min(step, top[i] - at[i], room)
            g = group[i]
            if g in cap_room:
                size = min(size, cap_room[g])
            if size <= 1e-15:
                continue
            known = gains.get(i)
            if known is not None and known[0] == at[i] and known[1] == size:
                gain = known[2]
            else:
                one = np.array([at[i], at[i] + size])
                v = value(one, pair_p[i], pair_w[i], model)
                gain = float((v[1] - v[0]) / size)
                gains[i] = (at[i], size, gain)
            if gain > best_gain:
                best, best_gain, best_size = i, gain, size
        if best < 0:
            break
        at[best] += best_size
        room -= best_size
        g = group[best]
        if g in cap_room:
            cap_room[g] -= best_size
    return float(value(np.array(at), p, w, model).sum())


@st.composite
def instances(draw: st.DrawFn) -> tuple:
    n = draw(st.integers(1, 6))
    p = np.array(draw(st.lists(st.floats(0.0, 0.95), min_size=n, max_size=n)))
    weighted = draw(st.booleans())
    w = (
        np.array(draw(st.lists(st.floats(0.05, 1.0), min_size=n, max_size=n)))
        if weighted
        else np.ones(n)
    )
    groups = np.array(draw(st.lists(st.integers(-1, 1), min_size=n, max_size=n)))
    caps = {g: draw(st.floats(0.05, 2.0)) for g in (0, 1) if draw(st.booleans())}
    lower = np.array(draw(st.lists(st.floats(0.0, 0.3), min_size=n, max_size=n)))
    spread = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)))
    upper = lower + spread * (1.0 - lower)
    capacity = draw(st.floats(0.1, 4.0))
    return p, capacity, w, weighted, groups, caps, lower, upper


def fits(limits: Limits, capacity: float) -> bool:
    lo = limits.lower
    for g, c in enumerate(limits.cap):
        if lo[limits.group == g].sum() > c * (1 + 1e-9):
            return False
    return bool(lo.sum() <= capacity * (1 + 1e-9))


def check_constraints(x: np.ndarray, capacity: float, limits: Limits) -> None:
    tol = 1e-9
    assert x.sum() <= capacity * (1 + tol) + tol
    assert np.all(x <= limits.upper + tol)
    assert np.all(x >= -tol)
    for g, c in enumerate(limits.cap):
        assert x[limits.group == g].sum() <= c * (1 + 1e-7) + tol
    assert np.all(x >= fitted_lower(limits, capacity) * (1 - 1e-7) - tol)


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_matches_the_greedy_reference(case: tuple) -> None:
    p, capacity, w, weighted, groups, caps, lower, upper = case
    importance = w if weighted else None
    limits = Limits.build(p.size, groups, caps, lower, upper)
    solved = solve_constrained(change_rates(p), capacity, importance, limits=limits)
    check_constraints(solved.x, capacity, limits)
    assert solved.feasible == fits(limits, capacity)
    if not solved.feasible:
        return
    ours = float(value(solved.x, p, w, "overwrite").sum())
    reference = greedy_reference(p, capacity, w, groups, caps, lower, upper)
    # The greedy's steps cost it at most a step's worth of value; it never beats the optimum.
    assert ours >= reference - 1e-7
    assert ours <= reference + 2 * capacity / STEPS + 1e-9
    got = constrained_limit(p, capacity, importance, limits=limits)
    assert got == pytest.approx(ours, rel=1e-12, abs=1e-12)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_disappear_limit_matches_the_greedy_reference(case: tuple) -> None:
    p, capacity, w, weighted, groups, caps, lower, upper = case
    limits = Limits.build(p.size, groups, caps, lower, upper)
    if not fits(limits, capacity):
        return
    got = constrained_limit(
        p,
        capacity,
        w if weighted else None,
        limits=limits,
        model="disappear",
    )
    reference = greedy_reference(p, capacity, w, groups, caps, lower, upper, "disappear")
    assert got == pytest.approx(reference, abs=1e-7)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.integers(0, 2**16))
def test_no_feasible_transfer_improves_it(case: tuple, seed: int) -> None:
    p, capacity, w, weighted, groups, caps, lower, upper = case
    limits = Limits.build(p.size, groups, caps, lower, upper)
    if not fits(limits, capacity):
        return
    x = constrained_allocation(p, capacity, w if weighted else None, limits=limits)
    best = float(value(x, p, w, "overwrite").sum())
    rng = np.random.default_rng(seed)
    for _ in range(200):
        y = x.copy()
        i, j = rng.integers(0, p.size, 2)
        d = rng.uniform(-0.05, 0.05)
        y[i] += d
        if i != j:
            y[j] -= d * rng.uniform(0.0, 1.0)
        if np.any(y < lower - 1e-12) or np.any(y > upper + 1e-12) or y.sum() > capacity:
            continue
        if any(y[groups == g].sum() > c for g, c in caps.items()):
            continue
        assert float(value(y, p, w, "overwrite").sum()) <= best + 1e-9


def test_no_constraints_is_the_plain_optimum() -> None:
    rng = np.random.default_rng(4)
    p = rng.uniform(0.0, 0.6, 300)
    w = rng.uniform(0.1, 1.0, 300)
    for importance in (None, w):
        plain = optimal_allocation(p, 7.5, importance)
        assert np.array_equal(constrained_allocation(p, 7.5, importance), plain)
        # and the solver itself, with empty constraints, agrees to rounding
        loose = constrained_allocation(
            p, 7.5, importance, limits=Limits.build(300, np.zeros(300, dtype=int))
        )
        assert np.allclose(loose, plain, atol=1e-6)
        assert constrained_limit(p, 7.5, importance) == limit(p, 7.5, importance)


def test_host_caps_bind_for_the_big_hosts() -> None:
    rng = np.random.default_rng(2)
    n = 2000
    p = 0.5 / np.arange(1, n + 1) ** 0.9
    rng.shuffle(p)
    host = np.minimum(rng.zipf(1.6, n) - 1, 49)
    caps = {h: 1.5 for h in range(50)}
    solved = solve_constrained(change_rates(p), 20.0, limits=Limits.build(p.size, host, caps))
    load = np.bincount(host, solved.x, minlength=50)
    free_load = np.bincount(host, optimal_allocation(p, 20.0), minlength=50)
    assert solved.x.sum() == pytest.approx(20.0)
    assert np.all(load <= 1.5 + 1e-9)
    assert np.array_equal(solved.groups, np.unique(host))
    load, free_load = load[solved.groups], free_load[solved.groups]
    big = free_load > 1.5
    assert big.any()
    # the hosts over the cap bind; capping them frees budget that may lift others to it
    assert np.all(solved.binding[big])
    assert np.allclose(load[solved.binding], 1.5)
    assert np.all(load[~solved.binding] < 1.5)
    # the capped optimum is worth less than the free one, and more than truncating it
    free = limit(p, 20.0)
    capped = constrained_limit(p, 20.0, limits=Limits.build(p.size, host, caps))
    scaled = optimal_allocation(p, 20.0)
    factor = np.ones(50)
    factor[solved.groups] = np.where(big, 1.5 / np.maximum(free_load, 1e-300), 1.0)
    truncated = expected_hits(scaled * factor[host], p)
    assert truncated < capped < free


def test_budget_left_over_when_every_cap_binds() -> None:
    p = np.full(10, 0.5)
    groups = np.repeat([0, 1], 5)
    x = constrained_allocation(p, 5.0, limits=Limits.build(p.size, groups, {0: 1.0, 1: 0.5}))
    assert x.sum() == pytest.approx(1.5)
    assert np.allclose(x[:5], 0.2) and np.allclose(x[5:], 0.1)


def test_infeasible_lower_bounds_are_scaled_down() -> None:
    p = np.array([0.5, 0.1, 0.2, 0.3])
    lower = np.array([0.5, 0.5, 0.2, 0.2])
    groups = np.array([0, 0, 1, 1])
    # host 0: minimums 1.0 over its cap 0.5 -> halved; then 0.25 + 0.25 + 0.2 + 0.2 = 0.9
    solved = solve_constrained(
        change_rates(p), 2.0, limits=Limits.build(p.size, groups, {0: 0.5}, lower)
    )
    assert not solved.feasible
    assert np.allclose(solved.x[:2], [0.25, 0.25])
    assert solved.x.sum() == pytest.approx(2.0)
    # the minimums alone over the budget: all scaled to C
    tight = solve_constrained(change_rates(p), 0.6, limits=Limits.build(p.size, lower=lower))
    assert not tight.feasible
    assert np.allclose(tight.x, lower * 0.6 / lower.sum())


def test_paused_urls_get_nothing_and_bad_input_is_rejected() -> None:
    p = np.array([0.9, 0.5, 0.1])
    x = constrained_allocation(p, 1.0, limits=Limits.build(3, upper=np.array([0.0, 1.0, 1.0])))
    assert x[0] == 0.0 and x.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="lower bound"):
        Limits.build(3, lower=[0.5, 0.5, 0.5], upper=[0.2, 1.0, 1.0])
    with pytest.raises(ValueError, match="cap"):
        Limits.build(3, [0, 0, 1], {0: 0.0})
    with pytest.raises(ValueError, match="groups"):
        Limits.build(3, [0.5, 0, 1])
    with pytest.raises(ValueError, match="bounds"):
        Limits.build(3, upper=[1.5, 1.0, 1.0])
    with pytest.raises(ValueError, match="limits are for 4 URLs"):
        constrained_allocation(p, 1.0, limits=Limits.build(4))
    with pytest.raises(ValueError, match="host caps only"):
        constrained_whole_slot_limit(p, 1.0, limits=Limits.build(3, lower=[0.1, 0.0, 0.0]))
    assert math.isfinite(constrained_limit(p, 1.0, limits=Limits.build(3, [0, 0, 1], {0: 0.3})))


@pytest.mark.parametrize(
    ("p", "capacity", "weighted"),
    [
        (0.3 / np.arange(1, 501) ** 1.5, 1.0, False),
        (0.9 / np.arange(1, 501) ** 1.5, 1.0, False),
        (np.random.default_rng(5).uniform(0.0, 0.9, 200), 12.0, True),
    ],
)
def test_whole_slot_bound_without_caps_is_whole_slot_limit(
    p: np.ndarray, capacity: float, weighted: bool
) -> None:
    w = np.random.default_rng(6).uniform(0.1, 1.0, p.size) if weighted else None
    assert constrained_whole_slot_limit(p, capacity, w) == pytest.approx(
        whole_slot_limit(p, capacity, w), rel=1e-6
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_whole_slot_bound_beats_every_whole_interval_schedule(case: tuple) -> None:
    p, capacity, w, weighted, groups, caps, _, _ = case
    limits = Limits.build(p.size, groups, caps)
    bound = constrained_whole_slot_limit(p, capacity, w if weighted else None, limits=limits)
    assert bound <= constrained_limit(p, capacity, w if weighted else None, limits=limits) * (
        1 + 1e-12
    )
    # every assignment of whole intervals (1..6 slots, or never) that fits is below it: all
    # 7**n of them at once, one per row (a loop over them took 3-20 s of CPU per run)
    choices = np.array([0.0, *(1.0 / k for k in range(1, 7))])
    picks = np.indices((choices.size,) * p.size).reshape(p.size, -1).T
    x = choices[picks]
    fit = x.sum(axis=1) <= capacity
    for g, c in caps.items():
        fit &= x[:, groups == g].sum(axis=1) <= c
    # every URL's value at each of the 7 choices, looked up per assignment: the numbers the
    # value of every row of x gives, from 7 * n evaluations instead of n * 7**n
    table = value(choices[:, None], p[None, :], w[None, :], "overwrite")
    best = float(table[picks, np.arange(p.size)].sum(axis=1)[fit].max())
    assert best <= bound + 1e-9
