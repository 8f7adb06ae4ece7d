"""A new operator's service: the polite default minimum interval, the settings it records
for the admin commands, a change logged with its URL, the retired-URL probe interval; on
SQLite and PostgreSQL where the store is involved."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest

from crawler import schedulers
from crawler.service import CrawlService, SlotSummary
from crawler.service._bounds import Constraints, probe_rate
from crawler.settings import DEFAULT_MIN_INTERVAL_S, load_settings
from crawler.store import NewUrl, Store
from crawler.testsite import ChangingSite
from tests.service.conftest import service_settings as fast_settings


@pytest.fixture
def no_test_override(monkeypatch: pytest.MonkeyPatch) -> None:
    """The defaults as an operator gets them (tests/conftest.py asks for no bound)."""
    monkeypatch.delenv("CRAWLER_DEFAULT_MIN_INTERVAL_S", raising=False)


def test_the_default_is_five_minutes_and_zero_turns_it_off(no_test_override: None) -> None:
    assert load_settings().default_min_interval_s == DEFAULT_MIN_INTERVAL_S == 300.0
    assert load_settings({"default_min_interval_s": 0}).default_min_interval_s == 0


async def _gaps(database_url: str, slots: int, **overrides: object) -> tuple[int, list[int]]:
    """Polls of a single watched URL by the scheduler under the store's rules, and the gaps
    between them (slots), with capacity 50 (compose's) and 10 s slots."""
    with Store(database_url) as store:
        ((_, uid),) = store.add_urls([NewUrl("https://example.org/only")]).added
        settings = load_settings(
            {"database_url": database_url, "capacity": 50.0, "slot_seconds": 10.0, **overrides}
        )
        s = schedulers.create(settings.scheduler, capacity=50.0, seed=1)
        s.add(np.array([uid], dtype=np.int64))
        await Constraints(settings).refresh(s, store, store.watch_list_version())
    polled = []
    for slot in range(slots):
        chosen = s.select()
        if chosen.size:
            polled.append(slot)
            s.feedback(chosen, np.zeros(chosen.size, dtype=bool))
    return len(polled), np.diff(polled).tolist()


async def test_a_single_url_is_polled_every_five_minutes_not_every_slot(
    database_url: str, no_test_override: None
) -> None:
    polls, gaps = await _gaps(database_url, 300)  # 50 minutes of 10 s slots
    assert 10 <= polls <= 11 and set(gaps) == {30}  # every 300 s


async def test_without_the_default_the_budget_polls_it_every_slot(database_url: str) -> None:
    polls, _ = await _gaps(database_url, 300, default_min_interval_s=0)
    assert polls == 300


async def test_a_urls_own_interval_and_discoverys_floors_beat_the_default(
    database_url: str, no_test_override: None
) -> None:
    with Store(database_url) as store:
        added = store.add_urls([NewUrl(f"https://example.org/{k}") for k in range(3)]).added
        ids = np.array(sorted(i for _, i in added), dtype=np.int64)
        store.edit_urls([int(ids[0])], {"min_interval_s": 20.0})  # its own: every 2 slots
        settings = load_settings({"database_url": database_url, "slot_seconds": 10.0})
        s = schedulers.create("bayes", capacity=3.0, seed=1)
        s.add(ids)
        rules = Constraints(settings)
        await rules.refresh(s, store, store.watch_list_version())
    _, _, upper = s.bounds()
    np.testing.assert_allclose(upper, [0.5, 10 / 300, 10 / 300])
    # a start page read every 3 slots by discovery: the default gives way, an own bound not
    rules.set_floors(s, {int(ids[0]): 1 / 3, int(ids[1]): 1 / 3})
    _, lower, upper = s.bounds()
    np.testing.assert_allclose(upper, [0.5, 1 / 3, 10 / 300])
    np.testing.assert_allclose(lower, [1 / 3, 1 / 3, 0.0])


@pytest.mark.slow
async def test_the_service_records_its_settings_and_logs_each_change(
    database_url: str, site: ChangingSite, caplog: pytest.LogCaptureFixture
) -> None:
    with Store(database_url) as store:
        assert store.service_settings() is None
        store.add_urls([NewUrl(u) for u in site.urls()])
    settings = fast_settings(database_url, capacity=40.0, default_min_interval_s=0.25)
    summaries: list[SlotSummary] = []
    caplog.set_level(logging.INFO, logger="crawler.service")
    async with CrawlService(settings) as service:
        await service.run(asyncio.Event(), 60, summaries.append)
    with Store(database_url) as store:
        record = store.service_settings()
    assert record is not None and "database_url" not in record
    assert record["slot_seconds"] == 0.05 and record["default_min_interval_s"] == 0.25
    assert record["capacity"] == 40.0 and record["started_at"]
    # polite: 40 pages, each at most every 5 slots (the budget would poll each every slot)
    polls = sum(s.polls for s in summaries)
    assert 0 < polls <= 40 * (60 / 5 + 1)
    changed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("changed: ")]
    hits = sum(s.hits for s in summaries)
    assert hits > 0 and len(changed) == hits  # every change, with its URL
    assert all(m.removeprefix("changed: ") in site.urls() for m in changed)


def test_the_retired_probe_interval_is_a_setting() -> None:
    settings = load_settings({"slot_seconds": 10.0, "retired_probe_interval_s": 100.0})
    assert probe_rate(settings) == 0.1
    assert probe_rate(load_settings({"slot_seconds": 10.0})) == 10 / 10_800  # 3 h
    s = schedulers.create("bayes", capacity=2.0, seed=1)
    s.add(np.arange(5, dtype=np.int64))
    s.set_probe(probe_rate(settings))
    s.report_failures([3], "gone")
    polls = [slot for slot in range(200) if 3 in s.select().tolist()]
    assert np.diff(polls).tolist() == [10] * (len(polls) - 1) and len(polls) >= 19
    with pytest.raises(ValueError, match="probe"):
        s.set_probe(0.0)
