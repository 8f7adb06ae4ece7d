"""A section index marked as a source is the page read for new links: through the real
service, its own page's read floor is taken whole, and the old articles it links to (its
start pages too) share what is left of the paced half of the scheduler's polls."""

from __future__ import annotations

import asyncio
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
    site = GraphSite(generate(pages=400, sections=6, duration=86_400.0, new_per_hour=6, seed=2))
    await site.start()
    try:
        yield site
    finally:
        await site.stop()


async def test_a_marked_section_is_read_at_its_own_pace(database_url: str, news: GraphSite) -> None:
    section = news.url(1)
    with Store(database_url) as store:
        store.add_urls([NewUrl(news.url(p)) for p in (300, 301)])
        store.discovery.add_source(SourceSpec(section, budget_per_slot=5))
    settings = service_settings(database_url, capacity=4.0)
    async with CrawlService(settings) as service:
        discovery = service.loop.discovery
        discovery.clock = lambda: EPOCH.timestamp() + news.now
        scheduler = service.loop.scheduler
        assert scheduler is not None
        for k in range(1, 4):
            news.now = k * SLOT_S
            await service.run(asyncio.Event(), k)
        floors = discovery.pacer.floors(0, 0.5 * scheduler.capacity)
    assert section in floors and len(floors) > 10  # its links are start pages too
    cap = 0.5 * scheduler.capacity
    assert sum(floors.values()) == pytest.approx(cap)
    assert floors[section] == pytest.approx(1 / 3)  # read every 3 slots: taken whole
    others = [f for u, f in floors.items() if u != section]
    assert max(others) < floors[section] / 2  # the articles share the rest
