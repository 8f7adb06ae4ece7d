"""Discovery's acceptance through the real service: new pages found, and the trap site.

New pages found (``benchmarks/discovery_service.py`` holds the harness and prints the figures): a
generated site of 5,000 pages in 50 sections of which 5 gain a new page every 2 slots in all,
on 127.0.0.1; a real ``CrawlService`` on a real database with a capacity of 50 polls per slot,
20% of them for discovery; one source (the front page) whose links are the start pages. The
service (the default, ``discovery_watch_starts``: the sections read by the re-polling
scheduler, paced by their yield, after 200 warm-up slots) must find >= 90% of the new pages
within 5 slots with discovery's downloads new pages (< 20% not new), the section reads counted
on the re-polling side. With discovery reading the start pages itself (the start-page bandit)
it must find >= 90% within 5 slots, give the 5 paying sections far more than their even share
of the polls, and, after the first read of each start page, download only new pages and start
pages that changed. Next to it, on the same site and budget, the breadth-first re-crawl of the
sections (the start pages in turn). Short slots (0.25 s) keep the runs near a minute and a
half each.

The trap site (an infinite calendar, session ids, facets) as a source of the
real service costs at most the source's page budget, however many slots run.
"""

from __future__ import annotations

import asyncio
import gzip
from pathlib import Path

import pytest
from aiohttp import web

from benchmarks.discovery_service import SLOT, run_acceptance
from crawler.fetch import validate_url
from crawler.service import CrawlService, SlotSummary
from crawler.store import NewUrl, SourceSpec, Store
from crawler.testsite._graph import LinkGraph, generate
from crawler.testsite._graphserver import EPOCH, GraphSite, TrapSite
from tests.service.conftest import service_settings


@pytest.mark.slow  # two runs of 120 slots of 0.25 s through the service: ~90 s
@pytest.mark.parametrize("db_backend", ["sqlite"])  # one backend: the database is not the point
async def test_discovery_finds_new_pages_within_5_slots_and_learns_the_sections(
    database_url: str, tmp_path: Path
) -> None:
    bandit = await run_acceptance(
        database_url, start_choice="bandit", slots=120, slot_seconds=0.25, warmup=0
    )
    print(bandit.line())
    assert bandit.new >= 40  # one every 2 slots, those due 5 slots before the end
    assert bandit.found_in_5 >= 0.9
    # learned: the 5 paying sections (10% of the start pages) get far more than 10% of polls
    assert bandit.active_share >= 0.25
    assert bandit.max_slot_polls <= 10  # 20% of 50 per slot, never more
    # after each start page's first read, a download is a new page or a start page that had
    # changed (conditional polls: an unchanged one answers 304). Counted from discovery's own
    # downloads (not from the site's counters, which mix in the scheduler's polls of old
    # pages, so an old page discovery downloaded would go uncounted): the front page
    # links 49 sections and then an article, p/51, which becomes the 50th start page
    # (discovery_seed_links) and is read once like the sections
    assert bandit.other_downloads <= 2
    assert bandit.first_reads <= 50
    assert bandit.changed_reads <= bandit.new_downloads
    assert bandit.not_modified > bandit.downloads

    # the breadth-first re-crawl of the sections with the same budget, on a fresh database
    rr_url = f"sqlite:///{tmp_path}/round_robin.db"
    with Store(rr_url) as store:
        store.upgrade()
    breadth = await run_acceptance(
        rr_url, start_choice="round_robin", slots=120, slot_seconds=0.25, warmup=0
    )
    print(breadth.line())
    assert breadth.active_share == pytest.approx(0.10, abs=0.02)  # nothing learned: in turn
    assert bandit.mean_delay_slots < breadth.mean_delay_slots


@pytest.mark.slow  # 200 warm-up slots and 120 slots of 0.25 s through the service: ~90 s
@pytest.mark.parametrize("db_backend", ["sqlite"])
async def test_with_watched_start_pages_both_targets_hold(database_url: str) -> None:
    """``discovery_watch_starts`` (the default): the scheduler reads the sections, paced by
    their yield of new pages (``crawler.discovery._pacing``), and discovery polls only the new
    links a changed one lists: >= 90% found within 5 slots *and* discovery's downloads new
    pages (< 20% anything else), the paying sections read far more than the others."""
    watched = await run_acceptance(
        database_url, watch_starts=True, slots=120, slot_seconds=0.25, warmup=200
    )
    print(watched.line())
    assert watched.new >= 40
    assert watched.found_in_5 >= 0.9
    assert watched.active_share >= 0.25  # 10% of the sections, far more of the section reads
    assert watched.downloads > 0
    assert watched.not_new < 0.2  # the target: neither new nor on topic, under 20%
    assert watched.first_reads <= 1  # the source page's one read; the sections: not discovery's
    assert watched.changed_reads == 0
    assert watched.max_slot_polls <= 10
    assert watched.lead_polls == watched.discovery_polls - 1  # all but that one: heard links
    # the section reads did not vanish: the re-polling side made them
    assert watched.repoll_section_downloads >= 30  # 46 of the 50 sections read in one run


@pytest.mark.slow  # 40 slots of 0.1 s through the service
@pytest.mark.parametrize("watch_starts", [False, True], ids=["discovery-reads", "watched"])
async def test_the_trap_site_costs_at_most_its_page_budget(
    database_url: str, watch_starts: bool
) -> None:
    site = TrapSite()
    await site.start()
    repolls: list[int] = []
    try:
        with Store(database_url) as store:
            store.add_urls([NewUrl(validate_url(f"{site.base}/watched"))])
            store.discovery.add_source(
                SourceSpec(validate_url(site.start_url), budget_per_slot=10, budget_per_run=60)
            )
        settings = service_settings(
            database_url,
            capacity=50.0,
            discovery_share=0.2,
            slot_seconds=0.1,
            discovery_watch_starts=watch_starts,
        )
        async with CrawlService(settings) as service:
            await service.run(asyncio.Event(), 40, lambda s: repolls.append(s.polls))
        with Store(database_url) as store:
            sources = store.discovery.sources()
    finally:
        await site.stop()
    # 40 slots x 10 discovery polls offered; the source's run budget is 60 pages. With its
    # start pages watched, the re-polling side reads them too (its polls, not discovery's):
    # the links it hears are charged to the same budget when discovery polls them
    served = site.served["front"] + site.served["calendar"] + site.served["item"]
    served += site.served["shop"]
    assert 0 < served <= 60 + (sum(repolls) if watch_starts else 0)
    assert sources[0].polls <= 60


#: slots the service may run after the site's last change, to read what it last served
DRAIN_SLOTS = 40


@pytest.fixture(scope="module")
def listed_graph() -> LinkGraph:
    """The site of the six runs of the sitemap and feed test, built once: only read (by
    GraphSite and the assertions)."""
    return generate(
        pages=300, sections=6, active_sections=2, duration=16 * SLOT, new_per_hour=1, seed=4
    )


@pytest.mark.parametrize("source", ["/sitemap.xml", "/sitemap.xml.gz", "/feed.xml"])
async def test_a_sitemap_or_feed_source_through_the_service(
    database_url: str, source: str, listed_graph: LinkGraph
) -> None:
    graph = listed_graph
    site = GraphSite(graph, now=SLOT)
    site.conditional = True
    site.gzip_sitemaps = source.endswith(".gz")  # the index lists gzip sitemaps
    await site.start()
    try:
        with Store(database_url) as store:
            store.add_urls(
                [NewUrl(validate_url(site.url(p))) for p in range(graph.size) if graph.exists(p, 0)]
            )
            path = source.removesuffix(".gz")
            store.discovery.add_source(SourceSpec(validate_url(site.base + path)))
        settings = service_settings(
            database_url,
            capacity=20.0,
            discovery_share=0.5,
            slot_seconds=0.1,
            discovery_max_step=0,
            discovery_seed_links=0,
            # every listing asked for every slot (unchanged ones answer 304 or the same body,
            # not parsed again): what is measured is reading them, not how often
            discovery_listing_max_interval_slots=1,
        )
        # 16 slots in which the site changes, one simulated hour each; then the site stands
        # still while the service catches up: a listing is read in the background once a
        # slot has waited a quarter of its length for it (crawler/service/_discovery_
        # listings.py), and is not fetched again until that read is done, so on a busy
        # machine (load 3-10) the feed was read every second or third slot and the pages of
        # the last slots were not found by the 16th (17-19 of 24). Slots go on until 80% of
        # the new pages are found, or DRAIN_SLOTS more have run.
        end = 16 * SLOT  # the site's clock at the last change
        new = {site.url(int(p)) for p in graph.new_pages() if graph.created[p] <= end}
        found: set[str] = set()
        slots = 0
        stop = asyncio.Event()
        with Store(database_url) as reader:
            async with CrawlService(settings) as service:
                service.loop.discovery.clock = lambda: EPOCH.timestamp() + site.now

                def advance(summary: SlotSummary) -> None:
                    nonlocal slots, found
                    slots += 1
                    if site.now < end:
                        site.now += SLOT
                        return
                    found = {row.url for row in reader.discovery.discovered()}
                    if len(found & new) >= 0.8 * len(new) or slots >= 16 + DRAIN_SLOTS:
                        stop.set()

                await service.run(stop, None, advance)
            found = {row.url for row in reader.discovery.discovered()}
    finally:
        await site.stop()
    assert site.now == end
    assert new and found <= {site.url(int(p)) for p in graph.new_pages()}
    assert len(found & new) >= 0.8 * len(new)
    assert site.listings_served["index" if "sitemap" in source else "feed"] >= 1
    if "sitemap" in source:
        assert site.listings_served["section"] >= 6  # every section's sitemap read


@pytest.mark.slow  # a 50 MB-bounded inflation per read of the gzip bomb, 6 slots: ~7 s
async def test_hostile_sitemaps_through_the_service_are_recorded_not_fatal(
    database_url: str,
) -> None:
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "aaaaaaaaaa">'
        + b"".join(
            b'<!ENTITY a%d "' % (i + 1) + (b"&a;" if i == 0 else b"&a%d;" % i) * 10 + b'">'
            for i in range(9)
        )
        + b"]><urlset><url><loc>&a9;</loc></url></urlset>"
    )
    pages = {
        "/sitemap.xml": b"<sitemapindex>"
        + b"".join(
            b"<sitemap><loc>/%s</loc></sitemap>" % name
            for name in (b"bomb.xml", b"zip.xml.gz", b"broken.xml", b"ok.xml")
        )
        + b"</sitemapindex>",
        "/bomb.xml": bomb,
        "/zip.xml.gz": gzip.compress(b"<urlset>" + b" " * 80_000_000 + b"</urlset>"),
        "/broken.xml": b"<urlset><url><loc>/new/2</loc></url><url><loc>",
        "/ok.xml": b"<urlset><url><loc>/new/1</loc></url></urlset>",
        "/new/1": b"<html><body>a new page</body></html>",
        "/watched": b"<html><body>watched</body></html>",
    }

    async def serve(request: web.Request) -> web.Response:
        body = pages.get(request.path)
        if body is None:
            return web.Response(status=404)
        kind = "application/xml" if request.path.endswith(".xml") else "text/html"
        return web.Response(body=body, content_type=kind)

    app = web.Application()
    app.router.add_get("/{tail:.*}", serve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = runner.addresses[0][1]
    base = f"http://127.0.0.1:{port}"
    try:
        with Store(database_url) as store:
            store.add_urls([NewUrl(validate_url(f"{base}/watched"))])
            store.discovery.add_source(SourceSpec(validate_url(f"{base}/sitemap.xml")))
        settings = service_settings(
            database_url,
            capacity=20.0,
            discovery_share=0.5,
            slot_seconds=0.1,
            discovery_max_step=0,
            discovery_seed_links=0,
        )
        async with CrawlService(settings) as service:
            await service.run(asyncio.Event(), 6)
            crawls = [s.crawl for s in service.loop.discovery.sources.values() if s.crawl]
        with Store(database_url) as store:
            found = {row.url for row in store.discovery.discovered()}
    finally:
        await runner.cleanup()
    assert found == {f"{base}/new/1"}  # the good sitemap's page, nothing else
    errors = crawls[0].listing_errors
    assert errors["forbidden_xml"] >= 1 and errors["malformed"] >= 1, errors
    assert errors["too_large"] + errors["bad_gzip"] >= 1, errors  # the bomb: cut or refused
