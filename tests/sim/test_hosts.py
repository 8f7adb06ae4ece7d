"""Host-group environments: the hosts, the constrained limit, truncation, and bayes on them."""

from __future__ import annotations

import numpy as np
import pytest

from crawler import schedulers
from crawler.sim import get_env, run
from crawler.sim.catalog import host_assignment
from crawler.sim.limit import LimitTracker
from crawler.sim.runner import HostTruncation


def test_hosts_are_zipf_sized_and_fixed_by_the_structure_seed() -> None:
    groups = host_assignment(2000, 50, 1.0, 1)
    counts = np.bincount(groups, minlength=50)
    assert counts.sum() == 2000 and counts.min() >= 1
    assert counts[0] == 445 and counts[1] == 223 and counts[2] == 149
    assert np.array_equal(groups, host_assignment(2000, 50, 1.0, 1))
    assert not np.array_equal(groups, host_assignment(2000, 50, 1.0, 2))


def test_the_host_environments_carry_groups_caps_and_the_constrained_limit() -> None:
    told, cut = get_env("hosts"), get_env("hosts-truncated")
    assert told.caps_known and not cut.caps_known
    env = told.build(3)
    assert env.groups is not None and env.caps is not None
    assert env.n == 2000 and env.capacity == 20.0 and len(env.caps) == 50
    free = schedulers.limit(env.p, env.capacity)
    limits = schedulers.Limits.build(env.n, env.groups, env.caps)
    capped = schedulers.constrained_limit(env.p, 20.0, limits=limits)
    assert capped < free
    assert LimitTracker().value(env) == pytest.approx(capped)
    assert LimitTracker().value(cut.build(3)) == pytest.approx(capped)
    # the caps bind for the big hosts only
    solved = schedulers.solve_constrained(-np.log1p(-env.p), 20.0, limits=limits)
    assert 3 <= int(solved.binding.sum()) <= 10
    assert solved.binding[0] and not solved.binding[-1]


def test_bad_host_specs_are_rejected() -> None:
    with pytest.raises(ValueError):
        get_env("A", host_cap=1.0)  # a cap without hosts
    with pytest.raises(ValueError):
        get_env("A", hosts=600)  # more hosts than URLs


def test_truncation_keeps_every_host_under_its_cap() -> None:
    groups = np.repeat(np.arange(4), 10)
    caps = {0: 1.5, 1: 0.5, 2: 3.0}
    cut = HostTruncation(groups, caps)
    rng = np.random.default_rng(0)
    total = np.zeros(4)
    slots = 1000
    for _ in range(slots):
        ids = rng.choice(40, 12, replace=False).astype(np.int64)
        kept = cut.keep(ids)
        assert set(kept.tolist()) <= set(ids.tolist())
        counts = np.bincount(groups[kept], minlength=4)
        assert counts[0] <= 2 and counts[1] <= 1 and counts[2] <= 3
        total += counts
    assert total[0] <= 1.5 * slots + 2 and total[1] <= 0.5 * slots + 1
    assert total[0] > 1.4 * slots  # the cap is used, not wasted
    assert cut.dropped > 0


@pytest.mark.slow
def test_bayes_reaches_the_constrained_limit_and_truncation_costs() -> None:
    told = run("bayes", get_env("hosts"), 20_000, seed=1, keep_record=True)
    cut = run("bayes", get_env("hosts-truncated"), 20_000, seed=1, keep_record=True)
    assert told.summary["final_ratio"] >= 0.98
    assert cut.summary["final_ratio"] < told.summary["final_ratio"] - 0.05
    assert told.record is not None and cut.record is not None
    # with the caps told, bayes uses its whole budget; truncated, polls are lost
    assert told.record.polls[10_000:].mean() >= 19.9
    assert cut.record.polls[10_000:].mean() < 19.5
