"""The per-source caps on new pages, and the ceilings of the URLs discovery watched."""

from __future__ import annotations

import math

import pytest

from crawler.service._trap_caps import DAY_S, NewPageCaps, day_start, watched_ceilings

NOON = 20_000 * DAY_S + DAY_S / 2


def test_new_pages_are_capped_per_slot_and_per_day() -> None:
    caps = NewPageCaps(per_slot=3, per_day=5)
    assert caps.room(1, NOON) == 3
    assert [caps.take(1, NOON) for _ in range(4)] == [None, None, None, "new_per_slot"]
    assert caps.room(1, NOON) == 0 and caps.room(2, NOON) == 3  # per source
    caps.new_slot()
    assert caps.room(1, NOON) == 2  # the day's 5 less 3
    assert [caps.take(1, NOON + 1) for _ in range(3)] == [None, None, "new_per_day"]
    caps.new_slot()
    assert caps.take(1, NOON + 2) == "new_per_day"
    assert caps.room(1, NOON + DAY_S) == 3  # a new UTC day
    assert caps.take(1, NOON + DAY_S) is None


def test_the_days_count_is_taken_back_after_a_restart(caplog: pytest.LogCaptureFixture) -> None:
    caps = NewPageCaps(per_slot=10, per_day=5)
    caps.load({1: 4, 2: 9}, NOON)
    assert caps.room(1, NOON) == 1 and caps.room(2, NOON) == 0
    assert caps.take(2, NOON, "http://trap/") == "new_per_day"
    assert caps.take(2, NOON, "http://trap/") == "new_per_day"
    warnings = [r for r in caplog.records if "discovery_max_new_per_day" in r.getMessage()]
    assert len(warnings) == 1  # logged once per source and day
    caps.forget([1, 2])
    assert caps.room(2, NOON) == 5
    assert day_start(NOON) == 20_000 * DAY_S


def test_watched_ceilings_share_the_capacity() -> None:
    ceilings = watched_ceilings(range(40), 0.5, 20.0, others=100)
    assert set(ceilings) == set(range(40))
    assert sum(ceilings.values()) == pytest.approx(10.0)  # half of 20, together
    # 4 operator URLs use at most 4 polls a slot: discovery's URLs may have the other 16
    assert sum(watched_ceilings(range(40), 0.5, 20.0, others=4).values()) == pytest.approx(16)
    assert watched_ceilings(range(5), 0.5, 20.0, others=100) == {}  # 2 each: bounds nothing
    assert watched_ceilings(range(40), 1.0, 20.0, others=100) == {}  # share 1: no bound
    assert watched_ceilings([], 0.5, 20.0, others=100) == {}
    # the start pages that pay (a floor) get more of the budget; the total stays within it
    floors = {0: 0.5, 1: 0.5} | {k: 0.01 for k in range(2, 40)}
    paced = watched_ceilings(range(40), 0.5, 20.0, others=100, floors=floors)
    assert paced[0] == paced[1] == 1.0 and paced[2] < 0.2
    assert sum(paced.values()) <= 10.0 + 1e-9


def test_a_paced_start_page_keeps_room_for_its_deadline_within_the_budget() -> None:
    # 50 marked pages paced every 3 slots among 900 others: each keeps a ceiling just above 1/3, so
    # the guard's minimum gap (ceil(1 / ceiling)) is its deadline, 3 slots
    floors = {k: 1 / 3 for k in range(50)} | {k: 0.003 for k in range(50, 950)}
    ceilings = watched_ceilings(range(950), 0.5, 40.0, 4000, floors, marked=range(50))
    assert all(ceilings[k] > 1 / 3 and math.ceil(1 / ceilings[k]) == 3 for k in range(50))
    assert sum(ceilings.values()) <= 20.0 + 1e-9
    # floors past the budget: the rooms are scaled down to it, never past it
    crowded = watched_ceilings(
        range(11), 0.5, 6.0, others=3, floors=dict.fromkeys(range(11), 1 / 3)
    )
    assert sum(crowded.values()) == pytest.approx(3.0)
