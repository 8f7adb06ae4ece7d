"""The Lagrange optimum of the polling problem and the expected value of an allocation.

Overwrite model, known change probabilities p_i per slot: maximize
sum_i w_i x_i (1 - q_i^(1/x_i)) subject to sum_i x_i = C and 0 <= x_i <= 1,
with q_i = 1 - p_i and r_i = -ln q_i. With u = r_i / x_i the marginal value of
x_i is w_i g(u), g(u) = 1 - e^-u (1 + u), which falls as x_i grows. Bisecting on
the multiplier m gives the optimum (docs/schedulers.md, "The Lagrange optimum"); with equal
weights it is the water-fill. ``g``, its inverse and the water-fill are in ``_lagrange``; the
optimum under host caps and bounds in ``_constrained``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from crawler.schedulers._lagrange import inverse_gain, water_fill

FloatArray = NDArray[np.float64]

_BISECT_STEPS = 100


def change_rates(p: ArrayLike) -> FloatArray:
    """r = -ln(1 - p): the Poisson rate equivalent of a per-slot change probability."""
    pa = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return -np.log1p(-np.clip(pa, 0.0, 1.0))


def checked_problem(p: ArrayLike, capacity: float) -> FloatArray:
    """p as a float array, after checking it and the capacity (ValueError if bad)."""
    pa = np.asarray(p, dtype=np.float64)
    if pa.ndim != 1:
        raise ValueError("p must be a 1-D array")
    if not np.all(np.isfinite(pa)) or np.any((pa < 0) | (pa > 1)):
        raise ValueError("change probabilities must be finite and in [0, 1]")
    if not np.isfinite(capacity) or capacity <= 0:
        raise ValueError("capacity must be a positive number")
    return pa


def checked_weights(importance: ArrayLike, pa: FloatArray) -> FloatArray:
    """The importance weights as a float array matching p (ValueError if bad)."""
    w = np.asarray(importance, dtype=np.float64)
    if w.shape != pa.shape or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError("importance must be positive, finite and match p")
    return w


def optimal_allocation(
    p: ArrayLike, capacity: float, importance: ArrayLike | None = None
) -> FloatArray:
    """The frequencies x (polls per slot, in [0, 1], summing to C) that maximize expected value.

    ``p`` are change probabilities per slot, ``importance`` the weights w_i in (0, 1].
    """
    pa = checked_problem(p, capacity)
    r = change_rates(pa)
    if importance is None:
        return water_fill(r, float(capacity))
    w = checked_weights(importance, pa)
    if np.allclose(w, w[0]):
        return water_fill(r, float(capacity))
    positive = r > 0
    if capacity >= positive.sum():
        return positive.astype(np.float64)

    def allocation(m: float) -> FloatArray:
        level = np.minimum(m / w, 1.0)
        u = np.full_like(r, np.inf)
        open_ = level < 1.0
        u[open_] = inverse_gain(level[open_])
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.where(np.isfinite(r), np.minimum(1.0, r / u), 1.0)
        x[~open_ | ~positive] = 0.0
        return np.nan_to_num(x, nan=0.0)

    lo, hi = 0.0, float(w.max())
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        if allocation(mid).sum() > capacity:
            lo = mid
        else:
            hi = mid
    x = allocation(hi)
    short = capacity - x.sum()
    if short > 1e-9:
        # Spread what the bisection's tolerance left over along the marginal frontier.
        x = x + short * (allocation(lo) - x) / max(allocation(lo).sum() - x.sum(), 1e-300)
    return np.clip(x, 0.0, 1.0)


def expected_hits(
    x: ArrayLike,
    p: ArrayLike,
    importance: ArrayLike | None = None,
    *,
    model: Literal["overwrite", "disappear"] = "overwrite",
    realization: Literal["stride", "sampling"] = "stride",
) -> float:
    """Expected (importance-weighted) hits per slot when URL i is polled x_i times per slot.

    ``stride``: regular intervals of 1/x_i slots; ``sampling``: each slot URL i is polled
    with probability x_i independently (geometric intervals).
    """
    xa = np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0)
    pa = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    w = np.ones_like(pa) if importance is None else np.asarray(importance, dtype=np.float64)
    if model == "disappear":
        return float(np.sum(w * xa * pa))
    with np.errstate(divide="ignore", invalid="ignore"):
        if realization == "stride":
            value = xa * -np.expm1(np.log1p(-pa) / xa)
        else:
            value = xa * pa / (xa + pa - xa * pa)
    return float(np.sum(w * np.nan_to_num(value, nan=0.0)))


def limit(
    p: ArrayLike,
    capacity: float,
    importance: ArrayLike | None = None,
    *,
    model: Literal["overwrite", "disappear"] = "overwrite",
) -> float:
    """The analytic limit: expected (weighted) hits per slot of the optimal policy.

    Overwrite: the Lagrange optimum under regular polling. Disappear: poll the C URLs
    with the largest w_i p_i every slot (a fractional C takes that fraction of the next).
    """
    pa = np.asarray(p, dtype=np.float64)
    w = np.ones_like(pa) if importance is None else np.asarray(importance, dtype=np.float64)
    if model == "disappear":
        value = np.sort(w * pa)[::-1]
        whole = int(min(np.floor(capacity), value.size))
        frac = capacity - whole if whole < value.size else 0.0
        return float(value[:whole].sum() + (frac * value[whole] if frac > 0 else 0.0))
    x = optimal_allocation(pa, capacity, None if importance is None else w)
    return expected_hits(x, pa, None if importance is None else w)


def whole_slot_limit(
    p: ArrayLike,
    capacity: float,
    importance: ArrayLike | None = None,
) -> float:
    """The best value per slot of any policy that polls each URL at whole-slot intervals.

    Overwrite model. The analytic limit lets URL i be polled every 1/x_i slots exactly, a
    fraction of a slot included; a real schedule polls at whole slots, so a URL whose
    optimal interval is 1.6 slots alternates intervals of 1 and 2, and since
    1 - q^k is concave in k that mix is worth less than the regular 1.6. Mixing the two
    whole intervals k and k + 1 around 1/x is the best a URL can do at that frequency, so
    its value as a function of x is the piecewise-linear curve through the points
    (1/k, (1 - q^k) / k), k = 1, 2, ...: a concave curve below the fractional one. This
    maximizes sum_i w_i V_i(x_i) subject to sum_i x_i = C (bisection on the multiplier;
    only the marginal URL mixes two intervals). It is an upper bound for every schedule
    with C polls per slot: it ignores that the URLs' whole intervals must also fit
    together slot by slot.
    """
    pa = checked_problem(p, capacity)
    w = np.ones_like(pa) if importance is None else checked_weights(importance, pa)
    live = pa > 0
    pa, w = pa[live], w[live]
    if capacity >= pa.size:
        return float(np.sum(w * pa))
    r = change_rates(pa)

    def point(k: FloatArray) -> FloatArray:
        """Value per slot of polling every k slots: (1 - q^k) / k (0 for k = inf)."""
        with np.errstate(invalid="ignore"):
            return np.where(np.isfinite(k), -np.expm1(-r * k) / k, 0.0)

    def interval(level: float) -> FloatArray:
        """Each URL's best whole interval when a poll costs ``level`` (weighted: level / w)."""
        # The secant slope s_k between x = 1/(k+1) and x = 1/k lies between g(r k) and
        # g(r (k+1)), so the first k with s_k >= level is within a step of u / r.
        cost = np.minimum(level / w, 1.0 - 1e-12)
        u = inverse_gain(cost)
        with np.errstate(divide="ignore", over="ignore"):
            k_c = np.where(np.isfinite(r), u / r, 0.0)
        first = np.maximum(np.floor(k_c) - 2.0, 1.0)
        best = np.full_like(r, np.inf)
        for step in range(5):
            k = first + step
            slope = (point(k) - point(k + 1.0)) / (1.0 / k - 1.0 / (k + 1.0))
            best = np.where((slope >= cost) & ~np.isfinite(best), k, best)
        # The slopes rise towards 1 as k grows: a URL whose poll costs 1 or more (weight
        # below the level) is not polled at all (an infinite interval, worth nothing).
        return np.where((level < w) & np.isfinite(best), best, np.inf)

    lo, hi = 0.0, float(w.max())
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        if np.sum(1.0 / interval(mid)) > capacity:
            lo = mid
        else:
            hi = mid
    k_hi = interval(hi)  # fits in the capacity
    k_lo = interval(lo)  # just over it
    value_hi = float(np.sum(w * point(k_hi)))
    value_lo = float(np.sum(w * point(k_lo)))
    x_hi, x_lo = float(np.sum(1.0 / k_hi)), float(np.sum(1.0 / k_lo))
    if x_lo <= x_hi:
        return value_hi
    share = min(max((capacity - x_hi) / (x_lo - x_hi), 0.0), 1.0)
    return value_hi + share * (value_lo - value_hi)
