"""Operator bounds, pause and the failure record from the store into the scheduler,
through the service's unit conversion, on SQLite and PostgreSQL."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import numpy as np
import pytest

from crawler import schedulers
from crawler.service._bounds import Constraints, interval_bounds
from crawler.service._failures import FailureKeeper
from crawler.store import NewUrl, PollRecord, SlotRecord, Store
from tests.service.conftest import service_settings

SLOT_S = 10.0


def test_interval_bounds_convert_seconds_to_polls_per_slot() -> None:
    nan = np.nan
    lower, upper = interval_bounds(
        10.0,
        np.array([50.0, nan, nan, 0.0, 5.0, 7200.0, nan]),
        np.array([500.0, nan, 0.0, nan, nan, nan, 60.0]),
        default_min_s=100.0,
        default_max_s=3600.0,
    )
    np.testing.assert_allclose(upper, [0.2, 0.1, 0.1, 1.0, 1.0, 10 / 7200, 10 / 60])
    # own min 7200 s beats the default max 3600 s; own max 60 s beats the default min 100 s
    np.testing.assert_allclose(
        lower, [0.02, 10 / 3600, 0.0, 10 / 3600, 10 / 3600, 10 / 7200, 10 / 60]
    )
    plain = interval_bounds(10.0, np.full(2, nan), np.full(2, nan))
    assert plain[0].tolist() == [0.0, 0.0] and plain[1].tolist() == [1.0, 1.0]


async def _bounded_scheduler(
    database_url: str, name: str
) -> tuple[schedulers.Scheduler, np.ndarray, list[int], int]:
    """A scheduler of 40 URLs given its bounds and pause by the service's rules from the
    store: two URLs at least every 50 slots and at most every 5, one paused."""
    with Store(database_url) as store:
        added = store.add_urls([NewUrl(f"https://example.org/{k}") for k in range(40)]).added
        ids = np.array(sorted(i for _, i in added), dtype=np.int64)
        bounded, paused = [int(ids[7]), int(ids[11])], int(ids[9])
        store.edit_urls(bounded, {"min_interval_s": 5 * SLOT_S, "max_interval_s": 50 * SLOT_S})
        store.edit_urls([paused], {"paused": True})
        settings = service_settings(database_url, slot_seconds=SLOT_S, capacity=4.0)
        s = schedulers.create(name, capacity=4.0, seed=2)
        s.add(ids)
        rules = Constraints(settings)
        await rules.refresh(s, store, store.watch_list_version())
    return s, ids, bounded, paused


@pytest.mark.parametrize("name", ["bayes", "lakg"])
async def test_bounds_and_pause_from_the_store_hold_exactly_slot_by_slot(
    database_urls: dict[str, str], name: str
) -> None:
    """Bounds and pause through the service: two URLs at least every 50 slots and at most
    every 5, one paused. The database only feeds the set-up: SQLite and PostgreSQL must give
    schedulers equal in every byte (state, bounds, pause, RNG), so the 2,000 slots, which
    read nothing else, run once for both."""
    built = [await _bounded_scheduler(url, name) for url in database_urls.values()]
    s, ids, bounded, paused = built[0]
    for other, other_ids, other_bounded, other_paused in built[1:]:
        assert other_ids.tolist() == ids.tolist()
        assert (other_bounded, other_paused) == (bounded, paused)
        assert pickle.dumps(other) == pickle.dumps(s)  # the whole scheduler, byte for byte
    _, lower, upper = s.bounds()
    assert upper[ids == paused].tolist() == [0.0]  # the store's bounds reached it
    np.testing.assert_allclose(lower[np.isin(ids, bounded)], 1 / 50)
    np.testing.assert_allclose(upper[np.isin(ids, bounded)], 1 / 5)
    # one bounded URL changes every slot (it would take far more than 1 in 5 polls), the
    # other never (it would get far fewer than 1 in 50): each pushes on one of the bounds,
    # and both are reached within a few hundred slots
    hot, cold = bounded
    rng = np.random.default_rng(3)
    p = rng.uniform(0.0, 0.3, ids.size)
    last: dict[int, int] = {}
    gaps: dict[int, list[int]] = {hot: [], cold: []}
    slots = 2_000
    for slot in range(1, slots + 1):
        polled = s.select()
        assert paused not in polled.tolist()
        for url in bounded:
            if url in polled.tolist():
                if url in last:
                    gaps[url].append(slot - last[url])
                last[url] = slot
        hits = rng.random(polled.size) < p[np.searchsorted(ids, polled)]
        hits[polled == hot] = True
        hits[polled == cold] = False
        s.feedback(polled, hits)
    every = gaps[hot] + gaps[cold]
    assert min(every) >= 5 and max(every) <= 50
    assert all(slots - last[url] < 50 for url in bounded)
    assert 5 in gaps[hot] and 50 in gaps[cold]  # both bounds were reached, and held


async def test_edits_of_a_running_watch_list_reach_the_scheduler(database_url: str) -> None:
    with Store(database_url) as store:
        added = store.add_urls([NewUrl(f"https://example.org/{k}") for k in range(5)]).added
        ids = np.array(sorted(i for _, i in added), dtype=np.int64)
        settings = service_settings(
            database_url, slot_seconds=SLOT_S, default_max_interval_s=100 * SLOT_S
        )
        s = schedulers.create("bayes", capacity=1.0, seed=1)
        s.add(ids)
        rules = Constraints(settings)
        await rules.refresh(s, store, store.watch_list_version())
        _, lower, upper = s.bounds()
        np.testing.assert_allclose(lower, 0.01)  # the default applies to every URL
        store.edit_urls([int(ids[0])], {"min_interval_s": 20 * SLOT_S, "paused": True})
        store.edit_urls([int(ids[1])], {"max_interval_s": 0.0})  # none, whatever the default
        await rules.refresh(s, store, store.watch_list_version())
        _, lower, upper = s.bounds()
        assert upper[0] == 0.0  # paused
        assert lower[1] == 0.0 and upper[1] == 1.0
        store.edit_urls([int(ids[0])], {"paused": False})
        await rules.refresh(s, store, store.watch_list_version())
        _, lower, upper = s.bounds()
        assert upper[0] == pytest.approx(0.05) and lower[0] == pytest.approx(0.01)


async def test_discovery_floors_merge_with_the_operators_bounds(database_url: str) -> None:
    """Watched start pages' floors (discovery's pacer) raise a URL's lower bound, never past
    the operator's upper bound, and survive a later edit of the watch list."""
    with Store(database_url) as store:
        added = store.add_urls([NewUrl(f"https://example.org/{k}") for k in range(4)]).added
        ids = np.array(sorted(i for _, i in added), dtype=np.int64)
        store.edit_urls([int(ids[1])], {"min_interval_s": 10 * SLOT_S})  # at most 0.1
        store.edit_urls([int(ids[2])], {"max_interval_s": 2 * SLOT_S})  # at least 0.5
        settings = service_settings(database_url, slot_seconds=SLOT_S)
        s = schedulers.create("bayes", capacity=1.0, seed=1)
        s.add(ids)
        rules = Constraints(settings)
        await rules.refresh(s, store, store.watch_list_version())
        floors = {int(ids[0]): 1 / 3, int(ids[1]): 1 / 3, int(ids[2]): 1 / 3}
        assert rules.set_floors(s, floors) == 2  # ids[2]'s own 0.5 is already higher
        assert rules.set_floors(s, floors) == 0  # unchanged: nothing given again
        _, lower, upper = s.bounds()
        np.testing.assert_allclose(lower, [1 / 3, 0.1, 0.5, 0.0])
        np.testing.assert_allclose(upper, [1.0, 0.1, 1.0, 1.0])
        store.edit_urls([int(ids[3])], {"importance": 2.0})  # a watch-list change
        await rules.refresh(s, store, store.watch_list_version())
        _, lower, _ = s.bounds()
        np.testing.assert_allclose(lower, [1 / 3, 0.1, 0.5, 0.0])
        assert rules.set_floors(s, {int(ids[1]): 0.05}) == 2  # ids[0]'s floor dropped
        _, lower, _ = s.bounds()
        np.testing.assert_allclose(lower, [0.0, 0.05, 0.5, 0.0])


async def test_the_failure_record_survives_a_restart(database_url: str) -> None:
    """What the service commits with each slot gives a restarted scheduler the same
    failing URLs, back-off and retirement; a success or an operator revives."""
    now = datetime.now(UTC)
    with Store(database_url) as store:
        added = store.add_urls([NewUrl(f"https://example.org/{k}") for k in range(20)]).added
        ids = np.array(sorted(i for _, i in added), dtype=np.int64)
        settings = service_settings(database_url, slot_seconds=SLOT_S)
        s = schedulers.create("bayes", capacity=2.0, seed=1)
        s.add(ids)
        live = Constraints(settings)
        await live.refresh(s, store, store.watch_list_version())
        gone, missing, slow = int(ids[0]), int(ids[1]), int(ids[2])
        outcomes = [
            [PollRecord(gone, "error", now, 410, error_kind="http_4xx"),
             PollRecord(missing, "error", now, 404, error_kind="http_4xx"),
             PollRecord(slow, "error", now, None, error_kind="timeout", error="no answer")],
            [PollRecord(missing, "error", now, 404, error_kind="http_4xx"),
             PollRecord(slow, "error", now, None, error_kind="timeout")],
            [PollRecord(missing, "error", now, 404, error_kind="http_4xx"),
             PollRecord(slow, "error", now, None, error_kind="timeout")],
        ]  # fmt: skip
        for k, polls in enumerate(outcomes, 1):
            s.select()
            failures = live.after_slot(s, polls)
            store.commit_slot(
                SlotRecord(k, "bayes", now, 0.1, len(polls), 0, 0, 0, len(polls),
                           failures=failures),
                polls, s.take_delta(),
            )  # fmt: skip
        want_ids, want_streak, want_retired = s.failing()
        assert want_ids.tolist() == [gone, missing, slow]
        assert want_streak.tolist() == [1, 3, 3] and want_retired.tolist() == [True, True, False]

        # "kill -9": a new scheduler from the saved state, new Constraints, same store
        state = store.load_scheduler_state("bayes")
        assert state is not None
        again = schedulers.restore(state)
        fresh = Constraints(settings)
        await fresh.refresh(again, store, store.watch_list_version())
        got = again.failing()
        assert got[0].tolist() == want_ids.tolist()
        assert got[1].tolist() == want_streak.tolist()
        assert got[2].tolist() == want_retired.tolist()
        _, _, upper_live = s.bounds()
        _, _, upper_again = again.bounds()
        np.testing.assert_allclose(upper_again[:3], upper_live[:3], rtol=0.35)
        assert fresh.failures.records == live.failures.records

        # a success revives (a baseline poll too, which gives the scheduler no feedback)
        again.select()
        rows = fresh.after_slot(again, [PollRecord(slow, "baseline", now, 200)])
        assert [(r.url_id, r.streak) for r in rows] == [(slow, 0)]
        store.commit_slot(SlotRecord(4, "bayes", now, 0.1, 1, 0, 0, 0, 0, failures=rows), [])
        assert [r.url_id for _, r in store.url_failures()] == [gone, missing]
        # the operator revives a retired one: the running service sees it at the next refresh
        store.revive_urls([gone])
        await fresh.refresh(again, store, store.watch_list_version())
        assert again.failing()[0].tolist() == [missing]
        assert gone not in fresh.failures.records


def test_replay_plans() -> None:
    from crawler.service._failures import _replay
    from crawler.store import FailureRow

    assert _replay(FailureRow(1, 3, 3, True, "permanent")) == ["gone", "permanent", "permanent"]
    assert _replay(FailureRow(1, 2, 0, False, "transient")) == ["transient", "transient"]
    assert _replay(FailureRow(1, 1, 1, True, "gone")) == ["gone"]
    assert _replay(FailureRow(1, 3, 1, True, "gone")) == ["gone", "transient", "gone"]
    assert _replay(FailureRow(1, 500, 0, False, "transient")) == ["transient"] * 16
    assert FailureKeeper().records == {}


@pytest.mark.slow
async def test_a_running_service_applies_edits_at_its_next_slot(database_url: str) -> None:
    """`crawler edit` / `pause` while the real service runs over loopback HTTP: the paused
    URLs are not polled again, the bounded one not more often than its minimum interval."""
    import asyncio

    from sqlalchemy import select

    from crawler.service import CrawlService, SlotSummary
    from crawler.store.models import poll_log
    from crawler.testsite import ChangingSite, zipf_rates

    site = ChangingSite(zipf_rates(12, 0.9, 0.3), page_size=2_000, seed=2, manual=True)
    await site.start()
    try:
        with Store(database_url) as store:
            added = dict(store.add_urls([NewUrl(u) for u in site.urls()]).added)
        ids = [added[site.url(k)] for k in range(1, 13)]
        paused, bounded = ids[:3], ids[3]
        settings = service_settings(database_url, slot_seconds=0.05, capacity=3.0)
        edited_at: list[int] = []

        async with CrawlService(settings) as service:

            def on_slot(summary: SlotSummary) -> None:
                site.tick()
                if summary.seq == 40:
                    with Store(database_url) as admin:
                        admin.edit_urls(paused, {"paused": True})
                        admin.edit_urls([bounded], {"min_interval_s": 10 * 0.05})
                    assert service.loop.scheduler is not None
                    edited_at.append(service.loop.scheduler.slot)

            await service.run(asyncio.Event(), 200, on_slot)
        with Store(database_url) as store, store.engine.connect() as conn:
            rows = conn.execute(select(poll_log.c.url_id, poll_log.c.slot)).all()
    finally:
        await site.stop()
    cut = edited_at[0] + 2  # seen at the next slot (a slot may be selecting meanwhile)
    assert any(u in paused and s <= edited_at[0] for u, s in rows)  # polled before
    assert not [(u, s) for u, s in rows if u in paused and s > cut]
    slots = sorted(s for u, s in rows if u == bounded and s > cut)
    assert len(slots) >= 5 and min(np.diff(slots)) >= 10
    before = sorted(s for u, s in rows if u == bounded and s <= edited_at[0])
    assert min(np.diff(before)) < 10  # the bound is what spaced it out


async def test_discovery_ceilings_bound_its_urls_and_hold_their_floors_below(
    database_url: str,
) -> None:
    """The URLs discovery watched get ceilings (the smaller upper bound wins, never below
    the operator's own lower bound); a floor is held to half its ceiling; without ceilings
    the bounds are the operator's again."""
    with Store(database_url) as store:
        added = store.add_urls([NewUrl(f"https://example.org/{k}") for k in range(4)]).added
        ids = np.array(sorted(i for _, i in added), dtype=np.int64)
        store.edit_urls([int(ids[2])], {"max_interval_s": 2 * SLOT_S})  # at least 0.5
        settings = service_settings(database_url, slot_seconds=SLOT_S)
        s = schedulers.create("bayes", capacity=1.0, seed=1)
        s.add(ids)
        rules = Constraints(settings)
        await rules.refresh(s, store, store.watch_list_version())
        rules.set_floors(s, {int(ids[0]): 0.3, int(ids[1]): 0.05})
        ceilings = {int(ids[0]): 0.2, int(ids[1]): 0.2, int(ids[2]): 0.2}
        assert rules.set_ceilings(s, ceilings) == 3
        assert rules.set_ceilings(s, ceilings) == 0  # unchanged: nothing given again
        _, lower, upper = s.bounds()
        np.testing.assert_allclose(upper, [0.2, 0.2, 0.5, 1.0])  # ids[2]: its own 0.5 holds
        np.testing.assert_allclose(lower, [0.1, 0.05, 0.5, 0.0])  # ids[0]: half its ceiling
        store.edit_urls([int(ids[3])], {"importance": 2.0})  # a watch-list change keeps them
        await rules.refresh(s, store, store.watch_list_version())
        _, lower, upper = s.bounds()
        np.testing.assert_allclose(upper, [0.2, 0.2, 0.5, 1.0])
        assert rules.set_ceilings(s, {}) == 3
        _, lower, upper = s.bounds()
        np.testing.assert_allclose(upper, [1.0, 1.0, 1.0, 1.0])
        np.testing.assert_allclose(lower, [0.3, 0.05, 0.5, 0.0])
