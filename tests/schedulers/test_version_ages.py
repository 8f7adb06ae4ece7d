"""Version ages (a believed Last-Modified: slots since the polled version's last change)
in ``feedback(changed_ago=)`` and ``first_polls``: bayes learns from them, and learns a
page's rate sooner than from its hits and misses alone."""

from __future__ import annotations

import numpy as np

from crawler import schedulers


def poisson_site(n: int, seed: int) -> tuple[np.ndarray, np.random.Generator]:
    """Change rates (per slot, log-uniform in 0.005 .. 0.5) and the generator of changes."""
    rng = np.random.default_rng(seed)
    return np.exp(rng.uniform(np.log(0.005), np.log(0.5), n)), rng


def crawl(ages: bool, slots: int, seed: int = 3, n: int = 400) -> float:
    """bayes on Poisson pages changing at any time (polled at each slot's end), a URL's
    first poll its baseline; with ``ages`` each poll also tells its version's age. Returns
    the median |ln(estimate / true rate)| over the URLs after ``slots``."""
    rate, rng = poisson_site(n, seed)
    s = schedulers.create("bayes", capacity=20.0, seed=seed)
    ids = np.arange(n, dtype=np.int64)
    s.add(ids)
    # each page's last change, as old as a page of its rate is at a random time
    last = -rng.exponential(1.0 / rate)
    polled_at = np.full(n, np.nan)
    for t in range(1, slots + 1):
        count = rng.poisson(rate)  # this slot's changes, at uniform times in it
        changed = count > 0
        latest = t - 1 + rng.beta(np.maximum(count, 1), 1.0)  # the last of them
        last = np.where(changed, latest, last)
        chosen = s.select()
        age = t - last[chosen]
        first = np.isnan(polled_at[chosen])
        hit = last[chosen] > polled_at[chosen]  # NaN (a first poll): False
        polled_at[chosen] = t
        s.feedback(chosen[~first], hit[~first], changed_ago=age[~first] if ages else None)
        s.first_polls(chosen[first], age[first] if ages else np.full(first.sum(), np.nan))
    got_ids, p = s.rates()
    estimate = -np.log1p(-p)
    seen = np.isfinite(estimate)
    return float(np.median(np.abs(np.log(estimate[seen] / rate[got_ids[seen]]))))


def test_bayes_learns_rates_sooner_from_version_ages() -> None:
    for slots in (40, 120):
        with_ages = [crawl(True, slots, seed) for seed in range(3)]
        without = [crawl(False, slots, seed) for seed in range(3)]
        assert np.mean(with_ages) < 0.8 * np.mean(without), (slots, with_ages, without)


def test_a_first_polls_age_is_learned_and_saved() -> None:
    s = schedulers.create("bayes", capacity=2.0, seed=1)
    s.add(np.arange(4))
    s.first_polls([0, 1, 2, 9], [50.0, 0.5, np.nan, 3.0])  # 9: not watched, skipped
    _, p = s.rates()
    assert np.isfinite(p[:2]).all() and np.isnan(p[2:]).all()
    assert p[1] > 5 * p[0]  # a version half a slot old: a fast page; 50 slots: a slow one
    again = type(s).from_state(s.state())
    assert np.array_equal(again.rates()[1], p, equal_nan=True)
    s.first_polls([0], [1.0])  # a URL already observed: its record is more than one age
    assert np.array_equal(s.rates()[1], p, equal_nan=True)


def test_a_hits_age_splits_its_interval() -> None:
    fed, plain = (schedulers.create("bayes", capacity=1.0, seed=1) for _ in range(2))
    for s in (fed, plain):
        s.add([7])
    for k in range(6):
        for s in (fed, plain):
            assert s.select().tolist() == [7]
        # every slot a change; the fed one hears it came just now or long ago
        ago = [0.0 if k % 2 else 0.9]
        fed.feedback([7], [True], changed_ago=ago)
        plain.feedback([7], [True])
    assert fed.rates()[1][0] < plain.rates()[1][0]  # no change for part of each interval
    # an age of the whole interval or more contradicts the hit: learned as a plain hit
    a, b = (schedulers.create("bayes", capacity=1.0, seed=1) for _ in range(2))
    for s in (a, b):
        s.add([7])
        s.select()
    a.feedback([7], [True], changed_ago=[5.0])
    b.feedback([7], [True])
    assert a.rates()[1][0] == b.rates()[1][0]
