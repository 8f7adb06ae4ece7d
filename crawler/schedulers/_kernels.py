"""Compiled loops (numba) of the passes that bound a constrained slot's cost at a million URLs.

Why loops are written here by hand: NumPy runs each operation as its own pass, and these
chain several over the same rows or sort where a count does. The stride step was a pass to
add the step, one to find the due rows, and gathers to split them by host and rank them
(``step_and_due``: one pass); the guard's host-credit rule a stable sort of the picks by
host (``within_credit``: one loop with a counter per host); a capped host's best due rows a
sort of all such rows (``best_of_groups``: each host's best kept as the rows come); the
refill's pool a pass and three masks over every row (``open_above``: two passes without a
branch); the polled rows' update about thirty operations on them (``learn_rows``), and
their new x with the per-host sums about twenty more (``place_rows``); the guard's checks of
a slot's picks a bitmap gather, a binary search and two masks of every row
(``allowed_picks``: one pass over the picks), and the held hosts' waiting credit a gather,
a minimum and a scatter (``hold_credit``). Each gives exactly
what the NumPy form gave (tests/schedulers/test_kernels.py and the fast-path picks test),
so the picks are the same to the last row. Measured at a million URLs on 2 cores,
2026-11-28 (docs/results.md): the unconstrained select 3.6-4.7 ms -> 2.8-3.2 ms in
alternating slots; under the heavy mix the slot 28.2-28.4 -> 18.7-19.7 ms.

The cost is numba itself: 208 MB installed with llvmlite, and 0.6 s of CPU to import. It is
imported at a kernel's first call, not with this module, so a command that runs no slot
does not pay it; each kernel is compiled then and cached on disk beside this module
(numba's ``cache=True``; where that is not writable, in the user's cache directory, and
with neither, not at all): a process's first slot pays 0.7 s for the import and the cached
code, 2.2 s when it compiles.
An earlier measurement on a more loaded machine found the step's loop no faster than NumPy
and did not take numba; the loops here were measured against the NumPy they replace in
alternating slots of one process, where the machine's noise falls on both alike.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
from numpy.typing import NDArray

F = TypeVar("F", bound=Callable[..., Any])


#: the scalar functions the kernels call (``_helper``), by name
_HELPERS: dict[str, Callable[..., Any]] = {}


def _helper(function: F) -> F:
    """A scalar function that kernels call: plain Python until a kernel first compiles,
    then replaced in this module by its numba form, which the kernels' code calls."""
    _HELPERS[function.__name__] = function
    return function


def _njit(function: Callable[..., Any]) -> Callable[..., Any]:
    """numba's compiled form of ``function``, cached on disk where a cache directory is
    writable, else compiled in each process; NumPy's error model (a division by zero gives
    inf or NaN, as in NumPy)."""
    import numba

    try:
        return numba.njit(cache=True, error_model="numpy")(function)
    except RuntimeError:  # no writable cache directory
        return numba.njit(error_model="numpy")(function)


def _compile_helpers() -> None:
    """Put the numba form of every ``_helper`` function in this module's namespace, where
    numba looks up the names a kernel calls when it compiles the kernel."""
    namespace = globals()
    for name, function in _HELPERS.items():
        if namespace[name] is function:
            namespace[name] = _njit(function)


def _compiled(function: F) -> F:
    """``function`` compiled by numba at its first call, typed as it was (numba's decorator
    is untyped). numba is imported then, not with this module: its import costs 0.6 s of
    CPU (2026-11-28), which a command that runs no slot should not pay."""
    compiled: Callable[..., Any] | None = None

    @functools.wraps(function)
    def call(*args: Any) -> Any:
        nonlocal compiled
        if compiled is None:
            _compile_helpers()
            compiled = _njit(function)
        return compiled(*args)

    return cast(F, call)


@_helper
def half_to_float(bits: int) -> float:
    """The value of the IEEE 754 half-precision float whose bits are ``bits`` (what NumPy's
    float16 gives). numba has no float16 on the CPU, so a kernel reads a float16 column
    through its ``uint16`` view and converts here: the gather, conversion and scatter
    around the kernel in NumPy cost more than the kernel's work on the rows."""
    exponent = (bits >> 10) & 0x1F
    fraction = bits & 0x3FF
    if exponent == 0:  # zero or subnormal
        value = math.ldexp(float(fraction), -24)
    elif exponent == 31:
        value = math.inf if fraction == 0 else math.nan
    else:
        value = math.ldexp(float(fraction + 1024), exponent - 25)
    return -value if bits & 0x8000 else value


@_helper
def float_to_half(value: float) -> int:
    """The bits of the half-precision float nearest ``value``, ties to even, as NumPy's
    ``astype(np.float16)`` of a float64 gives them (inf beyond the largest, 65504; NaN as
    NumPy's quiet NaN)."""
    sign = 0x8000 if math.copysign(1.0, value) < 0 else 0
    if math.isnan(value):
        return sign | 0x7E00
    magnitude = abs(value)
    if magnitude == math.inf:
        return sign | 0x7C00
    if magnitude < 0.00006103515625:  # below 2^-14: a multiple of 2^-24, or the least normal
        return sign | int(np.rint(magnitude * 16777216.0))
    fraction, exponent = math.frexp(magnitude)  # magnitude = fraction 2^exponent, [0.5, 1)
    whole = np.rint(fraction * 2048.0)  # exact: a power of two scales it
    if whole == 2048.0:
        whole = 1024.0
        exponent += 1
    if exponent > 16:
        return sign | 0x7C00
    return sign | ((exponent + 14) << 10) | (int(whole) - 1024)


@_compiled
def step_and_due(
    credit: NDArray[np.float32],
    x: NDArray[np.float32],
    factor: np.float32,
    clip: bool,
    group: NDArray[Any],
    held: NDArray[np.bool_],
) -> tuple[NDArray[np.intp], NDArray[np.float32], NDArray[np.intp]]:
    """The stride step: ``credit += x * factor`` (each step at most 1 when ``clip``; NaN
    stays NaN), in float32. Returns the rows whose credit is then >= 1, ascending, split
    by whether their group is ``held`` (index by group; a row of no group, -1, is not
    held; an empty ``held`` holds none): the others with the key of their rank,
    ``credit + x * factor`` (the credit after one more step, unclipped), then the held
    ones.

    The pass over all rows has no branch on which rows come due: it stores every row's
    index and advances past it only when the row is due. Which rows come due is close to
    random, so a branch on it was mispredicted about once per due row, and in the crest
    of a wave of due rows (5-20 % of the rows) that cost more than the pass itself. The
    keys and the split by host are then taken over the due rows alone. At a million rows
    (2026-11-28, one process): 0.49-0.56 ms at 1.3-6.6 % of the rows due, against
    0.72-1.57 ms with the branch and 0.60-0.65 ms storing each row's key as well."""
    n = credit.size
    due = np.empty(n + 1, dtype=np.intp)
    count = 0
    for i in range(n):
        step = x[i] * factor
        value = credit[i] + (np.float32(1.0) if clip and step > 1.0 else step)
        credit[i] = value
        due[count] = i
        count += value >= 1.0
    free = np.empty(count, dtype=np.intp)
    key = np.empty(count, dtype=np.float32)
    waiting = np.empty(count + 1, dtype=np.intp)
    some_held = held.size > 0
    count_free = count_held = 0
    for j in range(count):
        i = due[j]
        g = group[i] if some_held else -1
        if g >= 0 and held[g]:
            waiting[count_held] = i
            count_held += 1
        else:
            free[count_free] = i
            key[count_free] = credit[i] + x[i] * factor
            count_free += 1
    return free[:count_free].copy(), key[:count_free].copy(), waiting[:count_held].copy()


@_compiled
def within_credit(
    order: NDArray[np.intp],
    group: NDArray[Any],
    credit: NDArray[np.float64],
    limit: int,
) -> NDArray[np.bool_]:
    """Which rows of ``order`` their group's credit lets in: in order, at most
    floor(credit + 1e-9) rows of each group whose credit is not +inf (none where it is NaN;
    a row of no group, -1, or of an uncapped one, credit +inf, always passes), at most
    ``limit`` in all.
    ``credit`` is lowered by the rows kept."""
    keep = np.zeros(order.size, dtype=np.bool_)
    kept = np.zeros(credit.size, dtype=np.int64)
    total = 0
    for j in range(order.size):
        if total >= limit:
            break
        g = group[order[j]]
        if g >= 0 and credit[g] != np.inf:
            if not kept[g] < np.floor(credit[g] + 1e-9):  # NaN credit: none
                continue
            kept[g] += 1
        keep[j] = True
        total += 1
    for g in range(credit.size):
        if kept[g]:
            credit[g] -= kept[g]
    return keep


@_compiled
def open_above(
    credit: NDArray[Any],
    floor: Any,
    any_credit: bool,
    taken: NDArray[np.bool_],
    group: NDArray[Any],
    open_groups: NDArray[np.bool_],
) -> NDArray[np.intp]:
    """The rows, ascending, whose credit is >= ``floor`` (every row when ``any_credit``),
    not ``taken``, and whose group is open (``open_groups``: per group, then one last
    entry for the rows of no group, -1; empty: every group open). Two passes without a
    branch on the tests, the second over the rows the first kept: a few percent of the
    rows pass the first test, at random, and a branch's mispredictions cost more than
    the rest of a pass (at a million rows 1.2 ms against 1.9 ms with branches and
    2.8 ms in NumPy, on a refill's state under the heavy mix)."""
    n = credit.size
    above = np.empty(n + 1, dtype=np.intp)
    count = 0
    for i in range(n):
        above[count] = i
        count += any_credit | (credit[i] >= floor)
    out = np.empty(count + 1, dtype=np.intp)
    check_groups = open_groups.size > 0
    kept = 0
    for j in range(count):
        i = above[j]
        ok = not taken[i]
        if check_groups:
            ok &= open_groups[group[i]]  # -1 takes the last entry: no group, open
        out[kept] = i
        kept += ok
    return out[:kept].copy()


@_compiled
def best_of_groups(
    due: NDArray[np.intp],
    rate: NDArray[np.float32],
    last: NDArray[np.int32],
    slot: int,
    group: NDArray[Any],
    allowance: NDArray[np.float64],
) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
    """Of rows ``due``, the best ``allowance`` of each group by the key ``rate * (slot -
    last)`` (the largest first, the earlier of equal keys, NaN last; a group's allowance
    is a whole number or +inf; NaN or below 1: none; a row of no group, -1, always
    passes). Returns which rows pass and every row's key: what a stable sort of all the
    rows by key, then the first ``allowance`` of each group, gives, without the sort."""
    m = due.size
    key = np.empty(m, dtype=np.float64)
    groups = allowance.size
    count = np.zeros(groups + 1, dtype=np.int64)
    for j in range(m):
        row = due[j]
        key[j] = np.float64(rate[row]) * np.float64(slot - last[row])
        count[group[row]] += 1  # -1 counts in the last entry
    # each group's room: its allowance, or all of its rows when they fit
    room = np.zeros(groups + 1, dtype=np.int64)
    for g in range(groups):
        a = allowance[g]
        if a >= count[g]:
            room[g] = count[g]
        elif a >= 1:
            room[g] = np.int64(a)
    start = np.zeros(groups + 2, dtype=np.int64)
    for g in range(groups):
        start[g + 1] = start[g] + room[g]
    best = np.empty(start[groups], dtype=np.int64)  # positions in due, by group
    filled = np.zeros(groups, dtype=np.int64)
    passes = np.zeros(m, dtype=np.bool_)
    for j in range(m):
        g = group[due[j]]
        if g < 0:
            passes[j] = True
            continue
        size = room[g]
        if size == 0:
            continue
        if size == count[g]:
            passes[j] = True
            continue
        # insert j after every kept entry that ranks at or before it
        base, n = start[g], filled[g]
        k = key[j]
        at = n
        while at > 0:
            other = key[best[base + at - 1]]
            if k > other or (np.isnan(other) and not np.isnan(k)):
                at -= 1
            else:
                break
        if at >= size:
            continue
        stop = min(n, size - 1)
        for q in range(stop, at, -1):
            best[base + q] = best[base + q - 1]
        best[base + at] = j
        filled[g] = min(n + 1, size)
    for g in range(groups):
        if room[g] < count[g]:
            for q in range(filled[g]):
                passes[best[start[g] + q]] = True
    return passes, key


@_compiled
def learn_rows(
    rows: NDArray[np.intp],
    hits: NDArray[np.bool_],
    tau: NDArray[np.float32],
    ago: NDArray[np.float32],
    columns: tuple[NDArray[np.float32], ...],
    surge: NDArray[np.uint16],
    slump: NDArray[np.uint16],
    forget: np.float32,
    priors: tuple[float, float],
    shift: tuple[float, float, np.float32],
    drop: tuple[float, float, np.float32],
    probe: float,
) -> tuple[NDArray[np.float32], ...]:
    """``bayes``'s update of its polled rows, as its NumPy form computes it (see
    ``BayesRate._update_rows_numpy``), in one loop over the rows: the intervals ``tau``,
    the ages ``ago`` (empty: none), the statistics ``columns`` (hit time, miss time, hit
    count, miss count, rate: gathered, updated and scattered back), the CUSUM statistics
    ``surge`` and ``slump`` of the rows (empty: that test is off; updated in place),
    ``forget``, ``priors`` (hits, misses), ``shift`` and ``drop`` (factor, threshold,
    keep), ``probe`` (at most 1: off). Returns the new hit time, miss time, hit count, miss
    count and rate (float32), the old rate, and whether each row had an observation (as
    float32 1 / 0). ``surge`` and ``slump`` are the float16 columns of all rows, through
    their ``uint16`` view (``half_to_float``), or empty: that test is off."""
    m = rows.size
    hit_time, miss_time, hit_count, miss_count, rhat = columns
    out = np.empty((7, m), dtype=np.float32)
    old = np.empty((5, m), dtype=np.float32)
    test_shift, test_drop, aged = surge.size > 0, slump.size > 0, ago.size > 0
    tests = np.zeros((2, m), dtype=np.uint16)  # the rows' CUSUM statistics, as float16 bits
    # the gathers first, in a loop of their own: its loads overlap from row to row, where
    # a row's arithmetic between them (logarithms, a division) held them back
    for j in range(m):
        row = rows[j]
        old[0, j], old[1, j] = hit_time[row], miss_time[row]
        old[2, j], old[3, j], old[4, j] = hit_count[row], miss_count[row], rhat[row]
        if test_shift:
            tests[0, j] = surge[row]
        if test_drop:
            tests[1, j] = slump[row]
    prior_hits, prior_misses = priors
    shift_k, shift_threshold, shift_keep = shift
    drop_k, drop_threshold, drop_keep = drop
    one = np.float32(1.0)
    for j in range(m):
        t = tau[j]
        old_a, old_b, old_h, old_mc, old_rate = (
            old[0, j],
            old[1, j],
            old[2, j],
            old[3, j],
            old[4, j],
        )
        seen = (old_h + old_mc) > 0
        hit = hits[j]
        shifted = dropped = False
        if test_shift or test_drop:
            rt = float(np.float64(old_rate) * np.float64(t))
            if not (rt >= 1e-12 or np.isnan(rt)):
                rt = 1e-12
            if test_shift:
                k = shift_k
                ratio = (
                    np.log(-np.expm1(-k * rt)) - np.log(-np.expm1(-rt)) if hit else -(k - 1.0) * rt
                )
                s = half_to_float(tests[0, j]) + ratio
                if not (s >= 0.0 or np.isnan(s)):
                    s = 0.0
                shifted = s > shift_threshold and seen
                tests[0, j] = float_to_half(0.0 if shifted else s)
            if test_drop:
                k = drop_k
                ratio = (
                    np.log(-np.expm1(-k * rt)) - np.log(-np.expm1(-rt)) if hit else (1.0 - k) * rt
                )
                s = half_to_float(tests[1, j]) + ratio
                if not (s >= 0.0 or np.isnan(s)):
                    s = 0.0
                if s > 6e4:
                    s = 6e4
                dropped = s > drop_threshold and seen
                tests[1, j] = float_to_half(0.0 if dropped else s)
        h_in = one if hit else np.float32(0.0)
        miss = one - h_in
        a = old_a * forget + t * h_in
        b = old_b * forget + t * miss
        h = old_h * forget + h_in
        mc = old_mc * forget + miss
        if aged:
            c = ago[j]
            if hit and c < t:
                point = min(t - c, one)
                a = a - (t - point)
                b = b + c
                if c > 0:
                    mc = mc + one
        if shifted:
            b = b - old_b * forget * (one - shift_keep)
            mc = mc - old_mc * forget * (one - shift_keep)
        if dropped:
            a = a - old_a * forget * (one - drop_keep)
            h = h - old_h * forget * (one - drop_keep)
        count = np.float64(h) + np.float64(mc)
        if count > 0:
            a64, b64 = np.float64(a), np.float64(b)
            mean_tau = (a64 + b64) / count
            a_prior = a64 + prior_hits * mean_tau
            b_prior = b64 + prior_misses * mean_tau
            rate = np.log1p(a_prior / b_prior) * (np.float64(h) + prior_hits) / a_prior
        else:
            rate = np.nan
        if probe > 1.0 and mc < np.float32(0.05):
            rate *= min(np.exp2(np.float64(h)), probe)
        out[0, j], out[1, j], out[2, j], out[3, j] = a, b, h, mc
        out[4, j], out[5, j], out[6, j] = np.float32(rate), old_rate, one if seen else 0.0
    for j in range(m):  # the scatters, in a loop of their own as the gathers
        row = rows[j]
        hit_time[row], miss_time[row] = out[0, j], out[1, j]
        hit_count[row], miss_count[row], rhat[row] = out[2, j], out[3, j], out[4, j]
        if test_shift:
            surge[row] = tests[0, j]
        if test_drop:
            slump[row] = tests[1, j]
    return out[0], out[1], out[2], out[3], out[4], out[5], out[6]


@_compiled
def place_rows(
    rows: NDArray[np.intp],
    rate: NDArray[np.float32],
    group: NDArray[Any],
    level_of: NDArray[np.float64],
    bounds: tuple[NDArray[np.uint8], NDArray[np.intp], NDArray[np.float64], NDArray[np.float64]],
    x: NDArray[np.float32],
    host_sum: NDArray[np.float64],
    host_moving: NDArray[np.float64],
) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.float64], NDArray[np.float64]]:
    """The polled ``rows``' new x at the level of their group (``group``: each row's,
    every one >= 0; ``level_of``: per group, > 0 or not), ``rate / level`` (0 at an
    infinite level, 1 at a level <= 0), clipped to the row's bounds (``bounds``: the bitmap
    of the bounded rows, the bounded rows sorted, their lower and upper bounds; a NaN goes
    to the lower bound), stored in ``x``. The per-group sums of x, and of the x below 1 of
    the rows without a bound, lose the rows' old x and gain their new x: each as a
    bincount of the rows then added, as ``BayesRate._add_sums`` does. Returns the old and
    the new x, and each row's lower and upper bound."""
    m = rows.size
    bits, bounded, lower, upper = bounds
    old_x = np.empty(m, dtype=np.float32)
    new_x = np.empty(m, dtype=np.float32)
    lo = np.zeros(m)
    hi = np.ones(m)
    check = bounded.size > 0
    for j in range(m):
        row = rows[j]
        if check and (bits[row >> 3] >> (row & 7)) & 1:
            at = np.searchsorted(bounded, row)
            lo[j], hi[j] = lower[at], upper[at]
        u = level_of[group[j]]
        if u > 0 and np.isfinite(u):
            v = np.float64(rate[j]) / u
        elif u > 0:
            v = 0.0
        else:
            v = 1.0
        if not v >= lo[j]:  # NumPy's fmax: the bound where v is below it or NaN
            v = lo[j]
        if v > hi[j]:
            v = hi[j]
        old_x[j] = x[row]
        new_x[j] = np.float32(v)
        x[row] = new_x[j]
    size = host_sum.size
    for xs, sign in ((old_x, -1.0), (new_x, 1.0)):
        part_sum = np.zeros(size)
        part_moving = np.zeros(size)
        for j in range(m):
            g = group[j]
            signed = np.float64(xs[j]) * sign
            part_sum[g] += signed
            moving = xs[j] < np.float32(1.0) and lo[j] <= 0 and hi[j] >= 1
            part_moving[g] += signed if moving else 0.0
        for g in range(size):
            host_sum[g] += part_sum[g]
            host_moving[g] += part_moving[g]
    return old_x, new_x, lo, hi


@_compiled
def allowed_picks(
    rows: NDArray[np.intp],
    bits: NDArray[np.uint8],
    soon: NDArray[np.intp],
    forced: NDArray[np.intp],
) -> tuple[NDArray[np.intp], NDArray[np.bool_]]:
    """The positions in ``rows`` of those neither in ``soon`` nor in ``forced`` (both
    sorted, both rows of the guard's table, whose bitmap is ``bits``; empty: no table),
    in order, and whether each row is in the table. Only the rows in the table, a few
    percent of a slot's picks, are looked up in ``soon`` and ``forced``: one pass over the
    picks, where NumPy took a pass for the bitmap, a binary search of the table's rows,
    and a mask of every row for the forced ones."""
    m = rows.size
    out = np.empty(m + 1, dtype=np.intp)
    in_table = np.zeros(m, dtype=np.bool_)
    check = bits.size > 0
    count = 0
    for j in range(m):
        row = rows[j]
        ok = True
        if check and (bits[row >> 3] >> (row & 7)) & 1:
            in_table[j] = True
            at = np.searchsorted(soon, row)
            if at < soon.size and soon[at] == row:
                ok = False
            at = np.searchsorted(forced, row)
            if at < forced.size and forced[at] == row:
                ok = False
        out[count] = j
        count += ok
    return out[:count].copy(), in_table


@_compiled
def hold_credit(
    credit: NDArray[np.float32], rows: NDArray[np.intp], passes: NDArray[np.bool_], most: Any
) -> None:
    """Lower the credit of each of ``rows`` that does not pass to at most ``most`` (NaN
    stays NaN), in place: one pass, where NumPy took the rows left, their credit, the
    minimum and a scatter back, at a million URLs under the heavy mix 30,000 rows a slot."""
    for j in range(rows.size):
        if not passes[j]:
            row = rows[j]
            if credit[row] > most:
                credit[row] = most
