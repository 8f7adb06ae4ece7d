"""Change environments: hit statistics of both models, exact time-varying p, switches."""

from __future__ import annotations

import numpy as np
import pytest

from crawler.sim import AdjacentRankSwap, Environment, MirrorSwap, get_env, zipf


def _poll_every(env: Environment, ids: np.ndarray, k: int, slots: int) -> float:
    """Poll ``ids`` every k slots (first at slot k); the hit rate per poll."""
    hits = polls = 0
    for slot in range(1, slots + 1):
        env.begin_slot()
        if slot % k == 0:
            out = env.poll(ids)
            hits += int(out.sum())
            polls += out.size
    return hits / polls


@pytest.mark.parametrize(("p", "k"), [(0.1, 5), (0.02, 20), (0.5, 1)])
def test_overwrite_regular_polling_many(p: float, k: int) -> None:
    env = Environment(np.full(400, p), 10.0, seed=1)
    rate = _poll_every(env, env.ids, k, 200 * k)
    assert rate == pytest.approx(1 - (1 - p) ** k, abs=0.01)


def test_overwrite_regular_polling_few_uses_the_scalar_path() -> None:
    p, k = 0.1, 4
    env = Environment(np.full(3, p), 1.0, seed=2)
    rate = _poll_every(env, env.ids, k, 40_000)
    assert rate == pytest.approx(1 - (1 - p) ** k, abs=0.012)


def test_first_poll_counts_from_slot_zero() -> None:
    p, k = 0.05, 10
    hits = 0
    trials = 400
    for seed in range(trials):
        env = Environment(np.full(20, p), 1.0, seed=seed)
        for _ in range(k):
            env.begin_slot()
        hits += int(env.poll(env.ids).sum())
    assert hits / (20 * trials) == pytest.approx(1 - (1 - p) ** k, abs=0.015)


@pytest.mark.parametrize("count", [3, 300])
def test_disappear_hits_with_probability_p(count: int) -> None:
    p = 0.3
    env = Environment(np.full(count, p), 1.0, model="disappear", seed=3)
    slots = 60_000 // count
    rate = _poll_every(env, env.ids, 3, 3 * slots)
    assert rate == pytest.approx(p, abs=0.012)


def test_time_varying_p_is_exact() -> None:
    """p = 0.02 for 10 slots, then 0.2 for 5: a poll at slot 15 hits w.p. 1 - .98^10 .8^5."""
    hits = 0
    env = Environment(np.full(20_000, 0.02), 1.0, seed=4)
    for _ in range(10):
        env.begin_slot()
    env.begin_slot()  # slot 11: from here on p = 0.2
    env.set_values(env.ids, np.full(env.n, 0.2))
    for _ in range(4):
        env.begin_slot()
    hits = int(env.poll(env.ids).sum())
    expected = 1 - 0.98**10 * 0.8**5
    assert hits / env.n == pytest.approx(expected, abs=0.012)
    assert env.version == 1


def test_p_zero_never_hits_and_p_one_always_hits() -> None:
    env = Environment(np.array([0.0, 1.0, 0.0, 1.0]), 1.0, seed=5)
    for _ in range(50):
        env.begin_slot()
        assert env.poll(env.ids).tolist() == [False, True, False, True]


def test_adjacent_rank_swap_follows_the_rule() -> None:
    by_rank = zipf(0.9, 1.5, 50)
    env = Environment(by_rank.copy(), 1.0, switch=AdjacentRankSwap(by_rank, every=10), seed=6)
    switch = env.switch
    assert isinstance(switch, AdjacentRankSwap)
    rng_ranks: list[int] = []
    slots = 3000
    # p by rank after every slot, compared with the Zipf values at once after the loop: an
    # assert_allclose per slot was four fifths of the test's CPU
    p_by_rank = np.empty((slots, by_rank.size))
    for slot in range(slots):
        before = switch.url_at_rank.copy()
        changed = env.begin_slot()
        if changed is not None and changed.size:
            moved = np.flatnonzero(before != switch.url_at_rank)
            # exactly two neighbouring ranks traded their URLs
            assert moved.size == 2 and moved[1] == moved[0] + 1
            assert set(changed.tolist()) == set(before[moved].tolist())
            rng_ranks.append(int(moved[0]))
        env.poll(np.array([0], dtype=np.int64))
        p_by_rank[slot] = env.p[switch.url_at_rank]
    # p of every URL is the Zipf value of its current rank, after every slot
    np.testing.assert_allclose(p_by_rank, np.broadcast_to(by_rank, p_by_rank.shape))
    assert len(rng_ranks) > 250
    # the swapped rank is sampled with probability proportional to p
    share_top = np.mean(np.array(rng_ranks) == 0)
    assert share_top == pytest.approx(by_rank[0] / by_rank.sum(), abs=0.07)


def test_switch_every_r_polls() -> None:
    env = get_env("switch1k").build(7)
    switched_at = []
    for slot in range(1, 3501):
        changed = env.begin_slot()
        if changed is not None:
            switched_at.append(slot)
        env.poll(np.array([slot % env.n], dtype=np.int64))
    assert switched_at == [1001, 2001, 3001]


def test_mirror_swap_every_2500_slots() -> None:
    env = get_env("thesis-switch").build(8)
    assert isinstance(env.switch, MirrorSwap)
    assert env.importance is not None
    p0, w0 = env.p.copy(), env.importance.copy()
    for slot in range(1, 5002):
        changed = env.begin_slot()
        if slot in (2501, 5001):
            assert changed is not None and changed.size == env.n
            flipped = slot == 2501
            np.testing.assert_array_equal(env.p, p0[::-1] if flipped else p0)
            np.testing.assert_array_equal(env.importance, w0[::-1] if flipped else w0)
        else:
            assert changed is None


def test_switch_keeps_hit_probability_exact_across_the_change() -> None:
    """URL 0 and URL n-1 trade p at slot 2501; a poll of both at 2510 after polls at 2490."""
    n = 4000
    p = np.where(np.arange(n) < n // 2, 0.3, 0.01)
    env = Environment(p, 1.0, switch=MirrorSwap(2500), seed=9)
    first = np.arange(n // 2, dtype=np.int64)
    for slot in range(1, 2511):
        env.begin_slot()
        if slot == 2490:
            env.poll(env.ids)
    rate = float(env.poll(first).mean())
    assert rate == pytest.approx(1 - 0.7**10 * 0.99**10, abs=0.03)


def test_values_set_before_the_first_slot_apply_from_slot_one() -> None:
    env = Environment(np.full(20_000, 0.01), 1.0, seed=10)
    env.set_values(env.ids, np.full(env.n, 0.1))
    for _ in range(3):
        env.begin_slot()
    assert float(env.poll(env.ids).mean()) == pytest.approx(1 - 0.9**3, abs=0.012)
