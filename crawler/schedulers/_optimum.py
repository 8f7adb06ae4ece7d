"""The Lagrange optimum of the polling problem and the expected value of an allocation.

Overwrite model, known change probabilities p_i per slot: maximize
sum_i w_i x_i (1 - q_i^(1/x_i)) subject to sum_i x_i = C and 0 <= x_i <= 1,
with q_i = 1 - p_i and r_i = -ln q_i. With u = r_i / x_i the marginal value of
x_i is w_i g(u), g(u) = 1 - e^-u (1 + u), which falls as x_i grows. Bisecting on
the multiplier m gives the optimum (docs/schedulers.md, "The Lagrange optimum").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]
IdArray = NDArray[np.int64]
IndexArray = NDArray[np.intp]
BoolArray = NDArray[np.bool_]

_BISECT_STEPS = 100


def change_rates(p: ArrayLike) -> FloatArray:
    """r = -ln(1 - p): the Poisson rate equivalent of a per-slot change probability."""
    pa = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return -np.log1p(-np.clip(pa, 0.0, 1.0))


def _marginal_gain(u: FloatArray) -> FloatArray:
    """g(u) = 1 - e^-u (1 + u), the value of one more poll at u = r / x."""
    return -np.expm1(-u) - u * np.exp(-u)


def _inverse_marginal_gain(level: FloatArray) -> FloatArray:
    """Solve g(u) = level for u, elementwise, level in [0, 1)."""
    lo = np.zeros_like(level)
    hi = np.full_like(level, 1.0)
    # Grow the upper bracket until g(hi) >= level everywhere (g is increasing, g(inf) = 1).
    for _ in range(64):
        short = _marginal_gain(hi) < level
        if not short.any():
            break
        hi = np.where(short, hi * 2.0, hi)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        below = _marginal_gain(mid) < level
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return 0.5 * (lo + hi)


def _water_fill_equal_weights(r: FloatArray, capacity: float) -> FloatArray:
    """x_i = min(1, r_i / u) with sum x = C: exact, by sorting the rates."""
    n = r.size
    x = np.zeros(n)
    positive = r > 0
    n_pos = int(positive.sum())
    if n_pos == 0:
        return x
    if capacity >= n_pos:
        x[positive] = 1.0
        return x
    finite = np.isfinite(r)
    n_inf = int((~finite).sum())
    if n_inf >= capacity:
        # More certain changers than capacity: share the capacity among them.
        x[~finite] = capacity / n_inf
        return x
    order = np.argsort(-r[finite], kind="stable")
    rs = r[finite][order]
    # With the k largest capped at 1: u = sum(rest) / (C - k - n_inf),
    # valid if rs[k-1] >= u > rs[k].
    tail = np.concatenate([np.cumsum(rs[::-1])[::-1], [0.0]])
    u = 0.0
    for k in range(0, min(rs.size, int(np.floor(capacity - n_inf)) + 1)):
        room = capacity - n_inf - k
        if room <= 0:
            break
        u = tail[k] / room
        if k < rs.size and rs[k] <= u:
            break
    xf = np.minimum(1.0, r[finite] / u) if u > 0 else np.ones(int(finite.sum()))
    x[finite] = xf
    x[~finite] = 1.0
    return x


def _checked_problem(p: ArrayLike, capacity: float) -> FloatArray:
    """p as a float array, after checking it and the capacity (ValueError if bad)."""
    pa = np.asarray(p, dtype=np.float64)
    if pa.ndim != 1:
        raise ValueError("p must be a 1-D array")
    if not np.all(np.isfinite(pa)) or np.any((pa < 0) | (pa > 1)):
        raise ValueError("change probabilities must be finite and in [0, 1]")
    if not np.isfinite(capacity) or capacity <= 0:
        raise ValueError("capacity must be a positive number")
    return pa


def _checked_weights(importance: ArrayLike, pa: FloatArray) -> FloatArray:
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
    pa = _checked_problem(p, capacity)
    r = change_rates(pa)
    if importance is None:
        return _water_fill_equal_weights(r, float(capacity))
    w = _checked_weights(importance, pa)
    if np.allclose(w, w[0]):
        return _water_fill_equal_weights(r, float(capacity))
    positive = r > 0
    if capacity >= positive.sum():
        return positive.astype(np.float64)

    def allocation(m: float) -> FloatArray:
        level = np.minimum(m / w, 1.0)
        u = np.full_like(r, np.inf)
        open_ = level < 1.0
        u[open_] = _inverse_marginal_gain(level[open_])
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
    pa = _checked_problem(p, capacity)
    w = np.ones_like(pa) if importance is None else _checked_weights(importance, pa)
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
        u = _inverse_marginal_gain(cost)
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


# ----- the optimum under politeness caps and per-URL bounds -------------------------------
#
# Kolobov et al., "Optimal freshness crawl under politeness constraints" (SIGIR 2019): with
# a global budget C, a cap K_h on the polls per slot of each host h and bounds
# lower_i <= x_i <= upper_i, the KKT conditions of the concave problem say that every URL
# sits where its marginal value w_i g(r_i / x_i) equals the global multiplier m plus its
# host's multiplier mu_h >= 0, clipped to its bounds. A host's own level (the level at which
# its URLs, alone, fill its cap) does not depend on m, so the solution is found in two
# passes: (1) each host's own level, by a root search run on all hosts at once (one
# bincount per step); (2) the global level m, by the same search, each URL taking the
# larger of m and its host's own level. Each step is O(n), so the cost is O(n) times a
# constant, near-linear like the paper's O(n log n) sort, and the same code serves every
# concave curve (equal weights, importance weights, the generic projection of the
# schedulers). The search (``_search``) works on the logarithm of the level: 12 halvings
# bring the 1,381-wide range below 0.4, then regula falsi with the Illinois rule
# (superlinear on these monotone fills) narrows every bracket to 1e-13, with a halving
# after any step that failed to halve its bracket, so it is never much slower than
# bisection. It replaced 64-step bisections (about 130 fill evaluations per solve); see
# benchmarks/scheduler_speed.py for the figures.

_LOG_TINY = math.log(1e-300)
_LOG_HUGE = math.log(1e300)
_FILL_STEPS = 64  # the log-level range is 1,381 wide: 64 halvings reach 1e-16
_HALVINGS = 12  # plain halvings before the Illinois steps: the range is then < 0.4 wide
_LOG_WIDTH = 1e-13  # a bracket this narrow (relative, in log-level) is done
_FILL_REL = 1e-12  # or a fill this close to its target (relative to the target)
#: caps and budgets are met to this relative tolerance
_FIT_TOL = 1e-9

Curve = Callable[[FloatArray, IndexArray], FloatArray]


@dataclass(frozen=True)
class Constrained:
    """The constrained optimum: ``x`` and what binds.

    ``level``: the global multiplier (0 when the budget does not bind: the caps and upper
    bounds leave part of it unused). ``groups``: the distinct group labels, sorted;
    ``group_level``: each group's own level (0 where its cap cannot bind);
    ``binding``: whether each group's cap binds at the optimum (its URLs are held below
    what the global multiplier alone would give them). ``feasible``: False when the lower
    bounds did not fit in a cap or in the budget (they were then scaled down, see
    ``solve_constrained``)."""

    x: FloatArray
    level: float
    groups: IdArray
    group_level: FloatArray
    binding: BoolArray
    feasible: bool


@dataclass(frozen=True)
class Limits:
    """Host groups with caps and per-URL bounds, validated and in dense form.

    ``group``: per URL the index into ``labels`` (-1: no group); ``cap``: per group the cap
    in polls per slot (inf: none); ``lower``/``upper``: per-URL bounds in polls per slot."""

    group: IndexArray
    labels: IdArray
    cap: FloatArray
    lower: FloatArray
    upper: FloatArray

    @classmethod
    def build(
        cls,
        n: int,
        groups: ArrayLike | None = None,
        caps: Mapping[int, float] | None = None,
        lower: ArrayLike | None = None,
        upper: ArrayLike | None = None,
    ) -> Limits:
        """Check and convert the constraints of n URLs (ValueError when malformed)."""
        if groups is None:
            group = np.full(n, -1, dtype=np.intp)
            labels: IdArray = np.empty(0, dtype=np.int64)
        else:
            raw = np.asarray(groups)
            if raw.shape != (n,) or (raw.size and not np.issubdtype(raw.dtype, np.integer)):
                raise ValueError("groups must be one integer label per URL (-1: no group)")
            raw = raw.astype(np.int64)
            if np.any(raw < -1):
                raise ValueError("group labels must be >= 0 (or -1 for no group)")
            labels = np.unique(raw[raw >= 0])
            group = np.full(n, -1, dtype=np.intp)
            grouped = raw >= 0
            group[grouped] = np.searchsorted(labels, raw[grouped])
        cap = np.full(labels.size, np.inf)
        for label, value in (caps or {}).items():
            v = float(value)
            if not (v > 0) or math.isnan(v):
                raise ValueError(f"the cap of group {label} must be positive, got {value!r}")
            at = int(np.searchsorted(labels, int(label)))
            if at < labels.size and labels[at] == int(label):
                cap[at] = v
        lo = _bound(lower, n, 0.0, "lower")
        hi = _bound(upper, n, 1.0, "upper")
        if np.any(lo > hi):
            raise ValueError("every lower bound must be at most its upper bound")
        return cls(group, labels, cap, lo, hi)

    @property
    def constrained(self) -> bool:
        """Whether anything here can bind (a finite cap, a lower bound > 0 or upper < 1)."""
        return bool(np.isfinite(self.cap).any() or np.any(self.lower > 0) or np.any(self.upper < 1))


def _bound(values: ArrayLike | None, n: int, default: float, what: str) -> FloatArray:
    if values is None:
        return np.full(n, default)
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise ValueError(f"{what} bounds must have one value per URL")
    if not np.all(np.isfinite(arr)) or np.any((arr < 0) | (arr > 1)):
        raise ValueError(f"{what} bounds must be polls per slot in [0, 1]")
    return arr


def fast_inverse_gain(level: FloatArray) -> FloatArray:
    """u with g(u) = level, elementwise, for level in [0, 1): a table lookup polished by
    two Newton steps (g'(u) = u e^-u); level 0 gives 0 and level >= 1 gives inf."""
    lv = np.asarray(level, dtype=np.float64)
    small = lv < _G_TABLE[0]
    u = np.interp(lv, _G_TABLE, _U_TABLE)
    u = np.where(small, np.sqrt(2.0 * np.maximum(lv, 0.0)), u)  # g(u) ~ u^2 / 2 near 0
    for _ in range(2):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            step = (_marginal_gain(u) - lv) / (u * np.exp(-u))
        u = np.where(np.isfinite(step) & (u > 0), u - step, u)
        u = np.maximum(u, 0.0)
    u = np.where(lv >= 1.0, np.inf, u)
    return np.where(lv <= 0.0, 0.0, u)


_U_TABLE: FloatArray = np.logspace(-4.0, 2.0, 2001)
_G_TABLE: FloatArray = -np.expm1(-_U_TABLE) - _U_TABLE * np.exp(-_U_TABLE)


def optimum_curve(r: FloatArray, importance: FloatArray | None) -> tuple[Curve, float]:
    """The optimum's frequency x_i at a level, and the top of the level range.

    Equal weights: the level is u and x = r / u. Weights: the level is the marginal value
    m and x = r / u with w g(u) = m (0 once m >= w: such a URL is not worth a poll)."""
    if importance is None:

        def equal(level: FloatArray, rows: IndexArray) -> FloatArray:
            # levels are positive and finite: r / level is never NaN
            with np.errstate(over="ignore"):
                out: FloatArray = r[rows] / level
            return out

        return equal, _LOG_HUGE
    w = importance

    def weighted(level: FloatArray, rows: IndexArray) -> FloatArray:
        u = fast_inverse_gain(level / w[rows])
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            x = np.where(np.isfinite(u), r[rows] / u, 0.0)
        return np.nan_to_num(x, nan=0.0, posinf=np.inf)

    return weighted, math.log(float(w.max())) if w.size else 0.0


def proportional_curve(values: FloatArray) -> tuple[Curve, float]:
    """x = v / level: the constrained projection of a wanted allocation v (the largest
    allocation proportional to v, clipped to the bounds, that fits the caps and budget)."""

    def curve(level: FloatArray, rows: IndexArray) -> FloatArray:
        # levels are positive and finite: v / level is never NaN
        with np.errstate(over="ignore"):
            out: FloatArray = values[rows] / level
        return out

    return curve, _LOG_HUGE


def constrained_fill(curve: Curve, top: float, capacity: float, limits: Limits) -> Constrained:
    """The allocation x_i = clip(curve_i(max(m, l_h)), lower_i, upper_i), where each host's
    level l_h makes it fill its cap alone and the global level m makes sum(x) = C (m at the
    bottom of the range when even that leaves budget over). ``curve`` must fall as the
    level rises; ``top`` is the logarithm of the level where every curve is at its lowest.

    Lower bounds that do not fit are scaled down: in a host whose cap is below the sum of
    its URLs' lower bounds, each URL gets ``lower_i * cap / sum(lower)``; if the lower
    bounds (after that) exceed the budget C, every URL gets ``lower_i * C / sum(lower)``.
    ``feasible`` is then False. Caps and the budget are never exceeded.
    """
    lo, hi, group, cap = limits.lower, limits.upper, limits.group, limits.cap
    n, n_groups = lo.size, cap.size
    grouped = np.flatnonzero(group >= 0)
    g_of = group[grouped]
    feasible = True
    fixed = np.zeros(n, dtype=bool)
    x_fixed = np.zeros(n)
    own = np.full(n_groups, -np.inf)  # log of each group's own level
    if n_groups:
        sum_lo = np.bincount(g_of, lo[grouped], minlength=n_groups)
        sum_hi = np.bincount(g_of, hi[grouped], minlength=n_groups)
        over = sum_lo > cap * (1 + _FIT_TOL)
        if over.any():
            feasible = False
            rows = grouped[over[g_of]]
            fixed[rows] = True
            x_fixed[rows] = lo[rows] * (cap / np.maximum(sum_lo, 1e-300))[group[rows]]
            own[over] = np.inf
        active = (cap < sum_hi) & ~over
        if active.any():
            rows = grouped[active[g_of]]
            gr = group[rows]

            def excess(log_level: FloatArray) -> FloatArray:
                y = np.clip(curve(np.exp(log_level[gr]), rows), lo[rows], hi[rows])
                out: FloatArray = np.bincount(gr, y, minlength=n_groups) - cap
                return out

            b, _ = _search(excess, _LOG_TINY, top, active, cap)
            own[active] = b[active]  # the side that fits
    # The global level.
    free = np.flatnonzero(~fixed)
    own_padded = np.append(own, -np.inf)  # index -1 (no group) reads the padding
    floor_level = own_padded[group[free]]

    def allocation(log_m: float) -> FloatArray:
        level = np.exp(np.maximum(floor_level, log_m))
        return np.asarray(np.clip(curve(level, free), lo[free], hi[free]), dtype=np.float64)

    fixed_sum = float(x_fixed.sum())
    x = x_fixed.copy()
    budget = capacity - fixed_sum
    min_free = float(lo[free].sum())
    if budget < min_free * (1 - _FIT_TOL) or budget <= 0:
        # The lower bounds alone exceed the budget: shrink them all to fit.
        feasible = False
        total_lo = fixed_sum + min_free
        base = x_fixed.copy()
        base[free] = lo[free]
        x = base * (capacity / total_lo) if total_lo > 0 else base
        log_m = top
    else:
        at_bottom = allocation(_LOG_TINY)
        if float(at_bottom.sum()) <= budget:
            x[free] = at_bottom
            log_m = -np.inf
        else:

            def excess_global(log_level: FloatArray) -> FloatArray:
                return np.array([float(allocation(float(log_level[0])).sum()) - budget])

            fits, too_much = _search(
                excess_global, _LOG_TINY, top, np.ones(1, dtype=bool), np.array([budget])
            )
            over_, under = float(fits[0]), float(too_much[0])
            x_hi, x_lo = allocation(over_), allocation(under)
            s_hi, s_lo = float(x_hi.sum()), float(x_lo.sum())
            share = (budget - s_hi) / (s_lo - s_hi) if s_lo > s_hi else 0.0
            x[free] = x_hi + min(max(share, 0.0), 1.0) * (x_lo - x_hi)
            log_m = over_
    level = float(np.exp(log_m)) if np.isfinite(log_m) else 0.0
    own_level = np.where(np.isfinite(own), np.exp(np.minimum(own, _LOG_HUGE)), 0.0)
    own_level[np.isposinf(own)] = np.inf
    binding = np.isfinite(own) & (own > log_m) if n_groups else np.zeros(0, dtype=bool)
    return Constrained(
        x=x,
        level=level,
        groups=limits.labels.copy(),
        group_level=own_level,
        binding=np.asarray(binding, dtype=bool),
        feasible=feasible,
    )


def _search(
    excess: Callable[[FloatArray], FloatArray],
    low: float,
    high: float,
    active: NDArray[np.bool_],
    scale: FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """For every active entry, a bracket [a, b] of log-levels around the point where
    ``excess`` (falling as the level rises) crosses 0: excess(b) <= 0 (the side that fits)
    and excess(a) > 0 (or a = ``low``, never evaluated). An entry is done when its bracket
    is narrower than ``_LOG_WIDTH`` or excess(b) is within ``_FILL_REL * scale`` of 0.
    Returns (b, a). Halvings first, then Illinois regula falsi (see the comment above
    ``_LOG_TINY``), with a halving whenever three steps did not halve the bracket."""
    size = active.size
    a = np.full(size, low)
    b = np.full(size, high)
    fa = np.full(size, np.inf)  # excess at a, known once a point has landed there
    fb = np.full(size, -np.inf)  # excess at b
    open_ = active.copy()
    moved = np.zeros(size, dtype=np.int8)  # the end moved by the last step: 1 a, -1 b
    halve = np.ones(size, dtype=bool)
    history = [b - a] * 3  # the bracket's width over the last three steps
    close = _FILL_REL * np.asarray(scale, dtype=np.float64)
    for step in range(4 * _FILL_STEPS):
        width = b - a
        open_ &= (width > _LOG_WIDTH * np.maximum(1.0, np.abs(b))) & (fb < -close)
        if not open_.any():
            break
        mid = 0.5 * (a + b)
        if step >= _HALVINGS:
            known = np.isfinite(fa) & np.isfinite(fb) & (fa > fb) & ~halve
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                secant = a + fa * width / (fa - fb)
            inside = np.clip(secant, a + 1e-3 * width, b - 1e-3 * width)
            mid = np.where(known & np.isfinite(inside), inside, mid)
        point = np.where(open_, mid, b)
        f = excess(point)
        over = open_ & (f > 0)
        under = open_ & ~(f > 0)
        # Illinois: the end kept a second time in a row counts half
        fb = np.where(over & (moved == 1), 0.5 * fb, fb)
        fa = np.where(under & (moved == -1), 0.5 * fa, fa)
        a = np.where(over, point, a)
        fa = np.where(over, f, fa)
        b = np.where(under, point, b)
        fb = np.where(under, f, fb)
        moved = np.where(over, 1, np.where(under, -1, moved)).astype(np.int8)
        history = [*history[1:], b - a]
        halve = history[-1] > 0.5 * history[0]  # three steps did not halve: halve next
    return b, a


def solve_constrained(
    r: ArrayLike,
    capacity: float,
    importance: ArrayLike | None = None,
    *,
    groups: ArrayLike | None = None,
    caps: Mapping[int, float] | None = None,
    lower: ArrayLike | None = None,
    upper: ArrayLike | None = None,
) -> Constrained:
    """The optimum under a budget, host caps and per-URL bounds, from Poisson rates r.

    ``groups``: one integer label per URL (its host; -1: none); ``caps``: label -> polls
    per slot; ``lower``/``upper``: per-URL bounds in polls per slot in [0, 1] (upper 0 is
    a paused URL). See ``constrained_fill`` for what happens when the lower bounds do not
    fit."""
    ra = np.asarray(r, dtype=np.float64)
    if ra.ndim != 1 or np.any(np.isnan(ra)) or np.any(ra < 0):
        raise ValueError("rates must be a 1-D array of non-negative numbers")
    if not math.isfinite(capacity) or capacity <= 0:
        raise ValueError("capacity must be a positive number")
    limits = Limits.build(ra.size, groups, caps, lower, upper)
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
    groups: ArrayLike | None = None,
    caps: Mapping[int, float] | None = None,
    lower: ArrayLike | None = None,
    upper: ArrayLike | None = None,
) -> FloatArray:
    """``optimal_allocation`` under host caps and per-URL bounds (see ``solve_constrained``).

    Without any constraint it is ``optimal_allocation`` itself (the same numbers)."""
    pa = _checked_problem(p, capacity)
    if groups is None and caps is None and lower is None and upper is None:
        return optimal_allocation(pa, capacity, importance)
    if importance is not None:
        _checked_weights(importance, pa)
    solved = solve_constrained(
        change_rates(pa),
        capacity,
        importance,
        groups=groups,
        caps=caps,
        lower=lower,
        upper=upper,
    )
    return solved.x


def constrained_limit(
    p: ArrayLike,
    capacity: float,
    importance: ArrayLike | None = None,
    *,
    groups: ArrayLike | None = None,
    caps: Mapping[int, float] | None = None,
    lower: ArrayLike | None = None,
    upper: ArrayLike | None = None,
    model: Literal["overwrite", "disappear"] = "overwrite",
) -> float:
    """``limit`` under host caps and per-URL bounds: the expected (weighted) hits per slot
    of the best policy that respects them.

    Overwrite: the value of the constrained optimum under regular polling. Disappear: the
    problem is linear (a poll of URL i is worth w_i p_i whenever it happens), so the greedy
    fill by w_i p_i is optimal (the caps nest inside the budget: a laminar family, for
    which greedy is exact): every URL first gets its lower bound, then the most valuable
    URLs get up to their upper bound while their host's cap and the budget last."""
    pa = _checked_problem(p, capacity)
    w = np.ones_like(pa) if importance is None else _checked_weights(importance, pa)
    if model == "overwrite":
        x = constrained_allocation(
            pa,
            capacity,
            importance,
            groups=groups,
            caps=caps,
            lower=lower,
            upper=upper,
        )
        return expected_hits(x, pa, importance)
    limits = Limits.build(pa.size, groups, caps, lower, upper)
    x = _greedy_linear(w * pa, float(capacity), limits)
    return float(np.sum(w * pa * x))


def _greedy_linear(value: FloatArray, capacity: float, limits: Limits) -> FloatArray:
    """Maximize sum(value x) under the caps, budget and bounds: lower bounds first (scaled
    like ``constrained_fill`` scales them when they do not fit), then the rest in order of
    value, each URL up to its upper bound while its host's cap and the budget last."""
    x = fitted_lower(limits, capacity)
    grouped = limits.group >= 0
    room_group = limits.cap - np.bincount(
        limits.group[grouped], x[grouped], minlength=limits.cap.size
    )
    room = capacity - float(x.sum())
    for i in np.argsort(-value, kind="stable").tolist():
        if room <= 1e-15 or value[i] <= 0:
            break
        g = int(limits.group[i])
        extra = min(float(limits.upper[i] - x[i]), room)
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
        over = sum_lo > limits.cap * (1 + _FIT_TOL)
        rows = grouped[over[g_of]]
        x[rows] *= (limits.cap / np.maximum(sum_lo, 1e-300))[limits.group[rows]]
    total = float(x.sum())
    if total > capacity * (1 + _FIT_TOL):
        x *= capacity / total
    return x


def constrained_whole_slot_limit(
    p: ArrayLike,
    capacity: float,
    importance: ArrayLike | None = None,
    *,
    groups: ArrayLike | None = None,
    caps: Mapping[int, float] | None = None,
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
    pa = _checked_problem(p, capacity)
    w = np.ones_like(pa) if importance is None else _checked_weights(importance, pa)
    weights = None if importance is None or np.all(w == w[0]) else w
    r = change_rates(pa)
    limits = Limits.build(pa.size, groups, caps)
    curve, top = optimum_curve(r, weights)
    solved = constrained_fill(curve, top, float(capacity), limits)
    own = np.append(solved.group_level, 0.0)[limits.group]
    level_row = np.maximum(own, solved.level)
    if weights is None:  # equal weights w0: levels are u, the marginal value is w0 g(u)
        w0 = float(w[0]) if w.size else 1.0
        marg_row = w0 * _marginal_gain(np.minimum(level_row, 700.0))
        m = w0 * float(_marginal_gain(np.array([min(solved.level, 700.0)]))[0])
        own_m = w0 * _marginal_gain(np.minimum(solved.group_level, 700.0))
    else:
        marg_row, m, own_m = level_row, solved.level, solved.group_level
    mu = np.maximum(own_m - m, 0.0)
    finite_cap = np.isfinite(limits.cap)
    fractional = expected_hits(solved.x, pa, w)

    def dual(t: float) -> float:
        c = np.minimum(t * marg_row / w, 1.0)
        u = fast_inverse_gain(np.minimum(c, 1.0 - 1e-12))
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
