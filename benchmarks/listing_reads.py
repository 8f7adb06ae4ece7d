"""How long one hostile listing read blocks the event loop: inline, in a thread, in a process.

    python -m benchmarks.listing_reads            # 3 rounds
    python -m benchmarks.listing_reads --rounds 5

Two listings a hostile site may serve within the fetcher's 5 MB body bound: a gzip body of
about 270 KB inflating to a valid 49 MB sitemap, and an RSS feed of 100,000 items (5 MB).
Each is read with the service's limits (``crawler.listings.ListingLimits`` from the default
settings) three ways, interleaved round by round (this machine's speed drifts, so the three
see the same drift): on the event loop itself, in a thread (``asyncio.to_thread``: parsing
is pure Python and holds the GIL), and in the listing worker process
(``crawler.listings.ListingReader``). While it reads, a ticker on the loop wakes every 5 ms;
the longest gap between two ticks past 5 ms is the read's stall of the loop. Printed per mode
and listing: the median and worst stall, the read's wall time, and the main process's RSS
growth (psutil) over the whole run.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import io
import statistics
import time
from collections.abc import Awaitable, Callable

import psutil  # type: ignore[import-untyped]

from crawler.discovery import read_listing
from crawler.listings import ListingLimits, ListingReader
from crawler.settings import load_settings

TICK_S = 0.005


def sitemap_bomb(inflated: int = 49 * 1024 * 1024) -> bytes:
    """A valid sitemap of ``inflated`` bytes, gzip-compressed (about 270 KB): 20 distinct
    URLs over and over (gzip sees the repeats within its 32 KB window)."""
    head = b'<?xml version="1.0" encoding="UTF-8"?>\n'
    head += b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
    entry = b"<url><loc>http://127.0.0.1/p/%04d</loc><lastmod>2026-11-01</lastmod></url>\n"
    block = b"".join(entry % k for k in range(20))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9, mtime=0) as packed:
        packed.write(head)
        for _ in range(inflated // len(block)):
            packed.write(block)
        packed.write(b"</urlset>\n")
    return out.getvalue()


def big_feed(items: int = 100_000) -> bytes:
    """An RSS 2.0 feed of ``items`` items (about 5 MB for 100,000)."""
    parts = [b'<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>']
    parts += [b"<item><link>http://127.0.0.1/i/%d</link></item>" % k for k in range(items)]
    parts.append(b"</channel></rss>")
    return b"".join(parts)


async def stall(read: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """The longest gap between ticks past ``TICK_S`` while ``read`` runs, and its wall time."""
    worst = 0.0
    done = False

    async def ticker() -> None:
        nonlocal worst
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(TICK_S)
            now = time.perf_counter()
            worst = max(worst, now - last - TICK_S)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(2 * TICK_S)
    started = time.perf_counter()
    await read()
    wall = time.perf_counter() - started
    done = True
    await task
    return worst, wall


async def main(rounds: int) -> None:
    settings = load_settings({})
    limits = ListingLimits(
        settings.discovery_listing_max_bytes, 50_000, settings.discovery_listing_entries
    )
    bodies = {"sitemap 49 MB (gzip)": sitemap_bomb(), "feed 100,000 items": big_feed()}
    for name, body in bodies.items():
        print(f"{name}: {len(body):,} bytes on the wire", flush=True)
    reader = ListingReader(limits, settings.discovery_listing_timeout_s)
    reader.start()
    await reader.read(b"<urlset></urlset>", "http://127.0.0.1/")  # started, not measured
    process = psutil.Process()
    rss0 = process.memory_info().rss

    def inline(body: bytes) -> Callable[[], Awaitable[object]]:
        async def run() -> object:
            return read_listing(body, "http://127.0.0.1/", max_bytes=limits.max_bytes,
                                max_entries=limits.max_entries, newest=limits.newest)  # fmt: skip

        return run

    def thread(body: bytes) -> Callable[[], Awaitable[object]]:
        async def run() -> object:
            return await asyncio.to_thread(
                read_listing, body, "http://127.0.0.1/", max_bytes=limits.max_bytes,
                max_entries=limits.max_entries, newest=limits.newest,
            )  # fmt: skip

        return run

    def worker(body: bytes) -> Callable[[], Awaitable[object]]:
        async def run() -> object:
            return await reader.read(body, "http://127.0.0.1/")

        return run

    modes = {"inline": inline, "thread": thread, "process": worker}
    figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for k in range(rounds):
        for name, body in bodies.items():
            for mode, make in modes.items():
                figures.setdefault((name, mode), []).append(await stall(make(body)))
        print(f"round {k + 1}/{rounds} done", flush=True)
    reader.close()
    print(f"\n{'listing':<22} {'mode':<8} {'stall median':>13} {'stall worst':>12} {'read':>8}")
    for (name, mode), runs in figures.items():
        stalls = [s for s, _ in runs]
        walls = [w for _, w in runs]
        print(
            f"{name:<22} {mode:<8} {statistics.median(stalls):>12.3f}s {max(stalls):>11.3f}s "
            f"{statistics.median(walls):>7.2f}s"
        )
    grown = (process.memory_info().rss - rss0) / 2**20
    print(f"\nmain process RSS growth over the run (all modes): {grown:+.0f} MB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args().rounds))
