"""Discovery fed by the re-polling scheduler (``discovery_watch_starts``), over HTTP on
127.0.0.1: a source's start pages go on the watch list, the scheduler's polls of them bring
their bodies back when they changed, and discovery polls only the new links it hears."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from crawler.service import CrawlService, SlotSummary
from crawler.service._discovery import DiscoverySummary
from crawler.store import SourceSpec, Store
from crawler.testsite._graph import LinkGraph, generate
from crawler.testsite._graphserver import EPOCH, GraphSite
from tests.service.conftest import service_settings

SLOT_S = 1800.0  # simulated seconds per slot
SLOTS = 24
#: slots before the restart: by the 12th the paying sections' yields are 7 and 15-19 (24
#: slots: 18 and 47), far over the 1 asserted, and a restart without them starts from 0
LEARN_SLOTS = 12


@pytest.fixture(scope="module")
def graph() -> LinkGraph:
    """The site of the four runs of the first test, built once: only read (by GraphSite and
    the assertions)."""
    return generate(pages=300, sections=6, duration=86_400.0, new_per_hour=6, seed=4)


@pytest.mark.parametrize("fetch_workers", [0, 1], ids=["in-process", "crawl-workers"])
async def test_the_schedulers_polls_of_start_pages_feed_discovery(
    database_url: str, fetch_workers: int, graph: LinkGraph
) -> None:
    site = GraphSite(graph, now=0.0)
    site.conditional = True
    await site.start()
    per_slot: list[tuple[int, int, tuple[str, ...], tuple[str, ...]]] = []
    repolls: list[int] = []
    try:
        with Store(database_url) as store:
            store.discovery.add_source(SourceSpec(site.url(0), budget_per_slot=10))
        settings = service_settings(
            database_url,
            capacity=40.0,
            discovery_share=0.25,
            fetch_workers=fetch_workers,
            discovery_watch_starts=True,
        )
        async with CrawlService(settings) as service:
            discovery = service.loop.discovery
            discovery.clock = lambda: EPOCH.timestamp() + site.now

            run_slot = discovery.run_slot

            async def counted(*args: Any, **kwargs: Any) -> DiscoverySummary:
                last = await run_slot(*args, **kwargs)  # each slot's own summary
                per_slot.append((last.polls, last.lead_polls, last.polled, last.downloaded))
                return last

            discovery.run_slot = counted  # type: ignore[method-assign]

            def on_slot(summary: SlotSummary) -> None:
                repolls.append(summary.polls)
                site.now += SLOT_S

            site.now = SLOT_S
            await service.run(asyncio.Event(), SLOTS, on_slot)
            (source,) = discovery.sources.values()
            assert source.fed and source.crawl is not None
            # every start page is paced (a floor given to the scheduler), and discovery keeps
            # only what its waiting links need of its 10 polls a slot
            registry = service.metrics.registry
            paced = registry.get_sample_value("crawler_discovery_paced_start_pages")
            reserved = registry.get_sample_value("crawler_discovery_reserved_polls_per_slot")
            floors = registry.get_sample_value("crawler_discovery_start_floor_polls_per_slot")
            assert paced == len(discovery.pacer) >= 6
            assert reserved is not None and 2 <= reserved <= 10
            assert floors is not None and 0 < floors <= 0.5 * 40
        with Store(database_url) as store:
            watched = {r.url for r in store.list_urls()}
            found = store.discovery.discovered()
    finally:
        await site.stop()
    starts = {site.url(c) for c in range(6)}
    assert starts <= watched  # the front page and the section indexes: on the watch list
    # after its first read of the source page, discovery never polls a start page itself:
    # its polls are the links the scheduler's polls heard
    assert per_slot[0][0] == 1 and site.url(0) in per_slot[0][2]
    for polls, leads, polled, _ in per_slot[1:]:
        assert polls == leads
        assert not (set(polled) & starts)
        assert polls <= 10
    # the scheduler reads the start pages (its polls), discovery what they newly link
    assert sum(repolls) >= len(starts) * (SLOTS - 2)
    appeared = {
        site.url(p) for p in range(graph.size) if 0 < graph.created[p] <= site.now - 2 * SLOT_S
    }
    found_urls = {d.url for d in found}
    assert found_urls <= {site.url(p) for p in range(graph.size) if graph.created[p] > 0}
    assert len(found_urls & appeared) >= 0.8 * len(appeared), (len(found_urls), len(appeared))
    # each page discovery downloads, it downloads once (the old pages a section lists are not
    # watched here, so its first read leads to them once; then they are known)
    downloads = [u for _, _, _, d in per_slot[1:] for u in d]
    assert len(downloads) == len(set(downloads))
    for d in found:
        assert d.path_length == 1 and d.depth == 1


async def test_what_the_pacer_learned_survives_a_restart(database_url: str) -> None:
    """The watched start pages' yields are saved with the source's state: a restarted service
    paces the paying sections as before, not from the prior."""
    graph = generate(pages=300, sections=6, active_sections=2, duration=86_400.0,
                     new_per_hour=6, seed=4)  # fmt: skip
    site = GraphSite(graph, now=SLOT_S)
    site.conditional = True
    await site.start()
    try:
        with Store(database_url) as store:
            store.discovery.add_source(SourceSpec(site.url(0), budget_per_slot=10))
        settings = service_settings(
            database_url, capacity=40.0, discovery_share=0.25, fetch_workers=0
        )

        paying = {site.url(int(graph.section[p])) for p in graph.new_pages()}
        learning = asyncio.Event()

        def advance(summary: SlotSummary) -> None:
            site.now += SLOT_S

        async with CrawlService(settings) as service:
            side = service.loop.discovery
            side.clock = lambda: EPOCH.timestamp() + site.now

            def learn(summary: SlotSummary) -> None:
                # at least LEARN_SLOTS slots, and on until every paying section has paid
                # (a loaded machine's slot may have to leave a start page's poll for later)
                advance(summary)
                state = side.pacer.state(side._slot_no)
                if summary.seq >= LEARN_SLOTS and all(
                    state.get(u, (0.0,))[0] >= 1.0 for u in paying
                ):
                    learning.set()

            await service.run(learning, 3 * LEARN_SLOTS, learn)
            before = side.pacer.state(side._slot_no)
        async with CrawlService(settings) as again:
            again.loop.discovery.clock = lambda: EPOCH.timestamp() + site.now
            await again.run(asyncio.Event(), 1, advance)
            pacer = again.loop.discovery.pacer
            after = pacer.state(again.loop.discovery._slot_no)
    finally:
        await site.stop()
    assert paying and paying <= set(before)
    for url in paying:  # learned, and taken back (a slot's aging apart)
        assert before[url][0] >= 1.0
        assert after[url][0] == pytest.approx(before[url][0], rel=0.05)
    assert set(after) == set(before)
