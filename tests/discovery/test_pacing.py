"""The start-page pacer: read intervals of watched start pages from their yield of new pages."""

from __future__ import annotations

import itertools
import random

import pytest

from crawler.discovery import StartPacer


def test_a_paying_page_is_read_at_the_target_and_a_barren_one_less_and_less() -> None:
    pacer = StartPacer(target_slots=3, min_yield=0.02)
    pacer.add("http://e.com/pays", 0)
    pacer.add("http://e.com/barren", 0)
    rng = random.Random(1)
    intervals: list[float] = []
    for slot in range(1, 301):
        if rng.random() < 0.1:  # one new page every 10 slots, on average
            pacer.credit("http://e.com/pays", slot)
        intervals.append(pacer.interval("http://e.com/barren", slot))
        if slot >= 20:
            assert pacer.interval("http://e.com/pays", slot) == 3.0
    # a new page: the prior's yield (0.1 per slot) reads it at the target at first
    assert intervals[0] == 3.0
    # a page that never pays is read at growing intervals, never past the cap
    assert intervals == sorted(intervals)
    assert intervals[50] > 10 and intervals[-1] <= 100
    assert pacer.yield_of("http://e.com/pays", 300) == pytest.approx(0.1, abs=0.04)


def test_intervals_are_whole_slots_and_move_in_quarter_octaves() -> None:
    pacer = StartPacer(target_slots=2, min_yield=0.05, forget=1.0)
    pacer.add("u", 0)
    seen = {pacer.interval("u", slot) for slot in range(0, 2_000)}
    assert all(i == int(i) for i in seen)
    big = sorted(i for i in seen if i >= 8)
    # past 8 slots, consecutive intervals differ by about a quarter octave (2^0.25 = 1.19)
    assert all(1.1 < b / a < 1.35 for a, b in itertools.pairwise(big))
    assert 80 < max(seen) <= 100  # the cap (on the grid)


def test_a_page_that_stops_paying_is_read_less_again() -> None:
    pacer = StartPacer(target_slots=3, min_yield=0.02, forget=0.99)
    pacer.add("u", 0)
    for slot in range(1, 200):
        if slot % 5 == 0:
            pacer.credit("u", slot)
    assert pacer.interval("u", 200) == 3.0
    assert pacer.interval("u", 800) > 20  # 600 slots without a new page


def test_floors_are_scaled_down_together_past_the_cap() -> None:
    pacer = StartPacer(target_slots=2)
    for i in range(100):
        pacer.add(f"u{i}", 0)
    free = pacer.floors(0)
    assert all(f == 0.5 for f in free.values())  # 50 polls per slot asked in all
    capped = pacer.floors(0, cap=10.0)
    assert sum(capped.values()) == pytest.approx(10.0)
    assert len(set(capped.values())) == 1


def test_state_survives_a_restart_and_bad_entries_are_ignored() -> None:
    pacer = StartPacer()
    pacer.add("pays", 0)
    pacer.add("barren", 0)
    for slot in range(1, 100, 4):
        pacer.credit("pays", slot)
    saved = pacer.state(100)
    again = StartPacer()
    again.add("pays", 7)
    again.add("barren", 7)
    again.restore({**saved, "gone": [1.0, 2.0], "barren": "nonsense"}, 7)  # type: ignore[dict-item]
    assert "gone" not in again
    assert again.yield_of("pays", 7) == pytest.approx(pacer.yield_of("pays", 100), rel=1e-3)
    assert again.interval("barren", 7) == 3.0  # unreadable: the prior, as a new page


@pytest.mark.parametrize(
    "kwargs",
    [{"target_slots": 0}, {"min_yield": 0}, {"forget": 0}, {"max_interval_slots": 1}],
)
def test_bad_parameters_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        StartPacer(**kwargs)  # type: ignore[arg-type]


def test_the_pages_marked_as_sources_come_first_then_their_links_share_the_rest() -> None:
    """50 section indexes, each a source, and the 2,500 old articles they link to: scaled all
    together, a section would be read about once in 125 slots; marked, each is read at its
    own pace and the articles share what is left."""
    pacer = StartPacer(target_slots=3)
    sections = [f"s{i}" for i in range(50)]
    for section in sections:
        pacer.add(section, 0, marked=True)
        for k in range(50):
            pacer.add(f"{section}/a{k}", 0)
    floors = pacer.floors(0, cap=20.0)
    assert sum(floors.values()) == pytest.approx(20.0)
    assert all(floors[s] == pytest.approx(1 / 3) for s in sections)  # 16.7 polls: whole
    articles = [f for u, f in floors.items() if u not in sections]
    assert sum(articles) == pytest.approx(20.0 - 50 / 3)
    tight = pacer.floors(0, cap=10.0)  # the marked ones alone are over it: only they share
    assert sum(tight[s] for s in sections) == pytest.approx(10.0)
    assert all(tight[u] < 1e-9 for u in tight if u not in sections)
    pacer.remove("s0")
    pacer.add("s0", 0)  # added again from another source's links: no longer first
    assert pacer.floors(0, cap=20.0)["s0"] < 1 / 3
