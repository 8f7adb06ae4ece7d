"""A sitemap's "lastmod moved" for a watched URL: the re-polling side polls it in the next slot,
out of discovery's share, over HTTP on 127.0.0.1, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

from aiohttp import web

from crawler.fetch import validate_url
from crawler.service import CrawlService, SlotSummary
from crawler.store import NewUrl, SourceSpec, Store
from tests.service.conftest import service_settings

WATCHED = 10  # pages listed in the sitemap
FILLER = 190  # other watched pages: with 5 re-polls a slot, each is polled every ~40 slots
BUMPS = {8: 3, 14: 5, 20: 7}  # slot -> the page whose lastmod (and content) moves then
#: the last bump's page must be asked for by its slot + 3 (requests carry the number of slots
#: reported before them); a slot that overran is reported during the next one, so requests
#: up to slot max + 5 may still carry max + 3, and none after it: more slots cannot change
#: the verdict
SLOTS = max(BUMPS) + 5


async def test_a_moved_lastmod_gets_the_watched_page_polled_at_once(database_url: str) -> None:
    version = dict.fromkeys(range(WATCHED), 0)
    lastmod = dict.fromkeys(range(WATCHED), "2026-11-01T00:00:00+00:00")
    slot = 0
    requests: list[tuple[int, str]] = []  # (slot, path) of every page request

    async def sitemap(request: web.Request) -> web.Response:
        entries = "".join(
            f"<url><loc>{base}/p/{k}</loc><lastmod>{lastmod[k]}</lastmod></url>"
            for k in range(WATCHED)
        )
        body = f'<?xml version="1.0"?><urlset>{entries}</urlset>'
        return web.Response(body=body.encode(), content_type="application/xml")

    async def page(request: web.Request) -> web.Response:
        requests.append((slot, request.path))
        k = int(request.match_info["k"])
        text = f"<html><body>page {k} version {version.get(k, 0)}</body></html>"
        return web.Response(text=text, content_type="text/html")

    app = web.Application()
    app.router.add_get("/sitemap.xml", sitemap)
    app.router.add_get("/p/{k}", page)
    app.router.add_get("/f/{k}", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        with Store(database_url) as store:
            urls = [f"{base}/p/{k}" for k in range(WATCHED)]
            urls += [f"{base}/f/{k}" for k in range(FILLER)]
            store.add_urls([NewUrl(validate_url(u)) for u in urls])
            store.discovery.add_source(SourceSpec(validate_url(f"{base}/sitemap.xml")))
        settings = service_settings(
            database_url,
            capacity=10.0,
            discovery_share=0.5,
            slot_seconds=0.1,
            discovery_max_step=0,
            discovery_seed_links=0,
            # the sitemap read every slot (unchanged, it would be read at doubling intervals
            # and a bump seen up to that many slots late): the hint's own delay is measured
            discovery_listing_max_interval_slots=1,
        )
        async with CrawlService(settings) as service:

            def advance(summary: SlotSummary) -> None:
                nonlocal slot
                slot += 1
                if (k := BUMPS.get(slot)) is not None:
                    version[k] += 1
                    lastmod[k] = f"2026-11-02T00:00:{slot:02d}+00:00"

            await service.run(asyncio.Event(), SLOTS, advance)
    finally:
        await runner.cleanup()
    for bumped_at, k in BUMPS.items():
        after = [s for s, path in requests if path == f"/p/{k}" and s >= bumped_at]
        # the sitemap read in the slot after the bump hints it; it is polled in the next one
        assert after and after[0] <= bumped_at + 3, (k, bumped_at, after[:3])
