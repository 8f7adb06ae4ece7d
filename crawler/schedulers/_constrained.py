"""The public solvers under politeness caps and per-URL bounds, and the limits they give
(the solve itself is ``_fill.constrained_fill``; the constraints travel as one ``Limits``)."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from crawler.schedulers._fill import FIT_TOL, constrained_fill, optimum_curve
from crawler.schedulers._lagrange import gain, inverse_gain
from crawler.schedulers._limits import Constrained, Limits
from crawler.schedulers._optimum import (
    change_rates,
    checked_problem,
    checked_weights,
    expected_hits,
    optimal_allocation,
)

FloatArray = NDArray[np.float64]


def solve_constrained(
    r: ArrayLike,
    capacity: float,
    importance: ArrayLike | None = None,
    *,
    limits: Limits | None = None,
) -> Constrained:
    """The optimum under a budget, host caps and per-URL bounds, from Poisson rates r.

    ``limits``: the URLs' host groups, the caps and the per-URL bounds (``Limits.build``;
    None: none). See ``constrained_fill`` for what happens when the lower bounds do not
    fit."""
    ra = np.asarray(r, dtype=np.float64)
    if ra.ndim != 1 or np.any(np.isnan(ra)) or np.any(ra < 0):
        raise ValueError("rates must be a 1-D array of non-negative numbers")
    if not math.isfinite(capacity) or capacity <= 0:
        raise ValueError("capacity must be a positive number")
    limits = _limits_for(ra.size, limits)
    w = None if importance is None else np.asarray(importance, dtype=np.float64)
    if w is not None:
        if w.shape != ra.shape or not np.all(np.isfinite(w)) or np.any(w <= 0):
            raise ValueError("importance must be positive, finite and match the rates")
        if w.size and np.all(w == w[0]):
            w = None
    curve, top = optimum_curve(ra, w)
    return constrained_fill(curve, top, float(capacity), limits)


def constrained_allocation(
    p: ArrayLike,
    capacity: float,
    importance: ArrayLike | None = None,
    *,
    limits: Limits | None = None,
) -> FloatArray:
    """``optimal_allocation`` under host caps and per-URL bounds (see ``solve_constrained``).

    Without any constraint it is ``optimal_allocation`` itself (the same numbers)."""
    pa = checked_problem(p, capacity)
    if limits is None:
        return optimal_allocation(pa, capacity, importance)
    if importance is not None:
        checked_weights(importance, pa)
    return solve_constrained(change_rates(pa), capacity, importance, limits=limits).x


def constrained_limit(
    p: ArrayLike,
    capacity: float,
    importance: ArrayLike | None = None,
    *,
    limits: Limits | None = None,
    model: Literal["overwrite", "disappear"] = "overwrite",
) -> float:
    """``limit`` under host caps and per-URL bounds: the expected (weighted) hits per slot
    of the best policy that respects them.

    Overwrite: the value of the constrained optimum under regular polling. Disappear: the
    problem is linear (a poll of URL i is worth w_i p_i whenever it happens), so the greedy
    fill by w_i p_i is optimal (the caps nest inside the budget: a laminar family, for
    which greedy is exact): every URL first gets its lower bound, then the most valuable
    URLs get up to their upper bound while their host's cap and the budget last."""
    pa = checked_problem(p, capacity)
    w = np.ones_like(pa) if importance is None else checked_weights(importance, pa)
    if model == "overwrite":
        x = constrained_allocation(pa, capacity, importance, limits=limits)
        return expected_hits(x, pa, importance)
    x = _greedy_linear(w * pa, float(capacity), _limits_for(pa.size, limits))
    return float(np.sum(w * pa * x))


def _greedy_linear(value: FloatArray, capacity: float, limits: Limits) -> FloatArray:
    """Maximize sum(value x) under the caps, budget and bounds: lower bounds first (scaled
    like ``constrained_fill`` scales them when they do not fit), then the rest in order of
    value, each URL up to its upper bound while its host's cap and the budget last."""
    x = fitted_lower(limits, capacity)
    grouped = limits.group >= 0
    upper = limits.upper
    room_group = limits.cap - np.bincount(
        limits.group[grouped], x[grouped], minlength=limits.cap.size
    )
    room = capacity - float(x.sum())
    for i in np.argsort(-value, kind="stable").tolist():
        if room <= 1e-15 or value[i] <= 0:
            break
        g = int(limits.group[i])
        extra = min(float(upper[i] - x[i]), room)
        if g >= 0:
            extra = min(extra, float(room_group[g]))
        if extra <= 0:
            continue
        x[i] += extra
        room -= extra
        if g >= 0:
            room_group[g] -= extra
    return x


def fitted_lower(limits: Limits, capacity: float) -> FloatArray:
    """The lower bounds, scaled down where they do not fit (as ``constrained_fill`` does):
    in a host whose cap is below their sum, to the cap; then, if they exceed C, to C."""
    x = limits.lower.copy()
    grouped = np.flatnonzero(limits.group >= 0)
    if limits.cap.size:
        g_of = limits.group[grouped]
        sum_lo = np.bincount(g_of, x[grouped], minlength=limits.cap.size)
        over = sum_lo > limits.cap * (1 + FIT_TOL)
        rows = grouped[over[g_of]]
        x[rows] *= (limits.cap / np.maximum(sum_lo, 1e-300))[limits.group[rows]]
    total = float(x.sum())
    if total > capacity * (1 + FIT_TOL):
        x *= capacity / total
    return x


def constrained_whole_slot_limit(
    p: ArrayLike,
    capacity: float,
    importance: ArrayLike | None = None,
    *,
    limits: Limits | None = None,
) -> float:
    """``whole_slot_limit`` under host caps: an upper bound on the value per slot of any
    schedule that polls each URL at whole-slot intervals within the caps and the budget.

    By weak duality, for any multipliers m >= 0 (budget) and mu_h >= 0 (caps),
    ``m C + sum_h mu_h K_h + sum_i max(0, max_k w_i (1 - q_i^k - c_i) / k)``, with
    ``c_i = (m + mu_h(i)) / w_i``, bounds the value of every whole-interval allocation that
    fits. The multipliers of the fractional constrained optimum are near-optimal for it;
    they are scaled by the factor (found by golden-section search, the dual being convex)
    that gives the smallest bound, and the result is the smaller of that and the
    fractional constrained limit (both are upper bounds). The inner maximum over k is
    found among the integers around the continuous optimum k* = g^-1(c) / r (the
    function is unimodal in k)."""
    pa = checked_problem(p, capacity)
    w = np.ones_like(pa) if importance is None else checked_weights(importance, pa)
    weights = None if importance is None or np.all(w == w[0]) else w
    r = change_rates(pa)
    limits = _limits_for(pa.size, limits)
    if limits.rows.size:
        raise ValueError("constrained_whole_slot_limit takes host caps only, no per-URL bounds")
    curve, top = optimum_curve(r, weights)
    solved = constrained_fill(curve, top, float(capacity), limits)
    own = np.append(solved.group_level, 0.0)[limits.group]
    level_row = np.maximum(own, solved.level)
    if weights is None:  # equal weights w0: levels are u, the marginal value is w0 g(u)
        w0 = float(w[0]) if w.size else 1.0
        marg_row = w0 * gain(np.minimum(level_row, 700.0))
        m = w0 * float(gain(np.array([min(solved.level, 700.0)]))[0])
        own_m = w0 * gain(np.minimum(solved.group_level, 700.0))
    else:
        marg_row, m, own_m = level_row, solved.level, solved.group_level
    mu = np.maximum(own_m - m, 0.0)
    finite_cap = np.isfinite(limits.cap)
    fractional = expected_hits(solved.x, pa, w)

    def dual(t: float) -> float:
        c = np.minimum(t * marg_row / w, 1.0)
        u = inverse_gain(np.minimum(c, 1.0 - 1e-12))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            k_star = np.where(r > 0, u / r, np.inf)
        base = np.maximum(np.floor(np.minimum(k_star, 1e15)) - 1.0, 1.0)
        best = np.zeros_like(pa)
        for step in range(4):
            k = base + step
            with np.errstate(over="ignore", invalid="ignore"):
                gain = np.where(np.isfinite(r), -np.expm1(-r * k), 1.0)
            best = np.maximum(best, (gain - c) / k)
        inner = float(np.sum(w * best))
        caps_term = float(np.sum(t * mu[finite_cap] * limits.cap[finite_cap]))
        return inner + t * m * capacity + caps_term

    lo, hi = 0.5, 1.5
    golden = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - golden * (hi - lo), lo + golden * (hi - lo)
    fa, fb = dual(a), dual(b)
    for _ in range(40):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - golden * (hi - lo)
            fa = dual(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + golden * (hi - lo)
            fb = dual(b)
    return min(fa, fb, dual(1.0), fractional)


def _limits_for(n: int, limits: Limits | None) -> Limits:
    """The limits of n URLs (none when None); ValueError when they are for another n."""
    if limits is None:
        return Limits.build(n)
    if limits.n != n:
        raise ValueError(f"the limits are for {limits.n} URLs, the problem has {n}")
    return limits
