"""Under host caps: ``bayes`` finds the hot URLs of a capped host (its capped-host rule,
and probing under the stride rule), and the guard holds per URL only its host's index (the
rest is sparse)."""

from __future__ import annotations

import numpy as np

from crawler import schedulers


def _polls_of_hot_url(probe_hits: float, rule: str = "stride", slots: int = 300) -> int:
    """Polls of the one URL that changes every slot, in a host of 60 capped at 1 poll per
    slot (others: rare changes), over ``slots`` slots, the capped host's polls chosen by
    ``rule``."""
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
