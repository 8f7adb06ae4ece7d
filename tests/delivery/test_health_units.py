"""The health judge: failing after N failed polls, recovered after, and the stopped-changing
test's false-alarm rate measured against the bound docs/delivery.md states."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from crawler import schedulers
from crawler.delivery import (
    PAGE_FAILING,
    PAGE_RECOVERED,
    PAGE_STOPPED_CHANGING,
    HealthJudge,
    HealthPolicy,
    UrlHealth,
    cautious_rate,
    silence_probability,
)
from crawler.store import PollRecord

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _poisson_quantile(q: float, mean: float) -> int:
    """The smallest k with P(Poisson(mean) <= k) >= q (the binomial's bound for small α)."""
    total, k = 0.0, 0
    while True:
        total += math.exp(k * math.log(mean) - mean - math.lgamma(k + 1))
        if total >= q:
            return k
        k += 1


def lookup_of(rates: dict[int, float]) -> Callable[[list[int]], dict[int, float]]:
    return lambda want: {u: rates[u] for u in want}


def _poll(uid: int, outcome: str, at: datetime, status: int = 200) -> PollRecord:
    return PollRecord(uid, outcome, at, status=status)  # type: ignore[arg-type]


def test_failing_after_n_then_recovered_once() -> None:
    judge = HealthJudge(HealthPolicy(failing_after=3))
    streak = 0
    seen: list[tuple[int, str]] = []
    outcomes = ["miss", "error", "error", "error", "error", "miss", "miss", "error", "miss"]
    for i, outcome in enumerate(outcomes):
        at = T0 + timedelta(seconds=i)
        events = judge.after_slot(
            i,
            [_poll(1, outcome, at, 404 if outcome == "error" else 200)],
            {1: streak} if streak else {},
            None,
        )
        streak = streak + 1 if outcome == "error" else 0
        seen += [(i, e.type) for e in events]
    # the third failure in a row raises it, the next good poll recovers; one failure: nothing
    assert seen == [(3, PAGE_FAILING), (5, PAGE_RECOVERED)]


def test_stopped_changing_is_raised_once_until_the_next_change() -> None:
    policy = HealthPolicy(stopped_alpha=1e-3, min_changes=5)
    judge = HealthJudge(policy)
    judge.restore({1: UrlHealth(0, 100, False)})
    rate = 1.0  # a change per slot
    lam = cautious_rate(rate, 100)
    needed = math.log(1 / policy.stopped_alpha) / lam  # the silence that raises it
    raised = []
    for s in range(1, 20):
        at = T0 + timedelta(seconds=s)
        events = judge.after_slot(
            s, [_poll(1, "miss", at)], {}, lambda ids: dict.fromkeys(ids, rate)
        )
        raised += [(s, e) for e in events]
    assert [s for s, _ in raised] == [math.ceil(needed)]
    payload = raised[0][1].payload
    assert raised[0][1].type == PAGE_STOPPED_CHANGING
    assert payload["probability"] < policy.stopped_alpha and payload["changes_observed"] == 100
    # a change re-arms it
    judge.after_slot(30, [_poll(1, "hit", T0 + timedelta(seconds=30))], {}, None)
    assert judge.urls[1].alarmed is False and judge.urls[1].changes == 101


def test_too_few_changes_or_no_rate_is_not_tested() -> None:
    judge = HealthJudge(HealthPolicy(stopped_alpha=0.5, min_changes=10))
    judge.restore({1: UrlHealth(0, 9, False), 2: UrlHealth(0, 50, False)})
    later = T0 + timedelta(days=30)
    every = lambda ids: dict.fromkeys(ids, 1.0)  # noqa: E731
    assert not judge.after_slot(10_000, [_poll(1, "miss", later)], {}, every)
    assert not judge.after_slot(10_000, [_poll(2, "miss", later)], {}, None)
    nan = lambda ids: dict.fromkeys(ids, math.nan)  # noqa: E731
    assert not judge.after_slot(10_000, [_poll(2, "miss", later)], {}, nan)


def test_the_bound_is_the_survival_function() -> None:
    # P(S > ln(1/α)/λ) = α for an exponential silence of rate λ: the per-spell bound
    lam, alpha = 0.3, 1e-3
    assert silence_probability(lam, math.log(1 / alpha) / lam) == pytest.approx(alpha)
    assert cautious_rate(2.0, 4) == 0.0 and cautious_rate(2.0, 100) == pytest.approx(1.6)


@pytest.mark.slow
def test_false_alarm_rate_within_the_stated_bound() -> None:
    """URLs that keep changing at fixed Poisson rates, polled by the real bayes scheduler
    in simulated time: false alarms per change stay within α (a one-sided binomial test at
    the 0.1 % level, fixed seed); a URL whose changes stop is caught."""
    rng = np.random.default_rng(11)
    n, slots, slot_s, alpha = 400, 3_000, 60.0, 0.01
    per_slot = rng.uniform(0.02, 0.5, n)  # change rates, changes per slot
    ids = np.arange(1, n + 1, dtype=np.int64)
    stopped = {1, 2, 3}  # their changes stop half-way: the alarms that should come
    scheduler = schedulers.create("bayes", capacity=n * 0.4, seed=3)
    scheduler.add(ids)
    judge = HealthJudge(HealthPolicy(stopped_alpha=alpha, min_changes=10))
    changed = np.zeros(n, dtype=bool)  # a change since the URL's last poll
    changes = 0
    false_alarms: list[int] = []
    caught: dict[int, int] = {}
    for slot in range(slots):
        happening = rng.random(n) < -np.expm1(-per_slot)
        for uid in stopped:
            if slot >= slots // 2:
                happening[uid - 1] = False
        changes += int(happening[[u - 1 for u in ids.tolist() if u not in stopped]].sum())
        changed |= happening
        picked = scheduler.select()
        hits = changed[picked - 1]
        changed[picked - 1] = False
        scheduler.feedback(picked, hits)
        at = T0 + timedelta(seconds=slot * slot_s)
        polls = [
            _poll(int(u), "hit" if h else "miss", at) for u, h in zip(picked, hits, strict=True)
        ]
        r_ids, prob = scheduler.rates()  # type: ignore[attr-defined]
        lookup = dict(zip(r_ids.tolist(), (-np.log1p(-prob)).tolist(), strict=True))
        for e in judge.after_slot(slot, polls, {}, lookup_of(lookup)):
            if e.url_id in stopped and slot >= slots // 2:
                caught.setdefault(e.url_id, slot)
            else:
                false_alarms.append(e.url_id)
    # the bound: expected false alarms <= α per change of a healthy URL
    limit = _poisson_quantile(0.999, changes * alpha)
    print(f"{len(false_alarms)} false alarms in {changes} changes (bound alpha={alpha}: {limit})")
    assert changes > 50_000
    assert len(false_alarms) <= limit
    assert set(caught) == stopped
