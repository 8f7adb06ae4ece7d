"""The listing worker process: reads off the event loop, a deadline, a restart after it."""

from __future__ import annotations

import asyncio
import os
import pickle
import time

from benchmarks.listing_reads import big_feed
from crawler.discovery import Listing, SitemapError
from crawler.ipc import frame_header, start_context
from crawler.listings import ListingLimits, ListingReader, serve

SITEMAP = b"<urlset><url><loc>/a</loc><lastmod>2026-11-23</lastmod></url></urlset>"


async def test_a_listing_is_read_in_the_worker() -> None:
    reader = ListingReader(ListingLimits(2**20, 1_000, 10), timeout_s=30.0)
    try:
        listing = await reader.read(SITEMAP, "http://127.0.0.1/sitemap.xml")
        assert isinstance(listing, Listing) and listing.kind == "urlset"
        assert [i.url for i in listing.items] == ["http://127.0.0.1/a"]
        bad = await reader.read(b"<urlset><url>", "http://127.0.0.1/")
        assert isinstance(bad, SitemapError) and bad.reason == "malformed"
        assert reader.reads == 2 and reader.timeouts == 0
    finally:
        reader.close()


async def test_a_read_past_its_deadline_is_abandoned_and_the_next_one_works() -> None:
    # no cut: feedparser on all 100,000 items takes seconds, far past the deadline
    reader = ListingReader(ListingLimits(8 * 2**20, 200_000, 200_000), timeout_s=0.5)
    try:
        assert await reader.ready()
        first = reader._worker
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        started = time.monotonic()
        slow = await reader.read(big_feed(), "http://127.0.0.1/feed.xml")
        waited = time.monotonic() - started
        ticker.cancel()
        assert isinstance(slow, SitemapError) and slow.reason == "timeout", slow
        assert waited < 5.0 and reader.timeouts == 1
        assert ticks >= 10  # the loop kept running while the worker read
        assert first is not None and not first.process.is_alive()  # killed, not left busy
        again = await reader.read(SITEMAP, "http://127.0.0.1/sitemap.xml")
        assert isinstance(again, Listing) and reader._worker is not first
    finally:
        reader.close()


def test_a_worker_whose_reader_is_gone_ends_quietly() -> None:
    """The service stopped while a listing worker answered (its first, empty request, as at
    a start during a stop): the worker ends with exit code 0 and no traceback, where the
    flush of the closing file used to fail again and print one."""
    ctx = start_context(serve)
    req_r, req_w = ctx.Pipe(duplex=False)
    ans_r, ans_w = ctx.Pipe(duplex=False)
    worker = ctx.Process(target=serve, args=(req_r, ans_w), daemon=True)
    worker.start()
    for end in (req_r, ans_w, ans_r):  # the reader of the answers is gone
        end.close()
    payload = pickle.dumps([])
    os.write(req_w.fileno(), frame_header(len(payload)) + payload)
    req_w.close()
    worker.join(30)
    assert worker.exitcode == 0
