"""Host caps in the service: the cap derivation, what the fetcher's answers teach it, and the
crawl loop giving groups and caps to the scheduler at start, after a restore and after a
watch-list change (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from crawler import schedulers
from crawler.fetch import validate_url
from crawler.service import CrawlService, SlotSummary
from crawler.service._caps import DRIFT_EVERY, HEADROOM, MIN_CAP, HostCaps, derive_cap
from crawler.store import NewUrl, Store, UrlRecord
from crawler.testsite import ChangingSite, zipf_rates
from crawler.testsite.hostile import HostileServer
from crawler.workers import PollAnswer
from tests.service.conftest import service_settings

# ----- the derivation ------------------------------------------------------------------


def test_a_delay_of_one_second_allows_two_polls_per_two_second_slot() -> None:
    # 2 polls, with 10 % headroom for the slots' start jitter
    cap = derive_cap(slot_s=2.0, window_s=2.0, delay_s=1.0, response_s=0.01, concurrency=2)
    assert cap == pytest.approx(2.0 * HEADROOM)
    # a deadline shorter than the slot: the last poll must be answered by then
    cap = derive_cap(slot_s=2.0, window_s=1.5, delay_s=1.0, response_s=0.6, concurrency=2)
    assert cap == pytest.approx(1.9 * HEADROOM)


def test_crawl_delay_and_slow_responses_lower_the_cap() -> None:
    assert derive_cap(
        slot_s=2.0, window_s=2.0, delay_s=4.0, response_s=0.0, concurrency=2
    ) == pytest.approx(0.5 * HEADROOM)
    # no delay: the response time over the concurrency spaces the requests
    assert derive_cap(
        slot_s=10.0, window_s=10.0, delay_s=0.0, response_s=1.0, concurrency=2
    ) == pytest.approx(19.0 * HEADROOM)
    # pages slower than the slot: one request at a time, one poll every t / L slots
    assert derive_cap(
        slot_s=2.0, window_s=2.0, delay_s=1.0, response_s=5.0, concurrency=1
    ) == pytest.approx(0.4 * HEADROOM)
    # ... and with 4 at a time: 4 per 8 s (no slot is on time anyway: not starved)
    assert derive_cap(
        slot_s=2.0, window_s=2.0, delay_s=1.0, response_s=8.0, concurrency=4
    ) == pytest.approx(1.0 * HEADROOM)


def test_nothing_limits_a_host_without_delay_or_response_time() -> None:
    assert derive_cap(slot_s=2.0, window_s=2.0, delay_s=0.0, response_s=0.0, concurrency=2) is None


def _answer(url_id: int, outcome: str = "ok", **fields: Any) -> PollAnswer:
    values: dict[str, Any] = {
        "url_id": url_id, "outcome": outcome, "status": 200, "content_type": "text/html",
        "etag": None, "last_modified": None, "error_kind": None, "error": None,
        "duration_s": 0.01, "bytes_received": 100, "retry_after_s": None,
        "final_url": f"http://h/{url_id}", "content_hash": None, "raw_hash": None,
        "changed": False, "text": None, "parsed": True,
    }  # fmt: skip
    values.update(fields)
    return PollAnswer(**values)


def _records(hosts: dict[int, str]) -> dict[int, UrlRecord]:
    return {
        i: UrlRecord(i, f"http://{h}/{i}", h, None, None, None, None, None, ())
        for i, h in hosts.items()
    }


def _caps(**overrides: Any) -> HostCaps:
    values: dict[str, Any] = {"slot_seconds": 2.0, "per_host_min_delay_s": 1.0}
    values.update(overrides)
    return HostCaps(service_settings("sqlite:///unused.db", **values))


def _scheduler(ids: list[int], capacity: float = 4.0) -> schedulers.Scheduler:
    s = schedulers.create("bayes", capacity=capacity, seed=1)
    s.add(ids)
    return s


def test_crawl_delay_reported_by_the_fetcher_lowers_the_hosts_cap() -> None:
    caps = _caps()
    records = _records({1: "a.test:80", 2: "b.test"})
    sched = _scheduler([1, 2])
    caps.assign(sched, sched.frequencies()[0], ["a.test:80", "b.test"])
    caps.apply(sched)
    # not answered yet: the first slot also fetches robots.txt, one of the two requests
    assert caps.caps() == {"a.test": pytest.approx(1.0), "b.test": pytest.approx(1.0)}
    assert caps.cap_of("a.test")[1] == "robots"
    caps.observe([_answer(1, host_delay_s=8.0), _answer(2)], records)
    changed = caps.apply(sched)
    assert changed == {
        caps.label_of("a.test"): pytest.approx(0.25 * HEADROOM),
        caps.label_of("b.test"): pytest.approx(2.0 * HEADROOM),
    }
    assert caps.cap_of("a.test")[1] == "crawl_delay"
    assert sched.cap_status()[caps.label_of("a.test")][0] == pytest.approx(0.25 * HEADROOM)
    # nothing new: nothing re-applied
    caps.observe([_answer(1, host_delay_s=8.0)], records)
    assert caps.apply(sched) == {}


def test_retry_after_holds_a_host_until_it_expires() -> None:
    caps = _caps()
    records = _records({1: "a.test", 2: "b.test"})
    sched = _scheduler([1, 2])
    caps.assign(sched, sched.frequencies()[0], ["a.test", "b.test"])
    caps.observe([_answer(1), _answer(2)], records)
    caps.apply(sched)
    limited = _answer(1, "error", status=429, error_kind="rate_limited", retry_after_s=0.3)
    caps.observe([limited], records)
    label = caps.label_of("a.test")
    assert caps.apply(sched) == {label: MIN_CAP}
    assert caps.cap_of("a.test")[1] == "retry_after"
    # later polls of the backed-off host are deferred with the time left: same back-off
    caps.observe([_answer(1, "deferred", deferred="backoff", retry_after_s=0.25)], records)
    assert caps.apply(sched) == {}
    time.sleep(0.35)
    assert caps.apply(sched) == {label: pytest.approx(2.0 * HEADROOM)}
    assert caps.cap_of("a.test")[1] == "delay"


def test_measured_response_time_sets_the_cap_when_there_is_no_delay() -> None:
    caps = _caps(per_host_min_delay_s=0.0, per_host_concurrency=1, slot_seconds=10.0)
    records = _records({1: "a.test"})
    sched = _scheduler([1], capacity=20.0)
    caps.assign(sched, sched.frequencies()[0], ["a.test"])
    assert caps.apply(sched) == {}  # nothing known: no cap
    # a host's first answer also fetched robots.txt (and waited for the gate): not a sample
    caps.observe([_answer(1, duration_s=9.0)], records)
    assert caps.apply(sched) == {}
    caps.observe([_answer(1, duration_s=2.0)], records)
    assert caps.apply(sched) == {caps.label_of("a.test"): pytest.approx(5.0 * HEADROOM)}
    assert caps.cap_of("a.test")[1] == "response_time"
    # the mean moves by 20 % of each new time; a change under 10 % is not re-applied
    caps.observe([_answer(1, duration_s=2.5)], records)  # mean 2.1: cap 4.29
    assert caps.apply(sched) == {}
    caps.observe([_answer(1, duration_s=4.0)] * 3, records)  # mean ~3.03: cap 2.97
    (cap,) = caps.apply(sched).values()
    mean = 2.1 + (4.0 - 2.1) * (1 - 0.8**3)
    assert cap == pytest.approx(HEADROOM * 10.0 / mean, rel=1e-6)
    # another drift so soon waits DRIFT_EVERY slots (each change costs the scheduler a solve)
    caps.observe([_answer(1, duration_s=8.0)] * 3, records)
    assert [caps.apply(sched) for _ in range(DRIFT_EVERY - 1)] == [{}] * (DRIFT_EVERY - 1)
    (later,) = caps.apply(sched).values()
    assert later < 0.8 * cap


def test_a_cap_that_cannot_bind_is_not_given() -> None:
    caps = _caps(per_host_min_delay_s=0.0, per_host_concurrency=2, slot_seconds=10.0)
    records = _records({1: "a.test"})
    sched = _scheduler([1], capacity=3.0)
    caps.assign(sched, sched.frequencies()[0], ["a.test"])
    caps.observe([_answer(1), _answer(1, duration_s=2.0)], records)  # 0.9 * 9: over 3
    assert caps.apply(sched) == {}
    assert sched.cap_status() == {}
    sched.set_capacity(12.0)  # now it can bind
    assert caps.apply(sched) == {caps.label_of("a.test"): pytest.approx(8.1)}


def test_the_setting_off_tells_the_scheduler_nothing() -> None:
    caps = _caps(host_caps=False)
    sched = _scheduler([1])
    caps.assign(sched, sched.frequencies()[0], ["a.test"])
    caps.observe([_answer(1, host_delay_s=8.0)], _records({1: "a.test"}))
    assert caps.apply(sched) == {}
    assert sched.cap_status() == {}


# ----- in the crawl loop ---------------------------------------------------------------


@pytest.fixture
async def two_hosts() -> AsyncIterator[tuple[ChangingSite, ChangingSite, ChangingSite]]:
    """Pages on 127.0.0.1 and 127.0.0.2; a third host (127.0.0.3) with a Crawl-delay."""
    sites = [
        ChangingSite(zipf_rates(8, 0.5, 1.0), tick_seconds=0.1, page_size=2_000, seed=k,
                     host=f"127.0.0.{k}", crawl_delay=4.0 if k == 3 else None)
        for k in (1, 2, 3)
    ]  # fmt: skip
    for s in sites:
        await s.start()
    try:
        yield sites[0], sites[1], sites[2]
    finally:
        for s in sites:
            await s.stop()


def _settings(database_url: str, **overrides: Any) -> Any:
    values: dict[str, Any] = {
        "slot_seconds": 0.2,
        "per_host_min_delay_s": 0.1,
        "per_host_concurrency": 1,
        "capacity": 4.0,
    }
    values.update(overrides)
    return service_settings(database_url, **values)


def _planned_by_host(service: CrawlService) -> dict[str, tuple[float, float]]:
    loop = service.loop
    assert loop.scheduler is not None
    return {loop.caps.host_of(k): v for k, v in loop.scheduler.cap_status().items()}


@pytest.mark.slow
@pytest.mark.parametrize("fetch_workers", [1, 0], ids=["crawl-workers", "in-process"])
async def test_the_loop_applies_groups_and_caps_after_restore_and_watch_list_changes(
    database_url: str,
    two_hosts: tuple[ChangingSite, ChangingSite, ChangingSite],
    fetch_workers: int,
) -> None:
    one, two, slow = two_hosts
    with Store(database_url) as store:
        store.add_urls([NewUrl(validate_url(u)) for u in one.urls() + two.urls()])
    settings = _settings(database_url, fetch_workers=fetch_workers)
    summaries: list[SlotSummary] = []
    async with CrawlService(settings) as service:
        # before any slot: every URL in its host's group, each capped at 0.9 * 0.2 s / 0.1 s
        # = 1.8 polls per slot, less the robots.txt request of a host's first slot
        status = _planned_by_host(service)
        assert set(status) == {"127.0.0.1", "127.0.0.2"}
        assert all(cap == pytest.approx(1.0) for cap, _ in status.values())
        await service.run(asyncio.Event(), 6, summaries.append)
        status = _planned_by_host(service)
        assert all(cap == pytest.approx(1.8, rel=0.02) for cap, _ in status.values())
        # the host caps table says what binds: 1.8 polls a slot each (of the 4 polls)
        with Store(database_url) as store:
            saved = store.host_caps()
        assert set(saved) == {"127.0.0.1", "127.0.0.2"}
        assert all(row.binding and row.reason == "delay" for row in saved.values())
    polls = [s.polls for s in summaries]
    # 1 poll per host in the first slot, then 1.8 per host on average (the credit ramps up)
    assert polls[0] == 2 and max(polls) <= 4 and sum(polls[1:]) >= 16, polls
    assert sum(s.deferred for s in summaries) == 0

    # a restart restores the scheduler (the guard is not saved) and applies them again
    with Store(database_url) as store:
        assert store.load_scheduler_state("bayes") is not None
    async with CrawlService(settings) as service:
        assert set(_planned_by_host(service)) == {"127.0.0.1", "127.0.0.2"}
        # URLs added while it runs, on a new host whose robots.txt asks for 4 s
        with Store(database_url) as store:
            store.add_urls([NewUrl(validate_url(u)) for u in slow.urls()])
        await service.run(asyncio.Event(), 4)
        status = _planned_by_host(service)
        assert set(status) == {"127.0.0.1", "127.0.0.2", "127.0.0.3"}
        # its first poll fetched robots.txt: the Crawl-delay came back in the answers
        cap, _ = status["127.0.0.3"]
        assert cap == pytest.approx(HEADROOM * 0.2 / 4.0)
        assert service.loop.caps.cap_of("127.0.0.3")[1] == "crawl_delay"


@pytest.mark.slow
async def test_without_caps_the_scheduler_knows_no_hosts(
    database_url: str, two_hosts: tuple[ChangingSite, ChangingSite, ChangingSite]
) -> None:
    one, two, _ = two_hosts
    with Store(database_url) as store:
        store.add_urls([NewUrl(validate_url(u)) for u in one.urls() + two.urls()])
    settings = _settings(database_url, host_caps=False, fetch_workers=0)
    async with CrawlService(settings) as service:
        await service.run(asyncio.Event(), 2)
        assert _planned_by_host(service) == {}
    with Store(database_url) as store:
        assert store.host_caps() == {}


async def test_a_backed_off_host_is_not_selected_until_its_retry_after_ends(
    database_url: str,
) -> None:
    async with (
        HostileServer("127.0.0.1") as ordinary,
        HostileServer("127.0.0.3", retry_after_s=600) as limiting,
    ):
        urls = [ordinary.url(f"/page/{k}") for k in range(6)] + [
            limiting.url(f"/limited?{k}") for k in range(3)
        ]
        with Store(database_url) as store:
            store.add_urls([NewUrl(validate_url(u)) for u in urls])
        settings = _settings(
            database_url, capacity=9.0, slot_seconds=0.3, per_host_min_delay_s=0.0,
            per_host_concurrency=1, fetch_workers=0,
        )  # fmt: skip
        summaries: list[SlotSummary] = []
        async with CrawlService(settings) as service:
            await service.run(asyncio.Event(), 4, summaries.append)
            assert service.loop.caps.cap_of("127.0.0.3") == (MIN_CAP, "retry_after")
        # the first 429 backs the host off; the scheduler then leaves it alone
        assert limiting.served["/limited"] == 1
        assert sum(s.errors for s in summaries) == 1
        assert sum(s.deferred for s in summaries) <= 2  # the rest of the first slot's, at most


def test_a_busy_host_gets_its_fractional_cap_per_slot() -> None:
    """A derived cap is rarely an integer (1.98: the responses take a little time). The
    scheduler's guard must realize it, at most 2 polls in a slot: not 1, 2, 1, 2 ..."""
    sched = schedulers.create("bayes", capacity=10.0, seed=1)
    sched.add(list(range(40)))
    sched.set_groups(list(range(40)), [0] * 20 + [-1] * 20)
    sched.set_group_caps({0: 1.98})
    per_slot = []
    for _ in range(500):
        picked = sched.select()
        per_slot.append(int((picked < 20).sum()))
        sched.feedback(picked, [False] * picked.size)
    assert max(per_slot) == 2
    assert sum(per_slot[100:]) / 400 == pytest.approx(1.98, abs=0.01)
