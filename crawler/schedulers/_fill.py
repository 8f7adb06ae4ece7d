"""The optimum under politeness caps and per-URL bounds: ``constrained_fill``.

Kolobov et al., "Optimal freshness crawl under politeness constraints" (SIGIR 2019): with
a global budget C, a cap K_h on the polls per slot of each host h and bounds
lower_i <= x_i <= upper_i, the KKT conditions of the concave problem say that every URL
sits where its marginal value w_i g(r_i / x_i) equals the global multiplier m plus its
host's multiplier mu_h >= 0, clipped to its bounds. A host's own level (the level at which
its URLs, alone, fill its cap) does not depend on m, so the solution is found in two
passes: (1) each host's own level, by a root search run on all hosts at once (one
bincount per step); (2) the global level m, by the same search, each URL taking the
larger of m and its host's own level. Each step is O(n), so the cost is O(n) times a
constant, near-linear like the paper's O(n log n) sort, and the same code serves every
concave curve (equal weights, importance weights, the generic projection of the
schedulers). The search (``_search``) works on the logarithm of the level: 12 halvings
bring the 1,381-wide range below 0.4, then regula falsi with the Illinois rule
(superlinear on these monotone fills) narrows every bracket to 1e-13, with a halving
after any step that failed to halve its bracket, so it is never much slower than
bisection. It replaced 64-step bisections (about 130 fill evaluations per solve); see
benchmarks/scheduler_speed.py for the figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from crawler.schedulers._lagrange import inverse_gain
from crawler.schedulers._limits import Constrained, Limits

FloatArray = NDArray[np.float64]
IndexArray = NDArray[np.intp]
BoolArray = NDArray[np.bool_]

_LOG_TINY = math.log(1e-300)
_LOG_HUGE = math.log(1e300)
_FILL_STEPS = 64  # the log-level range is 1,381 wide: 64 halvings reach 1e-16
_HALVINGS = 12  # plain halvings before the Illinois steps: the range is then < 0.4 wide
_LOG_WIDTH = 1e-13  # a bracket this narrow (relative, in log-level) is done
_FILL_REL = 1e-12  # or a fill this close to its target (relative to the target)
_HINT_WIDTH = 0.1  # a re-solve first looks for each level within 10% of the last one
HINT_STEPS = 12  # and stops a host's search there after this many evaluations
#: caps and budgets are met to this relative tolerance
FIT_TOL = 1e-9


class Curve:
    """The frequencies x_i = r_i / u_i of some rows at a level: equal weights (``importance``
    None), u is the level itself; weights, u solves w_i g(u) = level (x = 0 once the level
    reaches w_i: such a URL is not worth a poll). ``subset`` gathers the rows once, so that
    the many evaluations of a solve do not gather them again."""

    def __init__(self, r: FloatArray, importance: FloatArray | None = None) -> None:
        self.r = r
        self.importance = importance

    def subset(self, rows: IndexArray) -> Curve:
        w = None if self.importance is None else self.importance[rows]
        return Curve(self.r[rows], w)

    def __call__(self, level: FloatArray) -> FloatArray:
        if self.importance is None:
            # levels are positive and finite: r / level is never NaN
            with np.errstate(over="ignore"):
                out: FloatArray = self.r / level
            return out
        u = inverse_gain(level / self.importance)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            x = np.where(np.isfinite(u), self.r / u, 0.0)
        return np.nan_to_num(x, nan=0.0, posinf=np.inf)


def optimum_curve(r: FloatArray, importance: FloatArray | None) -> tuple[Curve, float]:
    """The optimum's frequency x_i at a level, and the top of the level range.

    Equal weights: the level is u and x = r / u. Weights: the level is the marginal value
    m and x = r / u with w g(u) = m (0 once m >= w: such a URL is not worth a poll)."""
    if importance is None:
        return Curve(r), _LOG_HUGE
    return Curve(r, importance), math.log(float(importance.max())) if importance.size else 0.0


def proportional_curve(values: FloatArray) -> tuple[Curve, float]:
    """x = v / level: the constrained projection of a wanted allocation v (the largest
    allocation proportional to v, clipped to the bounds, that fits the caps and budget)."""
    return Curve(values), _LOG_HUGE


def _clip(y: FloatArray, lo: FloatArray | None, hi: FloatArray) -> FloatArray:
    """np.clip(y, lo, hi) in place (lo None: all 0 and y >= 0, nothing to raise)."""
    if lo is not None:
        np.maximum(y, lo, out=y)
    np.minimum(y, hi, out=y)
    return y


def constrained_fill(
    curve: Curve,
    top: float,
    capacity: float,
    limits: Limits,
    *,
    group_level: FloatArray | None = None,
    level_hint: float = 0.0,
    hint_steps: int | None = HINT_STEPS,
) -> Constrained:
    """The allocation x_i = clip(curve_i(max(m, l_h)), lower_i, upper_i), where each host's
    level l_h makes it fill its cap alone and the global level m makes sum(x) = C (m at the
    bottom of the range when even that leaves budget over). ``curve`` must fall as the
    level rises; ``top`` is the logarithm of the level where every curve is at its lowest.

    Lower bounds that do not fit are scaled down: in a host whose cap is below the sum of
    its URLs' lower bounds, each URL gets ``lower_i * cap / sum(lower)``; if the lower
    bounds (after that) exceed the budget C, every URL gets ``lower_i * C / sum(lower)``.
    ``feasible`` is then False. Caps and the budget are never exceeded.

    ``group_level``/``level_hint``: the hosts' own levels (``Constrained.group_level``)
    and the global level of an earlier solve under the same limits: each search starts
    in a bracket of +-10% around its earlier level when the new one lies there (after the
    rates moved a little: a few evaluations instead of about 20 or 60). A host's search
    that starts there stops after ``hint_steps`` evaluations (its bracket is then about
    1e-4 wide, and the side that fits stands); None: it runs to full precision, as the
    searches without a hint do.
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
        over = sum_lo > cap * (1 + FIT_TOL)
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
            sub, lo_rows, hi_rows = curve.subset(rows), lo[rows], hi[rows]
            floor_rows = lo_rows if lo_rows.any() else None

            def excess(log_level: FloatArray, open_: BoolArray | None = None) -> FloatArray:
                """Each group's fill minus its cap (only the ``open_`` groups' are right:
                once most groups are done, only the rows of the others are evaluated)."""
                level = np.exp(log_level)
                pick = None if open_ is None else np.flatnonzero(open_[gr])
                if pick is None or 2 * pick.size > gr.size:
                    y = _clip(sub(level[gr]), floor_rows, hi_rows)
                    return np.asarray(np.bincount(gr, y, minlength=n_groups) - cap)
                g = gr[pick]
                lo_pick = None if floor_rows is None else floor_rows[pick]
                y = _clip(sub.subset(pick)(level[g]), lo_pick, hi_rows[pick])
                return np.asarray(np.bincount(g, y, minlength=n_groups) - cap)

            low: float | FloatArray = _LOG_TINY
            high: float | FloatArray = top
            ends: tuple[FloatArray, FloatArray] | None = None
            first: int | NDArray[np.int_] = _HALVINGS
            steps: int | NDArray[np.int_] = 4 * _FILL_STEPS
            if group_level is not None:
                # each host's search starts within _HINT_WIDTH of its earlier level when
                # its new level lies there (the rest search the whole range)
                with np.errstate(divide="ignore"):
                    hint = np.log(group_level)
                near_lo, near_hi = hint - _HINT_WIDTH, hint + _HINT_WIDTH
                usable = active & np.isfinite(hint) & (near_lo > _LOG_TINY) & (near_hi < top)
                f_lo = excess(np.where(usable, near_lo, 0.0))
                f_hi = excess(np.where(usable, near_hi, 0.0))
                inside = usable & (f_lo > 0) & (f_hi <= 0)
                low = np.where(inside, near_lo, _LOG_TINY)
                high = np.where(inside, near_hi, top)
                ends = (np.where(inside, f_lo, np.inf), np.where(inside, f_hi, -np.inf))
                first = np.where(inside, 0, _HALVINGS)
                # 0.2 wide, a bracket is 1e-4 wide (in log-level) after 12 steps: enough
                # between scheduled re-solves, and the side that fits stands (caps hold)
                most = 4 * _FILL_STEPS
                steps = np.where(inside, most if hint_steps is None else hint_steps, most)
            b, _ = _search(
                excess,
                low,
                high,
                active,
                cap,
                halvings=first,
                ends=ends,
                by_entry=True,
                steps=steps,
            )
            own[active] = b[active]  # the side that fits
    # The global level.
    free = np.flatnonzero(~fixed)
    own_padded = np.append(own, -np.inf)  # index -1 (no group) reads the padding
    # exp(-inf) = 0: no floor; one exp a host, then gathered (not one a row: 20 ms a solve
    # at a million rows)
    floor_level = np.exp(own_padded)[group[free]]
    whole = free.size == n
    sub_free = curve if whole else curve.subset(free)
    lo_free, hi_free = (lo, hi) if whole else (lo[free], hi[free])
    floor_free = lo_free if lo_free.any() else None

    def allocation(log_m: float) -> FloatArray:
        # exp is increasing: exp(max(a, b)) is max(exp(a), exp(b)), without n exps a call
        level = np.maximum(floor_level, math.exp(log_m))
        return _clip(sub_free(level), floor_free, hi_free)

    fixed_sum = float(x_fixed.sum())
    x = x_fixed.copy()
    budget = capacity - fixed_sum
    min_free = float(lo[free].sum())
    if budget < min_free * (1 - FIT_TOL) or budget <= 0:
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

            one, target = np.ones(1, dtype=bool), np.array([budget])
            near = _near(excess_global, level_hint, top)
            if near is not None:
                low, high, ends = near
                fits, too_much = _search(
                    excess_global, low, high, one, target, halvings=0, ends=ends
                )
            else:
                fits, too_much = _search(excess_global, _LOG_TINY, top, one, target)
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


def _near(
    excess: Callable[[FloatArray], FloatArray], hint: float, top: float
) -> tuple[float, float, tuple[FloatArray, FloatArray]] | None:
    """A bracket of log-levels within _HINT_WIDTH of ``hint`` around the crossing of the
    global ``excess`` (the side below over, the side above fitting), with the excess at both
    ends; None when there is no hint or the crossing lies outside."""
    if not hint > 0 or not math.isfinite(hint):
        return None
    low, high = math.log(hint) - _HINT_WIDTH, math.log(hint) + _HINT_WIDTH
    if low <= _LOG_TINY or high >= top:
        return None
    f_low, f_high = excess(np.array([low])), excess(np.array([high]))
    if not (f_low[0] > 0 >= f_high[0]):
        return None
    return low, high, (f_low, f_high)


def _search(
    excess: Callable[..., FloatArray],
    low: float | FloatArray,
    high: float | FloatArray,
    active: NDArray[np.bool_],
    scale: FloatArray,
    *,
    halvings: int | NDArray[np.int_] = _HALVINGS,
    ends: tuple[FloatArray, FloatArray] | None = None,
    by_entry: bool = False,
    steps: int | NDArray[np.int_] = 4 * _FILL_STEPS,
) -> tuple[FloatArray, FloatArray]:
    """For every active entry, a bracket [a, b] of log-levels around the point where
    ``excess`` (falling as the level rises) crosses 0: excess(b) <= 0 (the side that fits)
    and excess(a) > 0 (or a = ``low``, never evaluated). An entry is done when its bracket
    is narrower than ``_LOG_WIDTH`` or excess(b) is within ``_FILL_REL * scale`` of 0.
    Returns (b, a). ``halvings`` halvings first (per entry or for all), then Illinois
    regula falsi (see the module docstring), with a halving whenever three steps did not
    halve the bracket. ``low``/``high``: the bracket to start from (per entry or for all);
    ``ends``: the excess at both ends where known (inf / -inf where not): a narrow bracket
    around an earlier solution needs no halving first. ``by_entry``: ``excess`` takes the
    mask of the entries still open as a second argument (and may skip the others).
    ``steps``: at most this many evaluations per entry (then its fitting side stands)."""
    size = active.size
    a = np.broadcast_to(np.asarray(low, dtype=np.float64), (size,)).copy()
    b = np.broadcast_to(np.asarray(high, dtype=np.float64), (size,)).copy()
    first = np.broadcast_to(np.asarray(halvings), (size,))
    fa = np.full(size, np.inf)  # excess at a, known once a point has landed there
    fb = np.full(size, -np.inf)  # excess at b
    if ends is not None:
        fa, fb = ends[0].astype(np.float64), ends[1].astype(np.float64)
    open_ = active.copy()
    moved = np.zeros(size, dtype=np.int8)  # the end moved by the last step: 1 a, -1 b
    halve = ~(np.isfinite(fa) & np.isfinite(fb))
    earliest = int(first.min()) if size else 0
    limit = np.broadcast_to(np.asarray(steps), (size,))
    history = [b - a] * 3  # the bracket's width over the last three steps
    close = _FILL_REL * np.asarray(scale, dtype=np.float64)
    for step in range(4 * _FILL_STEPS):
        width = b - a
        open_ &= (width > _LOG_WIDTH * np.maximum(1.0, np.abs(b))) & (fb < -close)
        open_ &= step < limit
        if not open_.any():
            break
        mid = 0.5 * (a + b)
        if step >= earliest:
            known = np.isfinite(fa) & np.isfinite(fb) & (fa > fb) & ~halve & (step >= first)
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                secant = a + fa * width / (fa - fb)
            inside = np.clip(secant, a + 1e-3 * width, b - 1e-3 * width)
            mid = np.where(known & np.isfinite(inside), inside, mid)
        point = np.where(open_, mid, b)
        f = excess(point, open_) if by_entry else excess(point)
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
