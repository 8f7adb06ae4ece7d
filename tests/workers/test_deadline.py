"""A slot's deadline: what a slow or polite host cannot do by then is deferred, at once, and
holds back neither the other hosts nor the next batch. Real servers on loopback."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator

import pytest

from crawler.detect import ChangeDetector
from crawler.fetch import FetchConfig
from crawler.testsite.hostile import HostileServer
from crawler.workers import CrawlWorkers, InProcessPoller, PollAnswer, Poller, PollJob

CONFIG = FetchConfig(
    user_agent="crawler-tests/1.0",
    timeout_s=30.0,  # the fetcher alone would wait this long for a trickling server
    per_host_concurrency=2,
    per_host_min_delay_s=0.0,
    allow_private_addresses=True,
    retries=0,
)


@pytest.fixture
async def hosts() -> AsyncIterator[tuple[HostileServer, HostileServer, HostileServer]]:
    async with (
        HostileServer("127.0.0.1") as ordinary,
        HostileServer("127.0.0.2", trickle_s=0.5) as trickling,
        HostileServer("127.0.0.3", robots="crawl-delay", crawl_delay_s=30) as polite,
    ):
        yield ordinary, trickling, polite


def job(url_id: int, server: HostileServer, path: str) -> PollJob:
    return PollJob(
        url_id, server.url(path), f"{server.host}:{server.port}", None, None, None, (), None, None
    )


async def answers_of(poller: Poller, jobs: list[PollJob], deadline: float) -> list[PollAnswer]:
    got: list[PollAnswer] = []
    async for chunk in poller.poll_chunks(jobs, deadline):
        got.extend(chunk)
    return sorted(got, key=lambda a: a.url_id)


@pytest.mark.parametrize("kind", ["crawl-workers", "in-process"])
async def test_slow_and_polite_hosts_are_deferred_at_the_deadline(
    hosts: tuple[HostileServer, HostileServer, HostileServer], kind: str
) -> None:
    ordinary, trickling, polite = hosts
    poller: Poller = (
        CrawlWorkers(1, CONFIG, None, chunk=8)
        if kind == "crawl-workers"
        else InProcessPoller(CONFIG, None, ChangeDetector(workers=0))
    )
    await poller.start()
    try:
        jobs = [job(k, ordinary, f"/page/{k}") for k in range(20)]
        jobs += [job(100 + k, trickling, "/trickle") for k in range(3)]
        jobs += [job(200 + k, polite, f"/page/{k}") for k in range(5)]
        t0 = time.monotonic()
        got = await answers_of(poller, jobs, t0 + 1.5)
        took = time.monotonic() - t0
        assert took < 3.0, took  # not the 30 s a trickling host or a Crawl-delay would take
        by_id = {a.url_id: a for a in got}
        assert len(got) == len(jobs) == len(by_id)
        assert [by_id[k].outcome for k in range(20)] == ["ok"] * 20, [by_id[k] for k in range(20)]
        trickled = [by_id[100 + k] for k in range(3)]
        assert all(a.outcome == "deferred" for a in trickled)
        assert {a.deferred for a in trickled} <= {"timeout", "politeness"}
        assert trickled[0].deferred == "timeout"  # in flight at the deadline
        assert by_id[200].outcome == "ok"  # the polite host's first poll, after its robots.txt
        assert [by_id[200 + k].deferred for k in range(1, 5)] == ["politeness"] * 4
        assert all(a.error_kind is None for a in got)  # deferred is not an error

        # the next batch starts at once: nothing of the last one is still queued
        t0 = time.monotonic()
        again = await answers_of(poller, [job(50, ordinary, "/page/50")], t0 + 1.5)
        assert again[0].outcome == "ok" and time.monotonic() - t0 < 1.0
        assert polite.served["/page/1"] == polite.served["/page/2"] == 0
    finally:
        await poller.aclose()


async def test_a_robots_txt_cut_by_the_deadline_is_still_loaded_once_for_later_slots() -> None:
    config = FetchConfig(
        user_agent="crawler-tests/1.0", timeout_s=1.5, per_host_min_delay_s=0.0,
        allow_private_addresses=True, retries=0,
    )  # fmt: skip
    async with HostileServer("127.0.0.4", robots="slow", robots_delay_s=60) as slow:
        poller = CrawlWorkers(1, config, None)
        await poller.start()
        try:
            t0 = time.monotonic()
            first = await answers_of(poller, [job(1, slow, "/page/1")], t0 + 0.5)
            assert first[0].deferred == "timeout" and time.monotonic() - t0 < 1.5
            await asyncio.sleep(1.5)  # the robots.txt load went on, and timed out by itself
            t0 = time.monotonic()
            later = await answers_of(poller, [job(2, slow, "/page/2")], t0 + 0.5)
            assert later[0].outcome == "error" and later[0].error_kind == "timeout"
            assert time.monotonic() - t0 < 0.5  # the failure was cached: the site is skipped
            assert slow.served["/robots.txt"] == 1 and slow.served["/page/1"] == 0
        finally:
            await poller.aclose()


@pytest.mark.parametrize("kind", ["crawl-workers", "in-process"])
async def test_a_poll_in_flight_at_a_lingering_deadline_goes_on_and_is_answered_later(
    hosts: tuple[HostileServer, HostileServer, HostileServer], kind: str
) -> None:
    ordinary, trickling, _ = hosts
    config = FetchConfig(
        user_agent="crawler-tests/1.0", timeout_s=1.5, per_host_min_delay_s=0.0,
        allow_private_addresses=True, retries=0,
    )  # fmt: skip
    poller: Poller = (
        CrawlWorkers(1, config, None, chunk=8)
        if kind == "crawl-workers"
        else InProcessPoller(config, None, ChangeDetector(workers=0))
    )
    await poller.start()
    try:
        jobs = [job(k, ordinary, f"/page/{k}") for k in range(10)]
        jobs += [job(100, trickling, "/trickle")]
        t0 = time.monotonic()
        seen: list[tuple[float, PollAnswer]] = []
        async for chunk in poller.poll_chunks(jobs, t0 + 0.6, linger=10.0):
            seen += [(time.monotonic() - t0, a) for a in chunk]
        took = time.monotonic() - t0
        by_id: dict[int, list[tuple[float, PollAnswer]]] = {}
        for at, a in seen:
            by_id.setdefault(a.url_id, []).append((at, a))
        assert [by_id[k][0][1].outcome for k in range(10)] == ["ok"] * 10
        (placeholder_at, placeholder), (final_at, final) = by_id[100]
        assert placeholder.outcome == "running" and placeholder_at < 1.2  # at the deadline
        # its own answer after the deadline: the fetcher's own timeout ended it, not the slot's
        assert final.outcome == "error" and final.error_kind == "timeout", final
        assert 1.3 < final_at < 3.5 and took < 4.0

        # a stream closed early cuts its carried poll: nothing more of it arrives
        t0 = time.monotonic()
        stream = poller.poll_chunks([job(101, trickling, "/trickle")], t0 + 0.3, linger=10.0)
        first = await anext(stream)
        assert [a.outcome for a in first] == ["running"]
        await stream.aclose()
        again = await answers_of(poller, [job(1, ordinary, "/page/1")], time.monotonic() + 1.5)
        assert again[0].outcome == "ok"
    finally:
        await poller.aclose()


DELAY_S = 0.4
POLITE = dataclasses.replace(CONFIG, per_host_concurrency=1, per_host_min_delay_s=DELAY_S)


@pytest.mark.parametrize("kind", ["crawl-workers", "in-process"])
async def test_a_discovery_poll_goes_before_the_hosts_queued_repolls(kind: str) -> None:
    """Discovery's polls (``want_body``) go before a polite host's queued re-polls (not
    before one in flight): sent after a slot's, they would otherwise wait behind all of the
    host's, past the deadline, every slot."""
    poller: Poller = (
        CrawlWorkers(1, POLITE, None, chunk=8)
        if kind == "crawl-workers"
        else InProcessPoller(POLITE, None, ChangeDetector(workers=0))
    )
    await poller.start()
    try:
        async with HostileServer("127.0.0.1") as host:
            await answers_of(poller, [job(0, host, "/page/0")], time.monotonic() + 5)  # robots
            await asyncio.sleep(DELAY_S)
            repolls = [job(k, host, f"/page/{k}") for k in range(1, 6)]
            found = job(100, host, "/page/100")._replace(want_body=True)
            # room for three requests (0, 0.4 and 0.8 s) before the deadline
            deadline = time.monotonic() + 2.5 * DELAY_S
            slot = asyncio.ensure_future(answers_of(poller, repolls, deadline))
            await asyncio.sleep(0.05)  # the slot's re-polls are queued (the first in flight)
            discovered = await answers_of(poller, [found], deadline)
            slot_answers = {a.url_id: a for a in await slot}
    finally:
        await poller.aclose()
    assert [a.outcome for a in discovered] == ["ok"], discovered
    assert discovered[0].body is not None
    outcomes = [slot_answers[k].outcome for k in range(1, 6)]
    assert outcomes[:2] == ["ok", "ok"] and outcomes[2:] == ["deferred"] * 3, outcomes
