"""The compiled loops give exactly what the NumPy expressions they replaced give."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler import schedulers
from crawler.schedulers import _kernels, bayes
from crawler.schedulers._kernels import (
    allowed_picks,
    best_of_groups,
    hold_credit,
    open_above,
    place_rows,
    step_and_due,
    within_credit,
)
from crawler.schedulers._limits import Limits, row_bits


def within_reference(
    order: np.ndarray, group: np.ndarray, credit: np.ndarray, limit: int
) -> np.ndarray:
    """The rule in plain Python: in order, a row of a group with finite credit passes while
    fewer than floor(credit + 1e-9) of its group passed; at most ``limit`` pass."""
    keep = np.zeros(order.size, dtype=bool)
    start = credit.copy()
    passed: dict[int, int] = {}
    for j, row in enumerate(order.tolist()):
        if keep.sum() >= limit:
            break
        g = int(group[row])
        if g >= 0 and start[g] != np.inf:
            if not passed.get(g, 0) < np.floor(start[g] + 1e-9):
                continue
            passed[g] = passed.get(g, 0) + 1
        keep[j] = True
    for g, count in passed.items():
        credit[g] -= count
    return keep


# no deadline: the first example of each group dtype compiles the kernel for it
@settings(deadline=None)
@given(
    st.integers(1, 60),
    st.integers(1, 8),
    st.integers(0, 80),
    st.integers(0, 2**32 - 1),
    st.sampled_from([np.int8, np.int16, np.int32]),
)
def test_within_credit_keeps_what_the_rule_keeps(
    rows: int, groups: int, limit: int, seed: int, dtype: type[np.signedinteger]
) -> None:
    rng = np.random.default_rng(seed)
    group = rng.integers(-1, groups, size=rows).astype(dtype)
    credit = rng.choice(
        [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 1 - 1e-12, np.inf, -np.inf, np.nan], size=groups
    )
    order = rng.permutation(rows).astype(np.intp)
    expected_credit = credit.copy()
    expected = within_reference(order, group, expected_credit, limit)
    got = within_credit(order, group, credit, limit)
    assert got.tolist() == expected.tolist()
    assert np.array_equal(credit, expected_credit, equal_nan=True)


@settings(deadline=None)
@given(st.integers(0, 2_000), st.floats(0.01, 3.0), st.integers(0, 4), st.integers(0, 2**32 - 1))
def test_step_and_due_is_the_float32_step_then_the_due_rows(
    n: int, scale: float, groups: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    credit = (rng.random(n) * 1.2 - 0.1).astype(np.float32)
    x = rng.random(n).astype(np.float32)
    x[rng.random(n) < 0.05] = np.nan  # a row without an estimate never comes due
    group = rng.integers(-1, max(groups, 1), size=n).astype(np.int16)
    held = rng.random(groups) < 0.5
    factor = np.float32(scale)
    step = x * factor
    if scale > 1.0:
        step = np.minimum(step, np.float32(1.0))  # NaN stays NaN
    expected_credit = credit + step
    due = np.flatnonzero(expected_credit >= 1.0)
    is_held = np.zeros(due.size, dtype=bool)
    if held.size:
        is_held = (group[due] >= 0) & held[np.maximum(group[due], 0)]
    free, key, waiting = step_and_due(credit, x, factor, scale > 1.0, group, held)
    assert free.dtype == waiting.dtype == np.intp
    assert free.tolist() == due[~is_held].tolist()
    assert waiting.tolist() == due[is_held].tolist()
    unclipped = expected_credit[free] + x[free] * factor
    assert key.dtype == np.float32 and np.array_equal(key, unclipped)
    assert np.array_equal(credit, expected_credit, equal_nan=True)


@settings(deadline=None)
@given(
    st.integers(1, 400),
    st.integers(1, 6),
    st.integers(0, 300),
    st.sampled_from([np.int8, np.int16]),
    st.integers(0, 2**32 - 1),
)
def test_place_rows_is_the_x_and_host_sums_of_numpy(
    n: int, groups: int, polled: int, dtype: type[np.signedinteger], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    lower = np.where(rng.random(n) < 0.2, rng.random(n) / 2, 0.0)
    upper = np.where(rng.random(n) < 0.2, lower + rng.random(n) / 2, 1.0)
    group_of = rng.integers(0, groups, size=n)
    limits = Limits.build(n, group_of, {0: 1.5}, lower, upper)
    group_all = limits.group.astype(dtype)
    rows = rng.permutation(n)[: min(polled, n)].astype(np.intp)
    rate = (rng.random(rows.size) * 2).astype(np.float32)
    rate[rng.random(rows.size) < 0.1] = np.nan
    levels = rng.choice([0.0, -1.0, np.inf, 0.3, 1.7, 1e-9], size=limits.cap.size + 1)
    x = rng.random(n).astype(np.float32) * np.float32(1.2)
    sums = (rng.random(limits.cap.size), rng.random(limits.cap.size))
    group = group_all[rows]

    # the NumPy form: BayesRate._constrained_x and _add_sums (every row in a group)
    lo, hi = limits.bounds_of(rows)
    u = levels[group]
    r = rate.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        plain = np.where((u > 0) & np.isfinite(u), r / u, np.where(u > 0, 0.0, 1.0))
    new_plain = bayes._within_bounds(plain, lo, hi).astype(np.float32)
    old_plain = x[rows]
    sum_plain, moving_plain = sums[0].copy(), sums[1].copy()
    for xs, sign in ((old_plain, -1.0), (new_plain, 1.0)):
        moving = (xs < np.float32(1.0)) & (lo <= 0) & (hi >= 1)
        signed = xs.astype(np.float64) * sign
        gi = group.astype(np.intp)
        sum_plain += np.bincount(gi, signed, minlength=limits.cap.size)
        moving_plain += np.bincount(gi, np.where(moving, signed, 0.0), minlength=limits.cap.size)
    x_plain = x.copy()
    x_plain[rows] = new_plain

    got = place_rows(rows, rate, group, levels, limits.bounded, x, *sums)
    for part, want in zip(got, (old_plain, new_plain, lo, hi), strict=True):
        assert part.dtype == want.dtype and part.tobytes() == want.tobytes()
    assert x.tobytes() == x_plain.tobytes()
    assert sums[0].tobytes() == sum_plain.tobytes()
    assert sums[1].tobytes() == moving_plain.tobytes()


@settings(deadline=None)
@given(
    st.integers(0, 500),
    st.integers(0, 6),
    st.sampled_from([np.float32, np.float64]),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_open_above_is_the_masks_of_numpy(
    n: int, groups: int, dtype: type[np.floating], any_credit: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    credit = (rng.random(n) * 2 - 0.5).astype(dtype)
    credit[rng.random(n) < 0.05] = np.nan
    floor = dtype(rng.random())
    taken = rng.random(n) < 0.3
    group = rng.integers(-1, max(groups, 1), size=n).astype(np.int16)
    # per group whether it is open, then the entry of the rows of no group (open)
    opened = np.append(rng.random(groups) < 0.5, True) if groups else np.empty(0, bool)
    expected = np.arange(n) if any_credit else np.flatnonzero(credit >= floor)
    expected = expected[~taken[expected]]
    if opened.size:
        expected = expected[opened[group[expected]]]
    got = open_above(credit, floor, any_credit, taken, group, opened)
    assert got.dtype == np.intp
    assert got.tolist() == expected.tolist()


@settings(deadline=None)
@given(st.integers(0, 300), st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_best_of_groups_is_the_stable_sort_then_the_first_of_each_group(
    n: int, groups: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    rows = 2 * n + 1
    due = np.sort(rng.choice(rows, size=n, replace=False)).astype(np.intp)
    # few distinct rates and ages: equal keys are common, and some are NaN
    rate = rng.choice([0.0, 0.1, 0.25, 1.0, np.nan], size=rows).astype(np.float32)
    last = rng.integers(0, 5, size=rows).astype(np.int32)
    slot = 6
    group = rng.integers(-1, groups, size=rows).astype(np.int8)
    allowance = rng.choice([0.0, 1.0, 2.0, 3.0, np.inf, np.nan, -1.0], size=groups)
    key = rate[due].astype(np.float64) * (slot - last[due]).astype(np.float64)
    ranked = np.argsort(-key, kind="stable")
    credit = np.where(np.isnan(allowance), np.nan, allowance + 0.5)  # floor: the allowance
    lets_in = within_reference(due[ranked], group, credit, due.size)
    expected = np.zeros(due.size, dtype=bool)
    expected[ranked[lets_in]] = True
    passes, got_key = best_of_groups(due, rate, last, slot, group, allowance)
    assert passes.tolist() == expected.tolist()
    assert np.array_equal(got_key, key, equal_nan=True)


@pytest.mark.parametrize("model", ["overwrite", "disappear"])
@pytest.mark.parametrize("capped", [False, True])
def test_the_compiled_update_learns_what_the_numpy_one_learns(model: str, capped: bool) -> None:
    """Ages (some unknown), first polls, the CUSUM tests of a rise and of a fall, probing
    under caps: the polled rows' update in one loop leaves bayes in the same state, bit
    for bit, and so picks the same URLs."""

    def run(compiled: bool) -> list[bytes]:
        rng = np.random.default_rng(7)
        s = schedulers.create("bayes", capacity=50, seed=1, model=model)
        assert isinstance(s, bayes.BayesRate)
        if not compiled:
            s._update_rows = s._update_rows_numpy  # type: ignore[method-assign]
        ids = np.arange(4_000)
        s.add(ids)
        if capped:
            s.set_groups(ids, ids % 30)
            s.set_group_caps({0: 1.0, 1: 1.5, 2: 0.5})
        rate = rng.choice([0.0, 0.01, 0.2, 0.9], size=ids.size)
        out = []
        for slot in range(120):
            chosen = s.select()
            out.append(chosen.tobytes())
            hits = rng.random(chosen.size) < rate[chosen]
            if slot % 3 == 0:  # Last-Modified for some polls, unknown for others
                ago = np.where(rng.random(chosen.size) < 0.5, rng.random(chosen.size) * 20, np.nan)
                s.feedback(chosen, hits, changed_ago=ago)
            else:
                s.feedback(chosen, hits)
            if slot == 40:
                rate = rate[::-1].copy()  # rises and falls for the CUSUM tests
            if slot % 10 == 5:
                s.first_polls(chosen[:5], np.full(5, 3.0))
        state = s.state()
        out.extend(np.ascontiguousarray(v).tobytes() for v in state.rows.values())
        return out

    assert run(compiled=True) == run(compiled=False)


def test_the_float16_conversions_are_numpys() -> None:
    """The compiled conversions between float16 bits and floats (numba has no float16 on
    the CPU) give NumPy's: every one of the 65,536 bit patterns read, and floats written
    across the whole range with ties to even, the largest and beyond, the subnormals and
    the boundary to the normals, signed zeros, infinities and NaN."""
    _kernels._compile_helpers()
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    want = bits.view(np.float16).astype(np.float64)
    got = np.array([_kernels.half_to_float(int(b)) for b in bits])
    assert np.array_equal(got, want, equal_nan=True)
    rng = np.random.default_rng(5)
    finite = want[np.isfinite(want)]
    values = np.concatenate(
        [
            finite,
            (finite[:-1] + finite[1:]) / 2,  # ties, between neighbours of one sign
            np.nextafter((finite[:-1] + finite[1:]) / 2, np.inf),
            np.nextafter((finite[:-1] + finite[1:]) / 2, -np.inf),
            [65504.0, 65519.99, 65520.0, 7e4, 1e300, 2.0**-14, 2.0**-14 - 2.0**-26, 2.0**-25],
            [2.0**-26, 0.0, -0.0, np.inf, -np.inf, np.nan, 6e4, 1e-300],
            rng.standard_normal(20_000) * 10.0 ** rng.integers(-9, 6, 20_000),
        ]
    )
    with np.errstate(over="ignore"):  # beyond 65504: inf, as the kernel gives
        want_bits = values.astype(np.float16).view(np.uint16)
    got_bits = np.array([_kernels.float_to_half(float(v)) for v in values], dtype=np.uint16)
    assert np.array_equal(got_bits, want_bits), values[got_bits != want_bits][:5]


@settings(deadline=None)
@given(st.integers(1, 400), st.integers(0, 120), st.booleans(), st.integers(0, 2**32 - 1))
def test_allowed_picks_are_the_picks_neither_too_soon_nor_forced(
    n: int, picks: int, table: bool, seed: int
) -> None:
    """The positions of the picks outside ``soon`` and ``forced`` (rows of the table), in
    order, and which picks are in the table, as NumPy's membership tests give them."""
    rng = np.random.default_rng(seed)
    rows = rng.permutation(n)[: min(picks, n)].astype(np.intp)
    members = np.sort(rng.permutation(n)[: rng.integers(0, n + 1)]).astype(np.intp)
    if not table:
        members = members[:0]
    soon = np.sort(rng.choice(members, size=members.size // 2, replace=False)).astype(np.intp)
    forced = np.sort(rng.choice(members, size=members.size // 3, replace=False)).astype(np.intp)
    bits = row_bits(members, n) if members.size else np.empty(0, dtype=np.uint8)
    at, in_table = allowed_picks(rows, bits, soon, forced)
    want = np.flatnonzero(~np.isin(rows, soon) & ~np.isin(rows, forced))
    assert at.tolist() == want.tolist()
    assert in_table.tolist() == np.isin(rows, members).tolist()


def test_hold_credit_is_numpys_minimum_on_the_rows_that_do_not_pass() -> None:
    """Credits above, at and below the most, NaN, rows that pass left alone."""
    rng = np.random.default_rng(3)
    credit = (rng.random(1_000) * 4).astype(np.float32)
    credit[:3] = [np.nan, 2.0, np.inf]
    rows = np.concatenate([[0, 1, 2], rng.permutation(np.arange(3, 1_000))[:400]]).astype(np.intp)
    passes = rng.random(rows.size) < 0.3
    passes[:3] = False
    plain = credit.copy()
    waiting = rows[~passes]
    plain[waiting] = np.minimum(plain[waiting], 2.0)
    hold_credit(credit, rows, passes, np.float32(2.0))
    assert credit.tobytes() == plain.tobytes()
