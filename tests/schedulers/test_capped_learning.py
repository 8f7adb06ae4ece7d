"""Under host caps: ``bayes`` finds the hot URLs of a capped host (its capped-host rule,
and probing under the stride rule), and the guard holds per URL only its host's index (the
rest is sparse)."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from crawler import schedulers
from crawler.schedulers import _prior


@cache
def _polls_of_hot_url(probe_hits: float, rule: str = "stride", slots: int = 300) -> int:
    """Polls of the one URL that changes every slot, in a host of 60 capped at 1 poll per
    slot (others: rare changes), over ``slots`` slots, the capped host's polls chosen by
    ``rule``. Every input is seeded, so a run with the same arguments gives the same count:
    it is computed once per process (the two tests below ask for six runs, four distinct,
    at 0.3-0.5 s of CPU each)."""
    rng = np.random.default_rng(3)
    n = 80
    p = np.full(n, 0.01)
    p[7] = 1.0  # the hot URL, in the capped host
    sched = schedulers.create(
        "bayes", capacity=4.0, seed=2, probe_hits=probe_hits, capped_rule=rule
    )
    ids = np.arange(n)
    sched.add(ids)
    sched.set_groups(ids, np.where(ids < 60, 0, -1))
    sched.set_group_caps({0: 1.0})
    changed = np.zeros(n, dtype=bool)
    polled = 0
    for _ in range(slots):
        changed |= rng.random(n) < p
        picked = sched.select()
        hits = changed[picked]
        changed[picked] = False
        sched.feedback(picked, hits)
        polled += int(np.count_nonzero(picked == 7))
    return polled


def test_probing_finds_the_hot_url_of_a_capped_host() -> None:
    # every poll of the hot URL hits; under the stride rule without probing its interval
    # never shrinks below the round-robin's, with it the interval halves per hit
    assert _polls_of_hot_url(32.0) >= 2 * _polls_of_hot_url(1.0)


def test_the_capped_host_polls_what_most_likely_changed() -> None:
    # the host's cap binds: each slot it polls the URL most likely to have changed since its
    # last poll, and the hot URL (changed after every poll) is that URL most of the time,
    # with or without probing (measured: 198 of 300 slots; stride 39, stride probing 187)
    changed = _polls_of_hot_url(1.0, rule="changed")
    assert changed >= 4 * _polls_of_hot_url(1.0)
    assert changed >= _polls_of_hot_url(32.0)
    assert _polls_of_hot_url(32.0, rule="changed") == changed  # the rule does not probe


def test_the_guard_keeps_the_host_index_dense_and_the_bounds_sparse() -> None:
    n = 100_000
    sched = schedulers.create("bayes", capacity=1_000.0, seed=1)
    ids = np.arange(n)
    sched.add(ids)
    sched.set_groups(ids, ids % 1_000)
    sched.set_group_caps({h: 1.5 for h in range(100)})
    sched.set_bounds(ids[:500], lower=0.01)
    for _ in range(3):
        picked = sched.select()
        sched.feedback(picked, np.zeros(picked.size, dtype=bool))
    guard = sched._guard
    assert guard is not None
    assert guard.group.itemsize == 2  # 1,000 groups: int16
    assert guard.rows.size == 500  # only the bounded URLs are in the table
    lower = sched.bounds()[1]
    assert np.all(lower[:500] == 0.01) and np.all(lower[500:] == 0.0)


@cache
def _run(rule: str, *, caps: bool, read_rates: bool = False, slots: int = 200) -> tuple[bytes, ...]:
    """The picks of a 300-URL run, 6 hosts (two capped when ``caps``). Seeded, so computed
    once per process for the same arguments: a run the tests compare twice is made once
    (the tuple is immutable, so no test can change what another reads)."""
    rng = np.random.default_rng(4)
    n = 300
    p = rng.uniform(0.005, 0.4, n)
    sched = schedulers.create("bayes", capacity=6.0, seed=3, capped_rule=rule)
    ids = np.arange(n)
    sched.add(ids)
    if caps:
        sched.set_groups(ids, ids % 6)
        sched.set_group_caps({0: 0.8, 1: 0.5})
    changed = np.zeros(n, dtype=bool)
    picks = []
    for _ in range(slots):
        changed |= rng.random(n) < p
        picked = sched.select()
        picks.append(picked.tobytes())
        hits = changed[picked]
        changed[picked] = False
        sched.feedback(picked, hits)
        if read_rates:
            sched.rates()  # type: ignore[attr-defined]
    return tuple(picks)


def test_without_constraints_the_capped_rule_changes_nothing() -> None:
    assert _run("changed", caps=False) == _run("stride", caps=False)


def test_reading_the_rates_does_not_change_the_schedule() -> None:
    assert _run("changed", caps=True, read_rates=True) == _run("changed", caps=True)
    assert _run("changed", caps=True) != _run("stride", caps=True)  # the rule is in force


def test_the_prior_learns_the_population_and_shrinks_toward_it() -> None:
    # URLs polled every 2 slots, 20 times; half change with p = 0.01 a slot, half 0.3
    rng = np.random.default_rng(7)
    p = np.repeat([0.01, 0.3], 500)
    tau, polls = 2, 20
    hit = rng.random((p.size, polls)) < 1 - (1 - p[:, None]) ** tau
    hits = hit.sum(axis=1).astype(np.float32)
    hit_time = (tau * hits).astype(np.float32)
    miss_time = (tau * (polls - hits)).astype(np.float32)
    weights = _prior.fit(hit_time, miss_time, hits)
    rate = -np.log1p(-np.array([0.01, 0.3]))
    # mass within a factor 1.65 of each true rate (measured 0.21 and 0.48; the uniform
    # weights would put about 0.1 there)
    near = [weights[np.abs(np.log(_prior.GRID / r)) < 0.5].sum() for r in rate]
    assert min(near) > 0.15
    mean = _prior.posterior_mean(hit_time, miss_time, hits, weights)
    assert np.median(mean[:500]) == pytest.approx(rate[0], rel=0.3)
    assert np.median(mean[500:]) == pytest.approx(rate[1], rel=0.3)

    def once(hit: bool) -> float:
        h = np.array([float(hit)], np.float32)
        return float(_prior.posterior_mean(tau * h, tau * (1 - h), h, weights)[0])

    # a URL seen once is estimated from the population: a hit puts it near the busy half
    # (the fixed prior of half a hit and half a miss: ln(4) / 2 = 0.69), a miss below
    assert rate[0] < once(False) < once(True) < 1.2 * rate[1]
