"""The scheduler contract (docs/schedulers.md), checked on every registered scheduler."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler import schedulers

ALL = schedulers.names()
EXPECTED = {"lakg", "fpa", "uniform", "proportional", "optimal", "estimator", "adaptive", "bayes"}


def make(name: str, capacity: float = 2.0, seed: int = 1, **params: Any) -> schedulers.Scheduler:
    return schedulers.create(name, capacity=capacity, seed=seed, **params)


def rates_for(ids: np.ndarray) -> np.ndarray:
    return 0.3 / (1.0 + (ids % 97)) ** 1.2


def populate(s: schedulers.Scheduler, ids: np.ndarray) -> None:
    s.add(ids, importance=np.linspace(1.0, 0.2, ids.size), rates=rates_for(ids))


def run_slots(s: schedulers.Scheduler, slots: int, rng: np.random.Generator) -> list[np.ndarray]:
    chosen = []
    for _ in range(slots):
        ids = s.select()
        chosen.append(ids)
        s.feedback(ids, rng.random(ids.size) < 0.3)
    return chosen


def test_every_contract_name_is_registered() -> None:
    assert set(ALL) >= EXPECTED


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 60),
    capacity=st.floats(0.3, 12.0),
    slots=st.integers(1, 40),
    seed=st.integers(0, 2**16),
)
def test_select_respects_capacity_and_never_repeats(
    name: str, n: int, capacity: float, slots: int, seed: int
) -> None:
    s = make(name, capacity=capacity, seed=seed)
    ids = np.arange(100, 100 + n, dtype=np.int64) * 3
    populate(s, ids)
    rng = np.random.default_rng(seed)
    total = 0
    for chosen in run_slots(s, slots, rng):
        assert chosen.dtype == np.int64
        assert chosen.size <= math.ceil(capacity)
        assert np.unique(chosen).size == chosen.size
        assert np.isin(chosen, ids).all()
        total += chosen.size
    assert total <= capacity * slots + 1
    got_ids, x = s.frequencies()
    assert np.array_equal(got_ids, ids)
    # With importance the exact optimum never polls a URL whose weight is below the
    # multiplier: x = 0 is the Optimal oracle's right answer. Every other scheduler keeps
    # every URL in play.
    in_play = x >= 0 if name == "optimal" else x > 0
    assert np.all(in_play & (x <= 1)), x


@pytest.mark.parametrize("name", ALL)
def test_uses_the_capacity(name: str) -> None:
    s = make(name, capacity=3)
    populate(s, np.arange(50))
    polls = sum(c.size for c in run_slots(s, 200, np.random.default_rng(0)))
    assert polls >= 0.9 * 3 * 200


@pytest.mark.parametrize("name", ALL)
def test_fractional_capacity_polls_on_average(name: str) -> None:
    s = make(name, capacity=1.0)
    populate(s, np.arange(40))
    counts = [c.size for c in run_slots(s, 300, np.random.default_rng(0))]
    assert set(counts) <= {0, 1}
    assert sum(counts) >= 0.9 * 300


@pytest.mark.parametrize("name", ALL)
def test_state_round_trip_continues_identically(name: str) -> None:
    rng = np.random.default_rng(5)
    s = make(name, capacity=3, seed=11)
    populate(s, np.arange(30))
    run_slots(s, 50, rng)
    restored = schedulers.restore(s.state())
    for _ in range(50):
        a, b = s.select(), restored.select()
        assert np.array_equal(a, b)
        hits = rng.random(a.size) < 0.4
        s.feedback(a, hits)
        restored.feedback(b, hits)
    ids_a, x_a = s.frequencies()
    ids_b, x_b = restored.frequencies()
    assert np.array_equal(ids_a, ids_b)
    assert np.array_equal(x_a, x_b)


@pytest.mark.parametrize("name", ALL)
def test_add_and_remove_while_running(name: str) -> None:
    rng = np.random.default_rng(2)
    s = make(name, capacity=2)
    populate(s, np.arange(20))
    run_slots(s, 20, rng)
    chosen = s.select()
    s.remove(chosen[:1])
    s.feedback(chosen, np.ones(chosen.size, dtype=bool))  # a removed URL's late feedback
    populate(s, np.arange(100, 110))
    for picked in run_slots(s, 60, rng):
        assert not np.isin(picked, chosen[:1]).any()
    ids, x = s.frequencies()
    assert ids.size == 29
    assert np.all((x > 0) & (x <= 1))


@pytest.mark.parametrize("name", ALL)
def test_feedback_may_omit_failed_polls(name: str) -> None:
    s = make(name, capacity=4)
    populate(s, np.arange(20))
    for _ in range(20):
        ids = s.select()
        s.feedback(ids[::2], np.ones(ids[::2].size, dtype=bool))


@pytest.mark.parametrize("name", ALL)
def test_feedback_takes_version_ages(name: str) -> None:
    """Every scheduler takes the polls' version ages (a believed Last-Modified) and first
    polls' ages; those that learn from hits and misses alone run exactly as without."""
    fed, plain = make(name, capacity=3, seed=4), make(name, capacity=3, seed=4)
    ids = np.arange(30)
    for s in (fed, plain):
        populate(s, ids)
    rng = np.random.default_rng(2)
    fed.first_polls(ids[:6], [4.0, np.nan, 0.0, 2.5, 80.0, np.nan])
    fed.first_polls([999], [1.0])  # no longer watched: skipped
    plain.first_polls(ids[:6], np.full(6, np.nan))  # nothing known: nothing learned
    for _ in range(40):
        chosen = fed.select()
        assert np.array_equal(plain.select(), chosen) or name == "bayes"
        hits = rng.random(chosen.size) < 0.4
        ago = np.where(rng.random(chosen.size) < 0.5, rng.random(chosen.size) * 3, np.nan)
        fed.feedback(chosen, hits, changed_ago=ago)
        plain.feedback(chosen, hits)
    again = type(fed).from_state(fed.state())
    assert np.array_equal(again.select(), fed.select())


@pytest.mark.parametrize("name", ALL)
def test_bad_input_is_a_clear_error_and_leaves_state_intact(name: str) -> None:
    s = make(name, capacity=2)
    populate(s, np.arange(10))
    before = s.state()
    with pytest.raises(ValueError):
        s.add(np.arange(5, 12), rates=rates_for(np.arange(5, 12)))  # 5..9 already watched
    with pytest.raises(ValueError):
        s.add([20, 21], importance=[0.5, float("nan")], rates=[0.1, 0.1])
    with pytest.raises(ValueError):
        s.add([20, 20], rates=[0.1, 0.1])
    with pytest.raises(ValueError):
        s.add([22], importance=[1.5], rates=[0.1])
    with pytest.raises(ValueError):
        s.feedback([12345], [True])
    with pytest.raises(ValueError):
        s.feedback([1, 2], [True])
    with pytest.raises(ValueError):
        s.feedback([1, 2], [True, False], changed_ago=[1.0])  # one age per id
    with pytest.raises(ValueError):
        s.feedback([1, 2], [True, False], changed_ago=[1.0, -2.0])
    with pytest.raises(ValueError):
        s.first_polls([1, 2], [1.0, float("inf")])
    with pytest.raises(ValueError):
        s.first_polls([1, 1], [1.0, 2.0])
    after = s.state()
    assert before.keys() == after.keys()
    for key, value in before.items():
        if isinstance(value, np.ndarray):
            assert np.array_equal(value, after[key], equal_nan=True), key
        else:
            assert value == after[key], key


@pytest.mark.parametrize("name", ALL)
def test_bad_capacity_is_rejected(name: str) -> None:
    for capacity in (-1.0, 0.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            make(name, capacity=capacity)


def test_unknown_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown scheduler"):
        schedulers.create("nope", capacity=1)


@pytest.mark.parametrize("name", ["proportional", "optimal"])
def test_oracles_need_rates(name: str) -> None:
    s = make(name)
    with pytest.raises(ValueError, match="rates"):
        s.add([1, 2, 3])


@pytest.mark.parametrize("name", ALL)
def test_sampling_realization(name: str) -> None:
    try:
        s = make(name, capacity=2, realization="sampling")
    except ValueError:
        pytest.skip(f"{name} picks its URLs itself and has no sampling realization")
    populate(s, np.arange(30))
    for chosen in run_slots(s, 50, np.random.default_rng(1)):
        assert np.unique(chosen).size == chosen.size


@pytest.mark.parametrize("name", ALL)
def test_set_importance_keeps_learning_and_is_saved(name: str) -> None:
    rng = np.random.default_rng(8)
    s = make(name, capacity=2)
    populate(s, np.arange(20))
    run_slots(s, 30, rng)
    s.take_delta()
    s.set_importance([3, 4], [0.5, 0.25])
    delta = s.take_delta()
    assert sorted(delta["ids"].tolist()) == [3, 4]
    assert delta["url_importance"].tolist() == [0.5, 0.25]
    with pytest.raises(ValueError):
        s.set_importance([3], [0.0])
    with pytest.raises(ValueError):
        s.set_importance([999], [0.5])
    run_slots(s, 10, rng)
    _, x = s.frequencies()
    assert np.all((x > 0) & (x <= 1))


# ----- constraints: host caps, bounds, pause, failures (every scheduler) ----------------


def grouped(s: schedulers.Scheduler, ids: np.ndarray, hosts: int) -> np.ndarray:
    groups = ids % hosts
    s.set_groups(ids, groups)
    return groups


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(4, 60),
    hosts=st.integers(1, 5),
    capacity=st.floats(0.5, 8.0),
    caps=st.lists(st.floats(0.2, 3.0), min_size=5, max_size=5),
    seed=st.integers(0, 2**16),
)
def test_host_caps_hold_in_every_slot(
    name: str, n: int, hosts: int, capacity: float, caps: list[float], seed: int
) -> None:
    s = make(name, capacity=capacity, seed=seed)
    ids = np.arange(n, dtype=np.int64)
    populate(s, ids)
    groups = grouped(s, ids, hosts)
    s.set_group_caps({h: caps[h] for h in range(hosts)})
    slots = 60
    per_host = np.zeros(hosts)
    for chosen in run_slots(s, slots, np.random.default_rng(seed)):
        assert chosen.size <= math.ceil(capacity)
        assert np.unique(chosen).size == chosen.size
        counts = np.bincount(groups[chosen], minlength=hosts)
        for h in range(hosts):
            assert counts[h] <= math.ceil(caps[h] - 1e-9)
        per_host += counts
    for h in range(hosts):
        assert per_host[h] <= caps[h] * slots + math.ceil(caps[h]) + 1e-9


@pytest.mark.parametrize("name", ALL)
def test_bounds_and_pause_are_honoured_exactly(name: str) -> None:
    s = make(name, capacity=2.0, seed=3)
    ids = np.arange(40, dtype=np.int64)
    populate(s, ids)
    s.set_bounds([7], lower=1 / 50, upper=1 / 5)
    s.set_bounds([8], upper=1 / 5)
    s.pause([9])
    polled: dict[int, list[int]] = {7: [], 8: [], 9: []}
    rng = np.random.default_rng(4)
    for slot, chosen in enumerate(run_slots(s, 1000, rng), start=1):
        for i in (7, 8, 9):
            if i in chosen:
                polled[i].append(slot)
    assert polled[9] == []
    gaps7 = np.diff([0, *polled[7]])
    assert gaps7.size >= 1000 // 50
    assert gaps7.max() <= 50 and gaps7[1:].min() >= 5
    if polled[8]:
        assert np.diff(polled[8]).min() >= 5
    _, lower, upper = s.bounds()
    assert lower[7] == pytest.approx(1 / 50) and upper[9] == 0.0


@pytest.mark.parametrize("name", ALL)
def test_pause_and_resume_keep_the_learning(name: str) -> None:
    s = make(name, capacity=2.0, seed=5)
    populate(s, np.arange(20))
    run_slots(s, 40, np.random.default_rng(6))
    before = s.state()
    s.pause([1, 2])
    s.resume([1, 2])
    s.set_bounds([3], lower=0.1, upper=0.5)
    s.report_failures([4, 5], ["transient", "gone"])
    after = s.state()
    # what was learned (the rows take_delta persists; the allocation may move with the
    # bounds in force)
    for key in ("ids", *s.persistent_fields()):
        assert np.array_equal(before[key], after[key], equal_nan=True), key
    run_slots(s, 20, np.random.default_rng(7))  # and it goes on


@pytest.mark.parametrize("name", ALL)
def test_failing_urls_back_off_and_come_back(name: str) -> None:
    """Retired URLs are only probed, and a probe that succeeds revives its URL. The probe
    runs at one poll in 100 slots, not the default one in 1,000 (checked first), so that a
    few hundred slots show what the default needs thousands for."""
    default = make(name, capacity=3.0, seed=9)
    populate(default, np.arange(10, dtype=np.int64))
    default.report_failures([3], "gone")
    assert default.bounds()[2][3] == pytest.approx(1e-3)  # the default probe
    probe_every = 100
    s = make(name, capacity=3.0, seed=9)
    s.set_probe(1 / probe_every)
    ids = np.arange(30, dtype=np.int64)
    populate(s, ids)
    dead = {3, 4, 5}
    rng = np.random.default_rng(10)
    polls_dead = 0
    counted = 2 * probe_every  # the last slots of the first run, all three long retired
    for slot in range(4 * probe_every):
        chosen = s.select()
        bad = np.isin(chosen, list(dead))
        s.report_failures(chosen[bad], "permanent")
        s.feedback(chosen[~bad], rng.random(int((~bad).sum())) < 0.3)
        if slot >= 4 * probe_every - counted:
            polls_dead += int(bad.sum())
    failing_ids, streak, retired = s.failing()
    assert np.all(streak >= 3)
    assert set(failing_ids.tolist()) == dead and retired.all()
    # retired URLs are only probed: once every 1 / probe slots
    assert polls_dead <= 3 * (counted / probe_every + 1)
    # URL 3 comes back: its next probe succeeds and revives it
    dead.discard(3)
    for _ in range(probe_every + probe_every // 10):
        chosen = s.select()
        bad = np.isin(chosen, list(dead))
        s.report_failures(chosen[bad], "permanent")
        s.feedback(chosen[~bad], rng.random(int((~bad).sum())) < 0.3)
    assert set(s.failing()[0].tolist()) == dead
    _, _, upper = s.bounds()
    assert upper[3] == 1.0 and upper[4] <= 1 / probe_every
    # revive by hand
    s.revive([4])
    assert set(s.failing()[0].tolist()) == {5}


@pytest.mark.parametrize("name", ALL)
def test_add_and_remove_under_constraints(name: str) -> None:
    rng = np.random.default_rng(12)
    s = make(name, capacity=3)
    ids = np.arange(30, dtype=np.int64)
    populate(s, ids)
    s.set_groups(ids, ids % 3)
    s.set_group_caps({0: 0.5, 1: 1.0})
    s.set_bounds([5], upper=0.25)
    run_slots(s, 30, rng)
    chosen = s.select()
    s.remove(chosen[:2])
    s.feedback(chosen, np.ones(chosen.size, dtype=bool))  # late feedback of removed ones
    populate(s, np.arange(100, 106))
    s.set_groups(np.arange(100, 106), 0)
    for picked in run_slots(s, 80, rng):
        assert not np.isin(picked, chosen[:2]).any()
        groups = np.where(picked >= 100, 0, picked % 3)
        assert np.count_nonzero(groups == 0) <= 1
        assert np.count_nonzero(groups == 1) <= 1
    _, x = s.frequencies()
    assert x.size == 36 - chosen[:2].size and np.all((x >= 0) & (x <= 1))


@pytest.mark.parametrize("name", ALL)
def test_bad_constraints_are_clear_errors(name: str) -> None:
    s = make(name)
    populate(s, np.arange(5))
    with pytest.raises(ValueError):
        s.set_bounds([1], lower=0.5, upper=0.2)
    with pytest.raises(ValueError):
        s.set_bounds([1], upper=1.5)
    with pytest.raises(ValueError):
        s.set_group_caps({0: 0.0})
    with pytest.raises(ValueError):
        s.set_groups([1, 2], [0.5, 1])
    with pytest.raises(ValueError):
        s.set_bounds([99], upper=0.5)
    with pytest.raises(ValueError):
        s.report_failures([1], ["sometimes"])
    s.report_failures([99], "transient")  # no longer watched: ignored
