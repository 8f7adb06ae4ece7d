"""The fast paths of a constrained slot select exactly what the straightforward ones do.

A constrained ``bayes`` slot at many URLs takes shortcuts that must not change a single
pick: a bitmap of the bounded rows before any binary search, the refill's ranked head
instead of a sort of its whole pool, the host ranks in one compiled pass,
the CUSUM logarithms on the hits only, the relevel written into x's own array as
rate / max(level, rate) (block by block), the credit step and its due rows in one compiled
pass, the polled rows' update in one compiled loop, their x and the host sums in another, the
minimum with
1 skipped when nothing is above 1, the forced rows taken out of the picks by a mask, the
host ranks taken only in the capped hosts, the bounds of a polled row's x by fmax and fmin,
and the baselines looked up only among the rows not polled in the last slot. Each is
swapped here for the plain formula it replaced, and both runs must give the same selection
in every slot and the same state at the end (with relevels: more than ``RELEVEL_FROM``
URLs; with failures, a pause and a changed cap on the way; and without any constraint).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from crawler import schedulers
from crawler.schedulers import _guard, _limits, _prior, bayes
from crawler.schedulers._guard import Guard

N = bayes.RELEVEL_FROM + 10_000


def _straight_best_within(
    self: Guard, pool: Any, credit: Any, need: int, group: Any, host_credit: Any
) -> Any:
    pool = pool[np.argsort(-credit[pool], kind="stable")]
    if host_credit is not None:
        pool = self._within_credit(pool, group, host_credit, limit=need)
    return pool[:need]


def _straight_log_ratios(hits: Any, rt: Any, k: float, misses: Any) -> Any:
    with np.errstate(divide="ignore", over="ignore"):
        return np.where(hits, np.log(-np.expm1(-k * rt)) - np.log(-np.expm1(-rt)), misses)


def _straight_levelled_x(own_padded: Any, level: float, group: Any, rate: Any, out: Any) -> Any:
    row_level = own_padded.astype(np.float32)[group]
    np.maximum(row_level, np.float32(level), out=row_level)
    return np.minimum(rate / row_level, np.float32(1.0))


def _straight_step_and_due(
    credit: Any, x: Any, factor: np.float32, clip: bool, group: Any, held: Any
) -> tuple[Any, Any, Any]:
    step = x * factor
    if clip:
        step = np.minimum(step, np.float32(1.0))
    credit += step
    due = np.flatnonzero(credit >= 1.0)
    in_held = np.zeros(due.size, dtype=bool)
    if held.size:
        in_held = np.append(held, False)[group[due]]
    free = due[~in_held]
    return free, credit[free] + x[free] * factor, due[in_held]


def _straight_place_rows(
    rows: Any, rate: Any, group: Any, level_of: Any, bounded: Any, x: Any, *sums: Any
) -> tuple[Any, Any, Any, Any]:
    _, bounded_rows, lower, upper = bounded
    lo, hi = np.zeros(rows.size), np.ones(rows.size)
    at = np.minimum(np.searchsorted(bounded_rows, rows), max(bounded_rows.size - 1, 0))
    if bounded_rows.size:
        hit = bounded_rows[at] == rows
        lo[hit], hi[hit] = lower[at[hit]], upper[at[hit]]
    u = level_of[group]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        plain = np.where((u > 0) & np.isfinite(u), rate.astype(np.float64) / u, 1.0 * (u <= 0))
    new_x = np.clip(np.nan_to_num(plain, nan=0.0), lo, hi).astype(np.float32)
    old_x = x[rows].copy()
    x[rows] = new_x
    for values, sign in ((old_x, -1.0), (new_x, 1.0)):
        signed = values.astype(np.float64) * sign
        moving = (values < 1) & (lo <= 0) & (hi >= 1)
        sums[0][:] += np.bincount(group, signed, minlength=sums[0].size)
        sums[1][:] += np.bincount(group, np.where(moving, signed, 0.0), minlength=sums[1].size)
    return old_x, new_x, lo, hi


def _straight_within_bounds(x: Any, lo: Any, hi: Any) -> Any:
    return np.clip(np.nan_to_num(x, nan=0.0), lo, hi)


def _straight_note_baselines(self: Any) -> None:
    rows = self._selected_rows
    if rows is None or rows.size == 0:
        return
    first = rows[~self._selected[rows]]
    if first.size:
        self._selected[first] = True
        unseen = first[(self._hit_count[first] + self._miss_count[first]) == 0]
        self._last[unseen] = self._slot - 1


def _straight_within_mask(order: Any, group: Any, credit: Any, limit: int | None = None) -> Any:
    """Every grouped row ranked within its group, capped or not."""
    g = group[order]
    keep = np.ones(order.size, dtype=bool)
    idx = np.flatnonzero(g >= 0)
    if idx.size:
        gs = g[idx]
        ranked = np.argsort(gs, kind="stable")
        start = np.searchsorted(gs[ranked], gs[ranked], side="left")
        rank = np.empty(idx.size, dtype=np.int64)
        rank[ranked] = np.arange(idx.size) - start
        keep[idx] = rank < np.floor(credit[gs] + 1e-9)
    if limit is not None:
        keep &= np.cumsum(keep) <= limit
    if idx.size:
        credit -= np.bincount(g[keep & (g >= 0)], minlength=credit.size)
    return keep


def _straight_posterior_mean(hit_time: Any, miss_time: Any, hits: Any, weights: Any) -> Any:
    """The hits' term on every row of grid x rows, new arrays at each step, exp of every
    term however small (the fast form holds those below e^-87 there)."""
    grid = _prior.GRID.astype(np.float32)
    h = np.asarray(hits, dtype=np.float32)
    some = h > 0
    tau = np.where(some, np.asarray(hit_time, dtype=np.float32) / np.where(some, h, 1), 1)
    tau = tau.astype(np.float32)
    z = np.log(-np.expm1(np.multiply.outer(grid, -np.maximum(tau, np.float32(1e-12))))) * h
    z = z - np.multiply.outer(grid, np.asarray(miss_time, dtype=np.float32))
    z = z + np.log(weights).astype(np.float32)[:, None]
    z = np.exp(z - z.max(axis=0))
    return (grid @ z) / z.sum(axis=0)


def _straight_held_hosts(self: Any) -> Any:
    held = (self._own_padded[:-1] > self._level) & np.isfinite(self._limits.cap)
    return np.append(held, False)


def _straight_at_most_one(x: Any) -> None:
    np.minimum(x, np.float32(1.0), out=x)


def _run(mix: str, slots: int = 40) -> tuple[list[bytes], dict[str, bytes]]:
    rng = np.random.default_rng(3)
    ids = np.arange(N, dtype=np.int64)
    s = schedulers.create("bayes", capacity=N / 100, seed=2)
    s.add(ids)
    if mix == "none":
        return _unconstrained(s, rng, slots)
    hosts = N // 40 if mix == "heavy" else N // 1_000
    share = 1.0 / np.arange(1, hosts + 1)
    s.set_groups(ids, rng.choice(hosts, size=N, p=share / share.sum()))
    s.set_group_caps({h: 1.5 for h in range(hosts if mix == "heavy" else 20)})
    bounded = rng.permutation(N)[: N // 50]
    s.set_bounds(ids[bounded[::2]], lower=0.01)
    s.set_bounds(ids[bounded[1::2]], upper=0.1)
    picks = []
    for slot in range(slots):
        chosen = s.select()
        picks.append(chosen.tobytes())
        hits = rng.random(chosen.size) < 0.3
        if slot % 7 == 3:  # some polls fail
            s.report_failures(chosen[:20], "transient")
            chosen, hits = chosen[20:], hits[20:]
        s.feedback(chosen, hits)
        if slot == 15:
            s.pause(chosen[:5])
            s.set_group_caps({1: 0.7})
    return picks, _state_bytes(s)


def _unconstrained(
    s: schedulers.Scheduler, rng: np.random.Generator, slots: int
) -> tuple[list[bytes], dict[str, bytes]]:
    picks = []
    for slot in range(slots):
        chosen = s.select()
        picks.append(chosen.tobytes())
        hits = rng.random(chosen.size) < 0.3
        if slot % 5 == 2:  # feedback in another order, some polls left out
            keep = rng.permutation(chosen.size)[: chosen.size - 3]
            chosen, hits = chosen[keep], hits[keep]
        s.feedback(chosen, hits)
    return picks, _state_bytes(s)


def _state_bytes(s: schedulers.Scheduler) -> dict[str, bytes]:
    state = s.state()
    rows = {k: np.ascontiguousarray(v).tobytes() for k, v in state.rows.items()}
    rows["extra"] = repr(sorted(state.extra.items())).encode()
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("mix", ["none", "realistic", "heavy"])
def test_fast_paths_select_as_the_straightforward_ones(
    monkeypatch: pytest.MonkeyPatch, mix: str
) -> None:
    fast_picks, fast_state = _run(mix)
    monkeypatch.setattr(_limits, "BITMAP_FROM", 10**18)
    monkeypatch.setattr(_guard, "BITMAP_FROM", 10**18)
    monkeypatch.setattr(Guard, "_best_within", _straight_best_within)
    monkeypatch.setattr(bayes, "_log_ratios", _straight_log_ratios)
    monkeypatch.setattr(bayes, "_levelled_x", _straight_levelled_x)
    monkeypatch.setattr(bayes, "_at_most_one", _straight_at_most_one)
    monkeypatch.setattr(bayes, "step_and_due", _straight_step_and_due)
    monkeypatch.setattr(bayes.BayesRate, "_update_rows", bayes.BayesRate._update_rows_numpy)
    monkeypatch.setattr(bayes, "_within_bounds", _straight_within_bounds)
    monkeypatch.setattr(bayes, "place_rows", _straight_place_rows)
    monkeypatch.setattr(bayes.BayesRate, "_note_baselines", _straight_note_baselines)
    monkeypatch.setattr(_guard, "within_mask", _straight_within_mask)
    monkeypatch.setattr(_prior, "posterior_mean", _straight_posterior_mean)
    monkeypatch.setattr(bayes.BayesRate, "_held_hosts", _straight_held_hosts)
    plain_picks, plain_state = _run(mix)
    differ = [i for i, (a, b) in enumerate(zip(fast_picks, plain_picks, strict=True)) if a != b]
    assert not differ, (
        f"the fast paths chose other URLs than the straightforward ones in slots {differ[:5]}: "
        "a shortcut in bayes.py or _guard.py changed a result; compare it with its plain "
        "formula in this test"
    )
    assert fast_state == plain_state, "same picks but other learning state: see _learn"


def test_each_shortcut_gives_its_plain_formula_bit_for_bit() -> None:
    """The three elementwise shortcuts on the values where they could differ: rates above,
    at and below their level, levels of 0 and infinity, 0 / 0, NaN, values above 1."""
    rng = np.random.default_rng(5)
    rate = rng.random(4_000).astype(np.float32) * 3
    rate[:8] = [0.0, 0.0, 1.5, 2.0, np.nan, 1e-40, 0.25, 3.0]
    table = rng.random(50) * 2
    table[:4] = [0.0, np.inf, 1.5, np.nan]
    group = rng.integers(-1, 50, rate.size).astype(np.int16)
    group[:8] = [0, 1, 2, 3, 5, 0, -1, 2]
    # more rows than a block of the relevel's pass too (the last block partial)
    repeat = 2 * bayes.BLOCK // rate.size + 1
    many_rate, many_group = np.tile(rate, repeat), np.tile(group, repeat)
    for level in (0.0, 0.3, 2.5):
        for r, g in ((rate, group), (many_rate, many_group)):
            with np.errstate(divide="ignore", invalid="ignore"):
                fast = bayes._levelled_x(table, level, g, r, np.empty_like(r))
                plain = _straight_levelled_x(table, level, g, r, None)
            assert fast.tobytes() == plain.tobytes()
    for scale in (0.5, 1.0, 1.7):
        fast_credit, plain_credit = many_rate / np.float32(3), many_rate / np.float32(3)
        held = np.arange(50) % 3 == 0
        factor = np.float32(scale)
        fast_due = bayes.step_and_due(fast_credit, many_rate, factor, scale > 1, many_group, held)
        plain_due = _straight_step_and_due(
            plain_credit, many_rate, factor, scale > 1, many_group, held
        )
        assert fast_credit.tobytes() == plain_credit.tobytes()
        for fast_part, plain_part in zip(fast_due, plain_due, strict=True):
            assert fast_part.tobytes() == plain_part.tobytes()
    wide = np.concatenate([rate.astype(np.float64) - 1, [np.inf, -np.inf, np.nan, 0.0, 1.0]])
    lo = np.where(rng.random(wide.size) < 0.5, 0.0, rng.random(wide.size) / 2)
    hi = np.where(rng.random(wide.size) < 0.5, 1.0, lo + rng.random(wide.size) / 2)
    lo[-3:], hi[-3:] = 0.25, 0.25  # a bound of one value: lower == upper
    fast_x, plain_x = bayes._within_bounds(wide, lo, hi), _straight_within_bounds(wide, lo, hi)
    assert fast_x.tobytes() == plain_x.tobytes()
    for values in (rate.copy(), rate / np.float32(4), np.array([np.nan, 0.5], np.float32)):
        fast_min, plain_min = values.copy(), values.copy()
        bayes._at_most_one(fast_min)
        _straight_at_most_one(plain_min)
        assert fast_min.tobytes() == plain_min.tobytes()
    # the posterior mean: rows with and without hits, short and long intervals
    a = (rng.random(3_000) * 50).astype(np.float32)
    hh = np.floor(rng.random(3_000) * 4).astype(np.float32) * np.float32(0.9)
    a[hh == 0] = 0.0
    b = (rng.random(3_000) * 80).astype(np.float32)
    b[:5] = 0.0
    weights = rng.random(_prior.GRID.size) + 1e-3
    weights /= weights.sum()
    fast_mean = _prior.posterior_mean(a, b, hh, weights)
    assert fast_mean.tobytes() == _straight_posterior_mean(a, b, hh, weights).tobytes()
    # the host credits: capped (whole, fractional, spent, NaN) and uncapped (infinite)
    credit = np.where(rng.random(50) < 0.5, np.inf, np.floor(rng.random(50) * 8) / 2)
    credit[:3] = [np.nan, 0.0, 0.999999999999]
    order = rng.permutation(rate.size)[:3_000].astype(np.intp)
    for limit in (None, 10, 2_000):
        fast_credit, plain_credit = credit.copy(), credit.copy()
        fast = _guard.within_mask(order, group, fast_credit, limit)
        plain = _straight_within_mask(order, group, plain_credit, limit)
        assert np.array_equal(fast, plain)
        assert fast_credit.tobytes() == plain_credit.tobytes()
    # membership of a few rows among a few others, spread over a million rows
    rows = rng.integers(0, 1_000_000, 300).astype(np.intp)
    for among in (rows[:0], rows[::7], rng.integers(0, 1_000_000, 40).astype(np.intp)):
        assert np.array_equal(_guard._members(rows, among), np.isin(rows, among))
