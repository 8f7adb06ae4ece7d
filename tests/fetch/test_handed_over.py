"""A host taken over from another process: its first request waits the host's delay.

A cluster worker that gains a site does not know when the site's old owner last asked it;
it knows only that it was at most at the hand-over. The job carries that time
(``PollJob.handed_over_at``) and the fetcher's gate starts no request to the host before
it plus the host's delay, the Crawl-delay included though robots.txt is read only after
the hand-over (a real HTTP server logs when each request came).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from aiohttp import web

from crawler.detect import ChangeDetector
from crawler.fetch import Fetcher
from crawler.workers import InProcessPoller, PollJob
from tests.fetch.conftest import BASE_CONFIG, Site, start

DELAY = 1.0  # long enough that a loaded machine does not reach it by itself


def _job(url_id: int, url: str, handed_over_at: float | None) -> PollJob:
    return PollJob(url_id, url, "127.0.0.1", None, None, None, (), None, None,
                   handed_over_at=handed_over_at)  # fmt: skip


async def _first_request_after(site: Site, handed_over_at: float | None) -> float:
    """Seconds from a hand-over (now) to the first page request the server saw."""
    seen: list[float] = []

    async def page(request: web.Request) -> web.Response:
        seen.append(time.time())
        return web.Response(text="page", content_type="text/html")

    async def robots(request: web.Request) -> web.Response:
        return web.Response(text=f"User-agent: *\nCrawl-delay: {DELAY}\n")

    site.route("/robots.txt", robots)
    site.route("/p", page)
    await start(site)
    poller = InProcessPoller(BASE_CONFIG, None, ChangeDetector(workers=0))
    await poller.start()
    try:
        at = time.time() if handed_over_at is None else handed_over_at
        async for _ in poller.poll_chunks([_job(1, site.url("/p"), handed_over_at)], None):
            pass
    finally:
        await poller.aclose()
    return seen[0] - at


async def test_a_handed_over_host_waits_its_crawl_delay(site: Site) -> None:
    gap = await _first_request_after(site, time.time())
    assert gap >= DELAY - 0.01, f"the first request came {gap:.3f} s after the hand-over"


async def test_a_host_not_handed_over_is_asked_at_once(site: Site) -> None:
    gap = await _first_request_after(site, None)
    assert gap < DELAY, f"the first request waited {gap:.3f} s with no hand-over"


async def test_a_long_past_hand_over_does_not_delay(make_fetcher: Callable[..., Fetcher]) -> None:
    gates = make_fetcher(per_host_min_delay_s=0.5).gates
    gates.handed_over("a.test", time.time() - 5.0)
    began = time.monotonic()
    async with gates.slot("a.test"):
        pass
    assert time.monotonic() - began < 0.1
    assert gates.next_start("a.test") < time.monotonic() + 0.5
