"""FPA, the Fixed Partitioning Automaton: one test per row of the rule table and invariants."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler import schedulers
from crawler.schedulers.fpa import FPA

N = 4  # states per class in the rule tests: 1 innermost, 4 the boundary


def make(
    p1: list[int],
    levels: dict[int, int],
    n: int = 7,
    capacity: float = 4,
    f: float = 0.25,
    importance: Any = None,
) -> FPA:
    """An FPA over ids 0..n-1 with class P1 = ``p1`` (|p1| must be M) and the given states
    (others at their boundary); P2 is cycled in id order."""
    s = FPA(capacity, seed=3, N=N, f=f)
    s.add(np.arange(n), importance=importance)
    assert s.p1_size == len(p1)
    rank = np.arange(n, dtype=np.int64)
    for j, i in enumerate(p1):
        rank[i] = -1 - j
    s._rank[:] = rank
    s._level[:] = N
    for i, v in levels.items():
        s._level[i] = v
    s._cursor = 0
    s._rebuild()
    return s


def classes(s: FPA) -> dict[int, tuple[int, int]]:
    ids, cls, level = s.automaton()
    return {int(i): (int(c), int(v)) for i, c, v in zip(ids, cls, level, strict=True)}


def same_automaton(a: FPA, b: FPA) -> bool:
    (ia, ca, la), (ib, cb, lb) = a.automaton(), b.automaton()
    return np.array_equal(ia, ib) and np.array_equal(ca, cb) and np.array_equal(la, lb)


def feed(s: FPA, outcomes: dict[int, bool]) -> None:
    s.feedback(np.array(list(outcomes), dtype=np.int64), np.array(list(outcomes.values())))


# ----- the rule table, one row at a time ----------------------------------------------------


def test_hit_in_p1_moves_inward() -> None:
    s = make([0, 1, 2], {0: 3, 1: 1})
    feed(s, {0: True, 1: True, 2: True})
    c = classes(s)
    assert c[0] == (1, 2) and c[1] == (1, 1) and c[2] == (1, 3)  # floor at 1
    assert s.swaps == 0


def test_hit_in_p1_moves_with_probability_w() -> None:
    s = make([0, 1, 2], {0: 3}, importance=np.full(7, 1e-12))
    feed(s, {0: True})
    assert classes(s)[0] == (1, 3)


def test_hit_in_p2_not_at_boundary_moves_toward_boundary() -> None:
    s = make([0, 1, 2], {3: 2, 4: 3})
    feed(s, {3: True, 4: True})
    c = classes(s)
    assert c[3] == (2, 3) and c[4] == (2, 4)
    assert s.swaps == 0  # 4 reached the boundary this slot: no swap before the next hit
    s2 = make([0, 1, 2], {3: 2}, importance=np.full(7, 1e-12))
    feed(s2, {3: True})
    assert classes(s2)[3] == (2, 2)


def test_hit_in_p2_at_boundary_swaps_with_a_p1_boundary_miss() -> None:
    s = make([0, 1, 2], {0: 4, 1: 2, 2: 4})
    feed(s, {3: True, 0: False, 1: False, 2: True})
    c = classes(s)
    assert c[3] == (1, 4) and c[0] == (2, 4)  # swapped, each took the other's state
    assert c[1] == (1, 3)  # a non-boundary miss just steps out
    assert c[2] == (1, 3)  # a hit steps in
    assert s.last_swaps[0].tolist() == [3] and s.last_swaps[1].tolist() == [0]


def test_hit_in_p2_at_boundary_takes_the_p1_miss_nearest_the_boundary() -> None:
    s = make([0, 1, 2], {0: 2, 1: 3, 2: 4})
    feed(s, {3: True, 0: False, 1: False, 2: True})  # 2 is at the boundary but hit
    c = classes(s)
    assert c[3] == (1, 3) and c[1] == (2, 4)
    assert c[0] == (1, 3) and c[2] == (1, 3)


def test_hit_in_p2_at_boundary_picks_at_random_among_equals() -> None:
    chosen = set()
    for seed in range(30):
        s = make([0, 1, 2], {0: 4, 1: 4, 2: 4})
        s._rng = np.random.default_rng(seed)
        feed(s, {3: True, 0: False, 1: False, 2: False})
        # two of the three P1 boundary misses swap with nobody: only one P2 hit
        out = s.last_swaps[1].tolist()
        assert len(out) == 1
        chosen.add(out[0])
    assert chosen == {0, 1, 2}


def test_hit_in_p2_at_boundary_without_p1_miss_does_not_swap() -> None:
    s = make([0, 1, 2], {})
    feed(s, {3: True, 0: True})
    c = classes(s)
    assert c[3] == (2, 4) and c[0] == (1, 3)
    assert s.swaps == 0


def test_hit_in_p2_at_boundary_swaps_with_probability_w() -> None:
    w = np.ones(7)
    w[3] = 1e-12
    s = make([0, 1, 2], {0: 2}, importance=w)
    feed(s, {3: True, 0: False})
    c = classes(s)
    assert c[3] == (2, 4) and c[0] == (1, 3)
    assert s.swaps == 0


def test_miss_in_p2_moves_inward() -> None:
    s = make([0, 1, 2], {3: 4, 4: 2, 5: 1})
    feed(s, {3: False, 4: False, 5: False})
    c = classes(s)
    assert c[3] == (2, 3) and c[4] == (2, 1) and c[5] == (2, 1)


def test_miss_in_p1_not_at_boundary_moves_toward_boundary() -> None:
    s = make([0, 1, 2], {0: 1, 1: 3})
    feed(s, {0: False, 1: False})
    c = classes(s)
    assert c[0] == (1, 2) and c[1] == (1, 4)
    assert s.swaps == 0


def test_miss_in_p1_at_boundary_swaps_with_the_p2_hit_nearest_the_boundary() -> None:
    s = make([0, 1, 2], {1: 2, 2: 2, 3: 2, 4: 3})
    feed(s, {0: False, 3: True, 4: True})
    c = classes(s)
    assert c[4] == (1, 4) and c[0] == (2, 3)  # 4 was nearest P2's boundary
    assert c[3] == (2, 3)  # the other hit steps toward the boundary
    assert s.last_swaps[0].tolist() == [4] and s.last_swaps[1].tolist() == [0]


def test_miss_in_p1_at_boundary_takes_any_p2_hit_regardless_of_w() -> None:
    w = np.ones(7)
    w[5] = 1e-12
    s = make([0, 1, 2], {}, importance=w)
    feed(s, {0: False, 5: True})  # 5 is at P2's boundary but lost its own draw
    c = classes(s)
    assert c[5] == (1, 4) and c[0] == (2, 4)


def test_miss_in_p1_at_boundary_without_p2_hit_does_not_swap() -> None:
    s = make([0, 1, 2], {})
    feed(s, {0: False, 3: False})
    c = classes(s)
    assert c[0] == (1, 4) and c[3] == (2, 3)
    assert s.swaps == 0


def test_leftover_p1_boundary_misses_take_p2_hits_by_state() -> None:
    s = make([0, 1, 2], {2: 1, 3: 2, 4: 3})
    feed(s, {0: False, 1: False, 3: True, 4: True, 5: False})
    c = classes(s)
    assert {i for i, (k, _) in c.items() if k == 1} == {2, 3, 4}
    assert c[3] == (1, 4) and c[4] == (1, 4)
    assert sorted([c[0][1], c[1][1]]) == [2, 3]  # each took its partner's state
    assert c[0][0] == 2 and c[1][0] == 2 and c[5] == (2, 3)


def test_swap_keeps_the_round_robin_place() -> None:
    s = make([0, 1, 2], {})
    ids = s._ids
    assert ids[s._ring_rows].tolist() == [3, 4, 5, 6]
    feed(s, {4: True, 1: False})
    assert ids[s._ring_rows].tolist() == [3, 1, 5, 6]
    assert sorted(ids[s._p1_rows].tolist()) == [0, 2, 4]


# ----- polling, sizes, capacity ------------------------------------------------------------


def test_select_polls_p1_every_slot_and_p2_round_robin() -> None:
    s = schedulers.create("fpa", capacity=4, seed=1, N=N, f=0.5)
    s.add(np.arange(10))
    assert isinstance(s, FPA)
    assert s.p1_size == 2
    seen: list[int] = []
    for _ in range(5):
        sel = s.select().tolist()
        assert len(sel) == 4 and sel[:2] == [0, 1]
        seen += sel[2:]
    assert seen == [2, 3, 4, 5, 6, 7, 8, 9, 2, 3]
    _, x = s.frequencies()
    assert x[:2].tolist() == [1.0, 1.0]
    assert np.allclose(x[2:], 2 / 8)
    assert x.sum() == pytest.approx(4)


def test_fractional_capacity_realizes_the_remainder() -> None:
    s = FPA(2.5, seed=1, N=N, f=0.2)  # M = 2, half a P2 poll per slot
    s.add(np.arange(6))
    sizes = [s.select().size for _ in range(10)]
    assert sizes.count(2) == 5 and sizes.count(3) == 5
    assert s.frequencies()[1].sum() == pytest.approx(2.5)


def test_capacity_change_and_removal_keep_p1_filled() -> None:
    s = FPA(10, seed=1, N=N, f=0.1)
    s.add(np.arange(50))
    assert (s.automaton()[1] == 1).sum() == 9
    s._level[20] = 1  # make 20 the least certain P2 object's opposite
    s._level[np.arange(9, 50)] = 2
    s._level[30] = 4
    s.remove([0, 1])
    ids, cls, level = s.automaton()
    assert (cls == 1).sum() == 9
    assert 30 in ids[cls == 1].tolist()  # nearest P2's boundary was promoted
    s.set_capacity(20)
    assert (s.automaton()[1] == 1).sum() == 18
    s.set_capacity(3)
    ids, cls, level = s.automaton()
    assert (cls == 1).sum() == 2
    assert s.frequencies()[1].sum() == pytest.approx(3)
    s.add([100, 101])
    ids, cls, level = s.automaton()
    assert cls[-2:].tolist() == [2, 2] and level[-2:].tolist() == [N, N]


def test_small_watch_list_polls_everything() -> None:
    s = FPA(10, seed=1)
    s.add(np.arange(5))
    assert sorted(s.select().tolist()) == [0, 1, 2, 3, 4]
    s.add(np.arange(5, 10))
    assert s.p1_size == 9
    assert sorted(s.select().tolist()) == list(range(10))


@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "remove", "slot", "capacity"]),
            st.integers(min_value=0, max_value=10**6),
        ),
        max_size=25,
    ),
    f=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
)
def test_class_sizes_are_invariant(ops: list[tuple[str, int]], f: float) -> None:
    s = FPA(5, seed=0, N=3, f=f)
    rng = np.random.default_rng(0)
    next_id = 0
    for op, arg in ops:
        if op == "add":
            count = 1 + arg % 7
            s.add(np.arange(next_id, next_id + count))
            next_id += count
        elif op == "remove" and s.size:
            ids = s.frequencies()[0]
            s.remove(rng.choice(ids, size=1 + arg % min(3, ids.size), replace=False))
        elif op == "capacity":
            s.set_capacity(0.5 + (arg % 40) / 4)
        else:
            sel = s.select()
            s.feedback(sel, rng.random(sel.size) < 0.5)
        ids, cls, level = s.automaton()
        assert (cls == 1).sum() == s.p1_size == min(int((1 - f) * s.capacity + 1e-9), s.size)
        assert np.all((level >= 1) & (level <= 3))
        ring = s._ring_rows
        assert sorted(ring.tolist()) == np.flatnonzero(cls == 2).tolist()
        assert sorted(s._p1_rows.tolist()) == np.flatnonzero(cls == 1).tolist()
        keys = s._rank[ring]
        assert np.all(np.diff(keys) > 0)


# ----- state --------------------------------------------------------------------------------


def run_slots(a: schedulers.Scheduler, b: schedulers.Scheduler, slots: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(slots):
        sa, sb = a.select(), b.select()
        assert np.array_equal(sa, sb)
        hits = rng.random(sa.size) < 0.4
        a.feedback(sa, hits)
        b.feedback(sb, hits)


def test_state_round_trip_continues_identically() -> None:
    s = schedulers.create("fpa", capacity=7.5, seed=11, N=5, f=0.3)
    assert isinstance(s, FPA)
    s.add(np.arange(0, 120, 2), importance=np.linspace(0.2, 1, 60))
    rng = np.random.default_rng(1)
    for _ in range(40):
        sel = s.select()
        s.feedback(sel, rng.random(sel.size) < 0.4)
    st_ = s.state()
    r = schedulers.restore(st_)
    assert r.params() == s.params()
    run_slots(s, r, 60, 2)
    assert isinstance(r, FPA)
    assert same_automaton(s, r)
    assert s.swaps == r.swaps > 0


def test_merged_deltas_resume_the_automaton() -> None:
    s = schedulers.create("fpa", capacity=6, seed=5, N=4, f=0.3)
    assert isinstance(s, FPA)
    s.add(np.arange(40))
    deltas = [s.take_delta()]
    rng = np.random.default_rng(3)
    for t in range(60):
        sel = s.select()
        s.feedback(sel, rng.random(sel.size) < 0.5)
        if t == 20:
            s.remove([int(s.frequencies()[0][0]), 39])
            s.add([100, 101, 102])
        deltas.append(s.take_delta())
    rows: dict[int, dict[str, Any]] = {}
    merged: dict[str, Any] = {}
    for d in deltas:
        keys = [k for k in d if k.startswith("url_")]
        for j, uid in enumerate(d["ids"].tolist()):
            rows[uid] = {k: d[k][j] for k in keys}
        merged.update({k: v for k, v in d.items() if k != "ids" and k not in keys})
    live = set(s.frequencies()[0].tolist())
    ids = np.array(sorted(i for i in rows if i in live), dtype=np.int64)
    merged["ids"] = ids
    for k in keys:
        merged[k] = np.array([rows[i][k] for i in ids.tolist()])
    r = schedulers.restore(merged)
    assert isinstance(r, FPA)
    assert same_automaton(s, r)
    assert np.array_equal(s.select(), r.select())


# ----- parameters and learning -------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [{"N": 0}, {"N": 1.5}, {"N": True}, {"N": 10**6}, {"f": -0.1}, {"f": 1.5}, {"f": "x"}],
)
def test_bad_parameters(params: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        schedulers.create("fpa", capacity=3, **params)
    with pytest.raises(ValueError):
        schedulers.create("fpa", capacity=0)


def test_learns_the_valuable_urls_when_updates_disappear() -> None:
    n, capacity = 100, 10
    p = 0.3 / np.arange(1, n + 1)
    s = FPA(capacity, seed=2)
    s.add(np.arange(n))
    rng = np.random.default_rng(4)
    hits = []
    for _ in range(3000):
        sel = s.select()
        h = rng.random(sel.size) < p[sel]
        hits.append(h.sum())
        s.feedback(sel, h)
    uniform = capacity * p.mean()  # 0.155 hits per slot; the best (top 9 every slot): 0.879
    assert np.mean(hits[-1000:]) > 2.5 * uniform
    _, cls, _ = s.automaton()
    assert p[cls == 1].mean() > 3 * p.mean()
