"""The relevel under constraints (``bayes._relevel``, from ``RELEVEL_FROM`` URLs on): it sets
the new-URL value as a full solve does, from sums it keeps as the polls come in, and it
brings sum(x) back to its target with every host at the larger of its own level and the
global one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from crawler import schedulers
from crawler.schedulers import bayes

N = bayes.RELEVEL_FROM + 10_000


def test_put_unseen_is_a_masked_store_bit_for_bit() -> None:
    """The branch-free store gives what np.putmask gives on the unobserved rows, on NaN
    rates, and sizes below, at and above a block (the last block partial)."""
    rng = np.random.default_rng(7)
    for n in (1, 9, bayes.BLOCK, 2 * bayes.BLOCK + 123):
        hits = np.where(rng.random(n) < 0.4, rng.random(n), 0.0).astype(np.float32)
        misses = np.where(rng.random(n) < 0.4, rng.random(n), 0.0).astype(np.float32)
        rate = rng.random(n).astype(np.float32) * 3
        edge = min(n, 4)
        hits[:edge] = [np.nan, -0.0, 0.0, 0.0][:edge]
        misses[:edge] = [0.0, 0.0, -0.0, 1e-30][:edge]
        rate[n // 2] = np.nan
        plain = rate.copy()
        unseen = (hits + misses) == 0
        np.putmask(plain, unseen, np.float32(0.37))
        bayes._put_unseen(rate, ~unseen, 0.37)
        assert rate.tobytes() == plain.tobytes()


def _fill(weight: np.ndarray, own: np.ndarray, loose: float, rest: float, level: float) -> float:
    return rest + loose / level + float(np.sum(weight / np.maximum(own, level)))


def test_global_level_meets_the_target() -> None:
    rng = np.random.default_rng(11)
    for _ in range(200):
        hosts = int(rng.integers(1, 300))
        weight = rng.random(hosts) * rng.choice([0.0, 1.0], hosts, p=[0.2, 0.8])
        own = np.where(rng.random(hosts) < 0.5, rng.random(hosts) * 4, 0.0)
        loose = float(rng.random())
        rest = float(rng.random() * 5)
        start = float(rng.random() * 4 + 0.01)
        # a target the sum reaches at some level between 1e-3 and 1e3
        true_level = float(10 ** rng.uniform(-3, 3))
        target = _fill(weight, own, loose, rest, true_level)
        level = bayes._global_level(weight, own, loose, rest, target, start)
        assert level is not None
        assert _fill(weight, own, loose, rest, level) == pytest.approx(target, rel=1e-9)


def test_global_level_none_when_no_level_meets_the_target() -> None:
    weight, own = np.array([1.0, 2.0]), np.array([0.0, 0.0])
    # the sum is above rest at every level: a target at or below it cannot be met
    assert bayes._global_level(weight, own, 0.0, 5.0, 4.0, 1.0) is None
    # nothing moves with the global level (every host held above any level reached)
    assert bayes._global_level(np.zeros(2), own, 0.0, 5.0, 6.0, 1.0) is None


@pytest.mark.parametrize("heavy", [False, True])
def test_relevel_follows_the_observed_mean_and_lands_on_the_target(heavy: bool) -> None:
    """A crawl's first slots, every URL new: the first observations lower sum(x). Each
    relevel sets the unobserved rows' rate to the observed rows' mean (the rate of 1 given
    before any observation does not stay until the next full solve), its kept sums match a
    recount, and sum(x) lands within 2 % of its target, capped hosts held or not."""
    rng = np.random.default_rng(5)
    ids = np.arange(N, dtype=np.int64)
    s = schedulers.create("bayes", capacity=N / 100, seed=3)
    assert isinstance(s, bayes.BayesRate)
    s.add(ids)
    hosts = N // 40 if heavy else N // 500
    share = 1.0 / np.arange(1, hosts + 1)
    s.set_groups(ids, rng.choice(hosts, size=N, p=share / share.sum()))
    s.set_group_caps({h: 1.5 for h in range(hosts if heavy else 20)})
    bounded = rng.permutation(N)[: N // 50]
    s.set_bounds(ids[bounded[::2]], lower=0.01)
    s.set_bounds(ids[bounded[1::2]], upper=0.1)
    relevels = 0
    mean_seen = math.nan
    for _ in range(30):
        level, since, value = s._level, s._since_solve, s._new_value
        chosen = s.select()
        if s._level != level and s._since_solve == since + 1:  # a relevel, not a solve
            relevels += 1
            assert abs(s._total - s._planned_total) <= 0.02 * s._planned_total
            # the observed rows' mean before this slot's polls, unless it moved by at most
            # the tolerance (then the value stays)
            if abs(mean_seen - value) > s.settings.tolerance * value:
                assert s._new_value == pytest.approx(mean_seen, rel=1e-9)
            else:
                assert s._new_value == value
        s.feedback(chosen, rng.random(chosen.size) < 0.3)
        unseen = (s._hit_count + s._miss_count) == 0
        assert np.all(s._rhat[unseen] == np.float32(s._new_value))
        assert s._unseen_count == int(unseen.sum())
        seen_sum = float(s._rhat[~unseen].sum(dtype=np.float64))
        assert s._seen_rate_sum == pytest.approx(seen_sum, rel=1e-9)
        mean_seen = seen_sum / int((~unseen).sum())
        limits = s._limits
        assert limits is not None
        free = unseen.copy()
        free[limits.rows] = False
        group = limits.group[free].astype(np.intp)
        group[group < 0] = limits.cap.size
        assert np.array_equal(
            s._host_unseen, np.bincount(group, minlength=limits.cap.size + 1).astype(float)
        )
    assert relevels >= 1
    assert s._new_value < 0.5  # the rate of 1 given before any observation is long gone
