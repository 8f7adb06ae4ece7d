"""Discovery in the service, over HTTP on 127.0.0.1: a generated site whose new pages appear
over time, slot after slot, with the service's own loop, poller and store."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from sqlalchemy import select

from crawler.service import CrawlService
from crawler.service._loop import CrawlLoop
from crawler.service._steps import DiscoveryStep
from crawler.store import NewUrl, SourceSpec, Store
from crawler.store.models import urls
from crawler.testsite._graph import LinkGraph, generate
from crawler.testsite._graphserver import EPOCH, GraphSite
from tests.service.conftest import service_settings

SLOT_S = 1800.0  # simulated seconds per slot
CAPACITY = 40.0
SHARE = 0.25  # floor(0.25 x 40) = 10 discovery polls per slot
#: a section index the site's robots.txt forbids
FORBIDDEN = 2


class RobotsGraphSite(GraphSite):
    """The generated site with a robots.txt that forbids one section's index page, pages
    that can be made to die, and an ETag of each page's content (answered 304 when the
    request's ``If-None-Match`` is still the page's)."""

    def __init__(self, graph: LinkGraph) -> None:
        super().__init__(graph, now=0.0)
        self.robots_reads = 0
        self.dead: set[int] = set()  # pages that answer 410 from now on
        self.not_modified = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/robots.txt", self._robots)
        app.router.add_get("/p/{page:\\d+}", self._maybe_dead)
        return app

    async def _maybe_dead(self, request: web.Request) -> web.Response:
        page = int(request.match_info["page"])
        if page in self.dead:
            self.served[page] += 1
            return web.Response(status=410, text="gone")
        response = await self._page(request)
        if response.status == 200 and response.body is not None:
            assert isinstance(response.body, bytes)
            etag = f'"{hashlib.sha1(response.body).hexdigest()[:16]}"'
            if request.headers.get("If-None-Match") == etag:
                self.not_modified += 1
                return web.Response(status=304, headers={"ETag": etag})
            response.headers["ETag"] = etag
        return response

    async def _robots(self, request: web.Request) -> web.Response:
        self.robots_reads += 1
        return web.Response(text=f"User-agent: *\nDisallow: /p/{FORBIDDEN}$\n")


@pytest.fixture
async def graph_site() -> AsyncIterator[RobotsGraphSite]:
    graph = generate(pages=300, sections=6, duration=86_400.0, new_per_hour=6, seed=4)
    site = RobotsGraphSite(graph)
    await site.start()
    try:
        yield site
    finally:
        await site.stop()


@pytest.mark.slow
@pytest.mark.parametrize("fetch_workers", [0, 1], ids=["in-process", "crawl-workers"])
async def test_service_finds_new_pages_within_its_share(
    database_url: str, graph_site: RobotsGraphSite, fetch_workers: int
) -> None:
    site = graph_site
    watched = [site.url(p) for p in range(20, 40)]
    with Store(database_url) as store:
        store.add_urls([NewUrl(u) for u in watched])
        store.discovery.add_source(
            SourceSpec(site.url(0), budget_per_slot=10, max_depth=3, auto_watch=True)
        )
    settings = service_settings(
        database_url,
        capacity=CAPACITY,
        discovery_share=SHARE,
        fetch_workers=fetch_workers,
        discovery_watch_starts=False,  # discovery reads the start pages itself (the fallback)
    )
    slots = 36  # 18 simulated hours
    twice: list[tuple[int, int]] = []
    discovery_polls: list[int] = []
    async with CrawlService(settings) as service:
        service.loop.discovery.clock = lambda: EPOCH.timestamp() + site.now
        assert service.loop.scheduler is not None
        for k in range(1, slots + 1):
            site.now = k * SLOT_S
            before = Counter(site.served)
            await service.run(asyncio.Event(), k)
            served = site.served - before
            twice += [(k, p) for p, n in served.items() if n > 1]
            discovery_polls.append(service.loop.discovery.last.polls)
            # the scheduler's share is the rest of the capacity
            assert service.loop.scheduler.capacity == CAPACITY - 10
        registry = service.metrics.registry
        polls_metric = [
            registry.get_sample_value("crawler_discovery_polls_total", {"result": r})
            for r in ("ok", "not_modified", "error")
        ]  # the error: the page robots.txt forbids, refused once, then never asked for
        assert sum(n or 0 for n in polls_metric) == sum(discovery_polls)
        assert polls_metric[2] == 1
        not_modified = polls_metric[1] or 0  # pages read again unchanged: no download
        assert 0 < not_modified <= site.not_modified  # (the rest are the scheduler's)
        found_metric = registry.get_sample_value("crawler_discovered_total")
        aged = registry.get_sample_value("crawler_discovered_age_seconds_count")
    assert twice == []  # no page served twice in one slot
    assert max(discovery_polls) <= 10  # floor(share x capacity)
    assert sum(discovery_polls) >= 10 * slots * 0.9
    assert site.served[FORBIDDEN] == 0  # robots.txt honoured
    assert site.robots_reads >= 1
    graph = site.graph
    appeared = {site.url(p) for p in range(graph.size) if 0 < graph.created[p] <= site.now}
    with Store(database_url) as store:
        found = store.discovery.discovered()
        with store.engine.connect() as conn:
            rows = conn.execute(select(urls.c.url, urls.c.polls, urls.c.removed_at)).all()
    found_urls = {d.url for d in found}
    assert found_metric == aged == len(found_urls)  # every page found had a date
    assert found_urls <= appeared  # nothing old reported new
    assert len(found_urls) >= 0.5 * len(appeared), (len(found_urls), len(appeared))
    for d in found:
        assert d.source == site.url(0)
        assert d.lastmod is not None and (d.found_at - d.lastmod).total_seconds() <= 86_400
        assert d.path_length >= 1
    # auto-watched: in the watch list, and the scheduler polled them
    watch = {u: (n, gone) for u, n, gone in rows}
    assert all(watch[u][1] is None for u in found_urls)
    assert all(d.watched for d in found)
    polled = [u for u in found_urls if watch[u][0] > 0]
    assert len(polled) >= 0.5 * len(found_urls)
    created = {site.url(p): EPOCH.timestamp() + graph.created[p] for p in range(graph.size)}
    delays = [d.found_at.timestamp() - created[d.url] for d in found]
    within5 = sum(1 for x in delays if x <= 5 * SLOT_S)
    print(
        f"appeared {len(appeared)}, found {len(found_urls)} ({within5} within 5 slots), "
        f"polled after watch {len(polled)}, discovery polls {sum(discovery_polls)} "
        f"({not_modified:.0f} answered 304), "
        f"median delay {sorted(delays)[len(delays) // 2] / SLOT_S:.1f} slots"
    )


async def _run_slots(service: CrawlService, site: GraphSite, first: int, last: int) -> None:
    for k in range(first, last + 1):
        site.now = k * SLOT_S
        await service.run(asyncio.Event(), k)


@pytest.mark.slow
async def test_dead_pages_expire_and_leave_the_watch_list_and_state_survives_a_restart(
    database_url: str, graph_site: RobotsGraphSite
) -> None:
    site = graph_site
    with Store(database_url) as store:
        store.discovery.add_source(SourceSpec(site.url(0), auto_watch=True))
    settings = service_settings(
        database_url,
        capacity=CAPACITY,
        discovery_share=SHARE,
        fetch_workers=0,
        discovery_watch_starts=False,  # discovery reads the start pages itself (the fallback)
    )
    async with CrawlService(settings) as service:
        service.loop.discovery.clock = lambda: EPOCH.timestamp() + site.now
        await _run_slots(service, site, 1, 12)
        assert service.loop.discovery.sources[1].started_from == "page"
    with Store(database_url) as store:
        ds = store.discovery
        found = [d.url for d in ds.discovered()]
        (source,) = ds.sources()
    assert len(found) >= 10
    assert source.state is not None and json.loads(source.state)["seeds"]
    assert source.polls == sum(1 for _ in range(12)) * 10  # every slot used its share
    assert source.found == len(found)
    # half of what was found dies; the scheduler's polls see 410, and they expire
    dying = {int(u.rsplit("/", 1)[1]) for u in found[::2]}
    site.dead |= dying
    restored = json.loads(source.state)["seeds"]
    async with CrawlService(settings) as service:
        service.loop.discovery.clock = lambda: EPOCH.timestamp() + site.now
        await _run_slots(service, site, 13, 13)
        crawl = service.loop.discovery.sources[source.id].crawl
        assert crawl is not None
        assert service.loop.discovery.sources[source.id].started_from == "state"
        entries = {u for f in crawl.fleet.foragers for u, _ in f.weblog.entries()}
        assert len(set(restored) - entries) <= 1, (len(restored), len(entries))
        await _run_slots(service, site, 14, 40)
    with Store(database_url) as store:
        rows = {d.url: d for d in store.discovery.discovered()}
        watched = {r.url for r in store.list_urls()}
    dead_urls = {site.url(p) for p in dying}
    expired = {u for u, d in rows.items() if d.expire_reason == "dead"}
    assert expired == dead_urls  # every dead page (polled by the scheduler) and no other
    assert not (dead_urls & watched)
    assert {u for u in rows if u not in dead_urls} <= watched


async def _refresh_discovery(loop: CrawlLoop) -> None:
    """What a slot does first: discovery's step re-reads its sources (and so its share)."""
    assert loop.scheduler is not None
    for step in loop.steps:
        if isinstance(step, DiscoveryStep):
            await step.before_select(loop.scheduler)


async def test_without_sources_or_share_the_scheduler_keeps_the_whole_capacity(
    database_url: str,
) -> None:
    with Store(database_url) as store:
        store.add_urls([NewUrl("http://127.0.0.1:9/a")])
    settings = service_settings(database_url, capacity=CAPACITY, discovery_share=SHARE)
    async with CrawlService(settings) as service:
        assert service.loop.scheduler is not None
        assert service.loop.scheduler.capacity == CAPACITY  # no source: nothing reserved
        with Store(database_url) as store:
            store.discovery.add_source(SourceSpec("http://127.0.0.1:9/"))
        await _refresh_discovery(service.loop)
        assert service.loop.scheduler.capacity == CAPACITY - 10
    off = service_settings(database_url, capacity=CAPACITY, discovery_share=0.0)
    async with CrawlService(off) as service:
        await _refresh_discovery(service.loop)
        assert service.loop.scheduler is not None
        assert service.loop.scheduler.capacity == CAPACITY  # share 0: discovery is off
        assert service.loop.discovery.reserved(CAPACITY) == 0


async def test_a_source_costs_at_most_its_run_budget_then_frees_its_share(
    database_url: str, graph_site: RobotsGraphSite
) -> None:
    site = graph_site
    with Store(database_url) as store:
        store.add_urls([NewUrl("http://127.0.0.1:9/elsewhere")])  # the scheduler's only URL
        store.discovery.add_source(SourceSpec(site.url(0), budget_per_run=15))
    settings = service_settings(
        database_url, capacity=CAPACITY, discovery_share=SHARE, discovery_watch_starts=False
    )  # every request the site sees is discovery's (no start page on the watch list)
    capacities = []
    async with CrawlService(settings) as service:
        service.loop.discovery.clock = lambda: EPOCH.timestamp() + site.now
        for k in range(1, 6):
            site.now = k * SLOT_S
            await service.run(asyncio.Event(), k)
            assert service.loop.scheduler is not None
            capacities.append(service.loop.scheduler.capacity)
    assert sum(site.served.values()) <= 15  # every request the site saw was discovery's
    with Store(database_url) as store:
        (source,) = store.discovery.sources()
    assert source.polls == sum(site.served.values())  # (a 304 is counted as served too)
    assert capacities[0] == CAPACITY - 10 and capacities[-1] == CAPACITY  # share given back
