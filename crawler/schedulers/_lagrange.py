"""The Lagrange optimum's three pieces of maths, written once: ``g``, ``g⁻¹`` and the water-fill.

Overwrite model: a URL with Poisson rate r polled x times per slot is worth
x (1 - e^(-r / x)); with u = r / x the marginal value of one more poll is
``g(u) = 1 - e^-u (1 + u)``, which rises from 0 to 1 as u grows. At the optimum every URL
sits where w_i g(u_i) equals the multiplier, so the schedulers and the limits need ``g``
(``gain``), its inverse (``inverse_gain``) and, with equal weights, the water level u with
sum_i min(1, r_i / u) = C (``water_level``).

``inverse_gain`` is a table lookup on a log grid polished by two Newton steps
(g'(u) = u e^-u): a few O(n) passes where the bisection it replaced in the limits took 60.
It is exact to a relative 1e-10 of u over levels in [1e-8, 1 - 1e-6]; below, the rounding
of g itself limits any method (to about 1e-8 at level 1e-16); above, g is too flat to pin u
down, and g(u) is the level to rounding (tests/schedulers/test_lagrange.py). A lookup alone
(``bayes`` used one) is 1e-5 off. ``water_level`` is the fixed-point iteration
u <- sum(uncapped r) / (C - capped): the capped set only grows, so it ends in a few O(n)
passes at the exact level, where sorting the rates (the limits' former water-fill) costs an
O(n log n) sort and a Python loop over up to C candidates.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]

_U_TABLE: FloatArray = np.logspace(-4.0, 2.0, 2001)


def gain(u: ArrayLike) -> FloatArray:
    """g(u) = 1 - e^-u (1 + u): the value of one more poll at u = r / x, elementwise."""
    ua = np.asarray(u, dtype=np.float64)
    out: FloatArray = -np.expm1(-ua) - ua * np.exp(-ua)
    return out


_G_TABLE: FloatArray = gain(_U_TABLE)


def inverse_gain(level: ArrayLike) -> FloatArray:
    """u with g(u) = level, elementwise: level <= 0 gives 0 and level >= 1 gives inf."""
    lv = np.asarray(level, dtype=np.float64)
    small = lv < _G_TABLE[0]
    u = np.interp(lv, _G_TABLE, _U_TABLE)
    u = np.where(small, np.sqrt(2.0 * np.maximum(lv, 0.0)), u)  # g(u) ~ u^2 / 2 near 0
    for _ in range(2):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            step = (gain(u) - lv) / (u * np.exp(-u))
        u = np.where(np.isfinite(step) & (u > 0), u - step, u)
        u = np.maximum(u, 0.0)
    u = np.where(lv >= 1.0, np.inf, u)
    out: FloatArray = np.where(lv <= 0.0, 0.0, u)
    return out


def water_level(r: NDArray[np.floating], capacity: float) -> float:
    """u with sum_i min(1, r_i / u) = C, for finite rates r_i >= 0 of which more than C are
    positive (else every positive rate gets x = 1 and the level is not defined: 1.0 is
    returned, like for rates that are all 0). float32 rates are summed in float64."""
    total = float(r.sum(dtype=np.float64))
    if total <= 0 or capacity <= 0:
        return 1.0
    u = total / capacity
    for _ in range(100):
        capped = r >= u
        k = int(np.count_nonzero(capped))
        room = capacity - k
        if room <= 0:
            break
        rest = total - float(r[capped].sum(dtype=np.float64))
        new_u = rest / room
        if new_u <= 0 or new_u >= u * (1 - 1e-12):
            u = new_u if new_u > 0 else u
            break
        u = new_u
    return u


def water_fill(r: FloatArray, capacity: float) -> FloatArray:
    """x_i = min(1, r_i / u) with sum x = C, for rates r_i >= 0 (inf: a URL that changes
    every slot). When no more than C rates are positive each positive one gets 1; when the
    infinite ones alone are C or more they share C."""
    x = np.zeros(r.size)
    positive = r > 0
    n_pos = int(np.count_nonzero(positive))
    if n_pos == 0:
        return x
    if capacity >= n_pos:
        x[positive] = 1.0
        return x
    finite = np.isfinite(r)
    n_inf = r.size - int(np.count_nonzero(finite))
    if n_inf >= capacity:
        x[~finite] = capacity / n_inf
        return x
    rf = r[finite]
    u = water_level(rf, capacity - n_inf)
    x[finite] = np.minimum(1.0, rf / u) if u > 0 and math.isfinite(u) else 1.0
    x[~finite] = 1.0
    return x
