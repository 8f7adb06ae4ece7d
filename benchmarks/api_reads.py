"""The change feed and API's reads on a large history: one page, filtered pages, a feed
load cold (every diff computed) and warm (every diff cached).

    python benchmarks/api_reads.py [--changes 100000] [--database-url URL]

Rows are written straight into ``changes`` (texts of about 4 KB, compressed as the store
compresses them), then each read runs through ``ChangeApi``'s code paths as a request
would. Prints milliseconds per read (median of 5). Figures taken on a shared machine are
noisy: compare ratios, not absolutes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx
from prometheus_client import CollectorRegistry
from sqlalchemy import insert

from crawler.api import FEED_DEFAULT_LIMIT, ChangeApi, DiffCache
from crawler.health import start_http_server
from crawler.store import NewUrl, Store, compress_snapshot
from crawler.store.models import changes

URLS = 1_000


def text(k: int, version: int) -> str:
    return "\n".join(f"line {i} of page {k} edition {version if i % 7 == 0 else 0}"
                     for i in range(120))  # fmt: skip


def fill(store: Store, count: int) -> None:
    store.upgrade()
    store.add_urls([NewUrl(f"https://example.com/p/{k}") for k in range(1, URLS + 1)])
    store.edit_urls(list(range(1, URLS + 1, 10)), {}, add_tags=["news"])
    start = datetime(2026, 1, 1, tzinfo=UTC)
    batch = []
    for i in range(count):
        k = i % URLS + 1
        batch.append({
            "url_id": k, "slot": i, "detected_at": start + timedelta(seconds=i),
            "old_hash": f"{i - URLS}", "new_hash": f"{i}",
            "snapshot": compress_snapshot(text(k, i // URLS), None), "snapshot_format": 1,
        })  # fmt: skip
        if len(batch) == 5_000 or i == count - 1:
            with store.engine.begin() as conn:
                conn.execute(insert(changes), batch)
            batch.clear()
            print(f"  {i + 1:,} / {count:,} changes written", flush=True)


def timed(name: str, call: Callable[[], object]) -> None:
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        call()
        runs.append((time.perf_counter() - t0) * 1000)
    print(f"{name:<48} {statistics.median(runs):8.1f} ms")


async def loop_lag(store: Store, requests: int) -> None:
    """The event loop's longest stall (a 5 ms ticker) while ``requests`` feeds of 500 cold
    diffs each are served (a new cache per request), against the same time idle."""
    stalls: list[float] = []

    async def ticker(stop: asyncio.Event) -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(0.005)
            stalls.append(time.perf_counter() - t0 - 0.005)

    api = ChangeApi(store, cache_entries=1)
    server = await start_http_server("127.0.0.1", 0, CollectorRegistry(), lambda: True, api.install)
    try:
        for label, load in (("idle", False), ("serving cold feeds", True)):
            stalls.clear()
            stop = asyncio.Event()
            tick = asyncio.create_task(ticker(stop))
            t0 = time.perf_counter()
            if load:  # the reader in a thread: its parsing of the answers is not the loop's

                def read_feeds() -> None:
                    with httpx.Client(base_url=server.url, timeout=60) as client:
                        for _ in range(requests):
                            got = client.get("/feed/changes.atom", params={"limit": "500"})
                            assert got.status_code == 200

                await asyncio.to_thread(read_feeds)
            else:
                await asyncio.sleep(2.0)
            took = time.perf_counter() - t0
            stop.set()
            await tick
            print(f"event loop, {label:<20} longest stall {max(stalls) * 1000:6.1f} ms, "
                  f"p99 {statistics.quantiles(stalls, n=100)[98] * 1000:5.1f} ms "
                  f"over {took:.1f} s")  # fmt: skip
    finally:
        await server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{tmp}/api.db"
        with Store(url) as store:
            fill(store, args.changes)
            late = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=args.changes - 500)
            timed("page of 100, no filter", lambda: store.list_changes(limit=100))
            timed("page of 1000, no filter", lambda: store.list_changes(limit=1000))
            timed("page of 100 after the middle cursor",
                  lambda: store.list_changes(after_id=args.changes // 2, limit=100))  # fmt: skip
            timed("page of 100, since = 500 changes ago",
                  lambda: store.list_changes(since=late, limit=100))  # fmt: skip
            timed("page of 100, tag (a tenth of the URLs)",
                  lambda: store.list_changes(tag="news", limit=100))  # fmt: skip
            timed("page of 100, one URL",
                  lambda: store.list_changes(url="https://example.com/p/7", limit=100))  # fmt: skip
            newest = store.list_changes(limit=FEED_DEFAULT_LIMIT, newest_first=True)
            ids = [c.id for c in newest]

            def cold() -> None:
                DiffCache(store).many(ids)

            cache = DiffCache(store)
            cache.many(ids)
            timed(f"feed's {len(ids)} diffs, cold (read texts, diff)", cold)
            timed(f"feed's {len(ids)} diffs, warm (cached)", lambda: cache.many(ids))
            timed("feed's newest 50 rows", lambda: store.list_changes(limit=50, newest_first=True))
            asyncio.run(loop_lag(store, 5))


if __name__ == "__main__":
    main()
