"""Hostile sitemaps and feeds through the real service, beside three ordinary watched pages.

A hostile site on 127.0.0.5 serves, with no validators: a gzip body inflating to a valid
49 MB sitemap (``benchmarks.listing_reads.sitemap_bomb``), an RSS feed of 100,000 items (5 MB),
a sitemap refused with a 403, and two sitemap indexes listing themselves and each other. Three
ordinary pages on 127.0.0.2-4 are watched. Each test runs the service twice on the same
database backend: a control run with the ordinary pages only, then the same pages beside the
hostile source; the ordinary pages must keep >= 90% of the polls per minute of the control
run (counted from their own servers' request logs), and the service's RSS stay within 100 MB
of where it was when its slots began (the listing worker's too).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass

import psutil  # type: ignore[import-untyped]
import pytest
from aiohttp import web

from benchmarks.listing_reads import big_feed, sitemap_bomb
from crawler.fetch import validate_url
from crawler.service import CrawlService, SlotSummary
from crawler.store import NewUrl, SourceSpec, Store
from tests.service.conftest import service_settings

ORDINARY_HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
HOSTILE_HOST = "127.0.0.5"
SLOT_S = 0.25
RUN_S = 12.0
POLLS_RATIO = 0.9
RSS_GROWTH_MB = 100.0


@dataclass
class Servers:
    ordinary: list[str]  # the watched pages' URLs
    hostile: str  # the hostile site's base URL
    requests: Counter[str]  # host or path -> requests
    times: dict[str, list[float]]  # ordinary host -> when it was asked


def _ordinary_app(host: str, servers: Servers) -> web.Application:
    async def page(request: web.Request) -> web.Response:
        servers.times[host].append(time.monotonic())
        text = f"<html><body>{host} at {int(time.monotonic() * 2)}</body></html>"
        return web.Response(text=text, content_type="text/html")

    app = web.Application()
    app.router.add_get("/page", page)
    return app


def _hostile_app(servers: Servers) -> web.Application:
    bomb, feed = sitemap_bomb(), big_feed()
    bodies = {
        "/sitemap.xml.gz": (bomb, "application/x-gzip"),
        "/feed.xml": (feed, "application/rss+xml"),
    }

    async def serve(request: web.Request) -> web.Response:
        path = request.path
        servers.requests[path] += 1
        base = f"http://{request.host}"
        if path == "/refused.xml":
            return web.Response(status=403, text="go away")
        if path in ("/loop.xml", "/loop2.xml"):
            other = "/loop2.xml" if path == "/loop.xml" else "/loop.xml"
            entries = "".join(
                f"<sitemap><loc>{base}{p}</loc></sitemap>" for p in (path, other, "/s.xml")
            )
            return web.Response(body=f"<sitemapindex>{entries}</sitemapindex>".encode())
        if path == "/s.xml":
            return web.Response(body=f"<urlset><url><loc>{base}/a</loc></url></urlset>".encode())
        if path in bodies:
            body, kind = bodies[path]
            return web.Response(body=body, headers={"Content-Type": kind})
        return web.Response(text="<html><body>a page</body></html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", serve)
    return app


@pytest.fixture
async def servers() -> AsyncIterator[Servers]:
    found = Servers([], "", Counter(), {h: [] for h in ORDINARY_HOSTS})
    runners: list[web.AppRunner] = []
    apps = [(h, _ordinary_app(h, found)) for h in ORDINARY_HOSTS]
    apps.append((HOSTILE_HOST, _hostile_app(found)))
    for host, app in apps:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, 0).start()
        runners.append(runner)
        port = runner.addresses[0][1]
        if host == HOSTILE_HOST:
            found.hostile = f"http://{host}:{port}"
        else:
            found.ordinary.append(f"http://{host}:{port}/page")
    try:
        yield found
    finally:
        for runner in runners:
            await runner.cleanup()


@dataclass
class Run:
    polls_per_minute: dict[str, float]  # ordinary host -> polls per minute
    rss_growth_mb: float  # the service's (this process's) peak RSS over its start
    worker_growth_mb: float  # the listing worker's peak RSS over its start
    reads: int  # listings read (parsed) by the listing worker


async def _run(database_url: str, servers: Servers, source: str | None, **extra: object) -> Run:
    """The service for ``RUN_S`` seconds of ``SLOT_S`` slots (the watch list: the ordinary
    pages; ``source``: a discovery source besides)."""
    with Store(database_url) as store:
        store.add_urls([NewUrl(validate_url(u)) for u in servers.ordinary])
        if source is not None:
            store.discovery.add_source(SourceSpec(validate_url(servers.hostile + source)))
    settings = service_settings(
        database_url,
        slot_seconds=SLOT_S,
        capacity=6.0,
        discovery_share=0.5,
        discovery_max_step=0,
        discovery_seed_links=0,
        **extra,
    )
    me = psutil.Process()
    for times in servers.times.values():
        times.clear()
    async with CrawlService(settings) as service:
        worker = service.loop.discovery.listings
        rss: list[float] = []
        worker_rss: list[float] = []

        def sample(summary: SlotSummary) -> None:
            rss.append(me.memory_info().rss / 2**20)
            if worker._worker is not None and worker._worker.process.pid is not None:
                try:
                    process = psutil.Process(worker._worker.process.pid)
                    worker_rss.append(process.memory_info().rss / 2**20)
                except psutil.NoSuchProcess:
                    pass

        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(RUN_S, stop.set)
        started = time.monotonic()
        sample(None)  # type: ignore[arg-type]
        await service.run(stop, None, sample)
        ended = time.monotonic()
        reads = worker.reads
    minutes = (ended - started) / 60
    counts = {
        host: sum(1 for t in times if started <= t <= ended) / minutes
        for host, times in servers.times.items()
    }
    worker_growth = max(worker_rss) - worker_rss[0] if worker_rss else 0.0
    return Run(counts, max(rss) - rss[0], worker_growth, reads)


@pytest.mark.slow  # two 12 s runs of the service each
@pytest.mark.parametrize("source", ["/sitemap.xml.gz", "/feed.xml"])
async def test_a_hostile_listing_leaves_other_hosts_their_polls_and_memory(
    database_url: str, servers: Servers, source: str
) -> None:
    control = await _run(database_url, servers, None)
    hostile = await _run(database_url, servers, source)
    print(f"{source}: control {control}\n{source}: hostile {hostile}")
    for host in ORDINARY_HOSTS:
        assert control.polls_per_minute[host] > 0
        ratio = hostile.polls_per_minute[host] / control.polls_per_minute[host]
        assert ratio >= POLLS_RATIO, (host, hostile.polls_per_minute, control.polls_per_minute)
    assert hostile.rss_growth_mb < RSS_GROWTH_MB, hostile
    assert hostile.worker_growth_mb < RSS_GROWTH_MB, hostile
    # read at most as often as it changes: the body never changes, so after its first read
    # it is fetched at doubling intervals and never parsed again
    assert 1 <= servers.requests[source] <= 1 + RUN_S / SLOT_S / 2, servers.requests
    assert hostile.reads == 1, hostile


@pytest.mark.slow  # 40 slots of 50 ms and the service's start: ~8 s
@pytest.mark.parametrize("watch_starts", [True, False])
async def test_a_refused_or_looping_listing_backs_off_and_warns_once(
    database_url: str, servers: Servers, caplog: pytest.LogCaptureFixture, watch_starts: bool
) -> None:
    """A sitemap answering 403 and two sitemap indexes listing themselves and each other.
    With ``discovery_watch_starts`` the refused one (not known to be a listing) becomes a
    watched start page, read by the scheduler at its own pace; without, discovery reads it at
    doubling intervals. Either way: one WARNING per URL, the rest at DEBUG."""
    with Store(database_url) as store:
        store.add_urls([NewUrl(validate_url(u)) for u in servers.ordinary])
        sources = store.discovery
        for path in ("/refused.xml", "/loop.xml"):
            sources.add_source(SourceSpec(validate_url(servers.hostile + path)))
    settings = service_settings(
        database_url,
        slot_seconds=0.05,
        capacity=8.0,
        discovery_share=0.5,
        discovery_max_step=0,
        discovery_seed_links=0,
        discovery_watch_starts=watch_starts,
    )
    slots = 40
    caplog.set_level(logging.DEBUG, logger="crawler.service")
    async with CrawlService(settings) as service:
        await service.run(asyncio.Event(), slots)
    # every slot before: now at doubling intervals (2, 4, 8, 16 slots): a handful of reads
    assert 1 <= servers.requests["/refused.xml"] <= 6, servers.requests
    assert 1 <= servers.requests["/loop.xml"] <= 8, servers.requests
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    refused = [m for m in warnings if "refused.xml" in m]
    loops = [m for m in warnings if "lists itself" in m]
    assert len(refused) == 1, warnings
    assert 1 <= len(loops) <= 2, warnings  # each looping index warned about once
    if not watch_starts:
        debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
        assert any("refused.xml" in m for m in debug), "later failures are logged at DEBUG"
