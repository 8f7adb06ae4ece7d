"""A small watch list's capacity still gives a source its polls: at least one a slot from a
capacity of 2, taken from the re-polling side; below it the service says why it gives none,
once. Through the real service, over HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from crawler.service import CrawlService
from crawler.store import NewUrl, SourceSpec, Store
from crawler.testsite._graph import generate
from crawler.testsite._graphserver import EPOCH, GraphSite
from tests.service.conftest import service_settings

SLOT_S = 1800.0  # simulated seconds per slot


@pytest.fixture
async def news() -> AsyncIterator[GraphSite]:
    site = GraphSite(generate(pages=80, sections=6, duration=86_400.0, new_per_hour=6, seed=2))
    await site.start()
    try:
        yield site
    finally:
        await site.stop()


def _setup(database_url: str, site: GraphSite) -> None:
    with Store(database_url) as store:
        store.add_urls([NewUrl(site.url(p)) for p in (30, 31)])
        store.discovery.add_source(SourceSpec(site.url(0), budget_per_slot=5))


async def test_capacity_4_and_one_source_gets_polls(database_url: str, news: GraphSite) -> None:
    _setup(database_url, news)
    settings = service_settings(database_url, capacity=4.0)  # the default share, 0.1
    polls: list[int] = []
    async with CrawlService(settings) as service:
        service.loop.discovery.clock = lambda: EPOCH.timestamp() + news.now
        assert service.loop.scheduler is not None
        for k in range(1, 7):
            news.now = k * SLOT_S
            await service.run(asyncio.Event(), k)
            polls.append(service.loop.discovery.last.polls)
            # floor(0.1 x 4) = 0, raised to one: it comes off the scheduler's capacity
            assert service.loop.discovery.reserved(4.0) == 1
            assert service.loop.scheduler.capacity == 3.0
    assert sum(polls) >= 1 and max(polls) <= 1, polls
    assert news.served[0] >= 1  # the source's page was read
    with Store(database_url) as store:
        (row,) = store.discovery.sources()
    assert row.polls == sum(polls)


async def test_a_capacity_below_2_gives_none_and_says_why_once(
    database_url: str, news: GraphSite, caplog: pytest.LogCaptureFixture
) -> None:
    _setup(database_url, news)
    settings = service_settings(database_url, capacity=1.0)
    with caplog.at_level(logging.WARNING, logger="crawler.service"):
        async with CrawlService(settings) as service:
            assert service.loop.scheduler is not None
            for k in range(1, 4):
                news.now = k * SLOT_S
                await service.run(asyncio.Event(), k)
                assert service.loop.discovery.last.polls == 0
            assert service.loop.scheduler.capacity == 1.0  # the watched URLs keep it all
    said = [r.getMessage() for r in caplog.records if "discovery gets no polls" in r.message]
    assert len(said) == 1, said
    assert "capacity, 1 polls a slot" in said[0] and "CRAWLER_CAPACITY" in said[0]
