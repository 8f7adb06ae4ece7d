"""Service start-up with many watched URLs: wall time and resident memory per URL.

    .venv/bin/python benchmarks/service_startup.py                    # 1,000,000 URLs, both DBs
    .venv/bin/python benchmarks/service_startup.py --urls 100000 --db sqlite

For each database: the URLs are added (Store.add_urls), then a fresh process starts
CrawlService (store.upgrade, then the loop's load: active_urls, load_scheduler_state,
scheduler.add/restore) twice: a first start (no saved scheduler state) and, after a full
state was saved, a restart. Measured in that process: the wall time of ``__aenter__`` (crawl
workers started included) and the RSS it added (after imports and a warm-up of the libraries),
divided by the number of URLs; and the crawl worker processes' RSS.
PostgreSQL runs in a temporary schema of CRAWLER_BENCH_POSTGRES_URL (dropped afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_databases import database

from crawler import schedulers
from crawler.service import CrawlService
from crawler.settings import load_settings
from crawler.store import NewUrl, Store

SCHEDULER = "bayes"


def child(database_url: str) -> None:
    """Start the service once; print {"seconds", "rss_mb", "urls"} as JSON."""
    settings = load_settings(
        {
            "database_url": database_url,
            "metrics_port": 0,
            "scheduler": SCHEDULER,
            "seed": 1,
            "default_min_interval_s": 0,
        }  # the allocation as measured: no polite bound
    )
    proc = psutil.Process()

    async def main() -> dict[str, float]:
        gc.collect()
        before = proc.memory_info().rss
        started = time.perf_counter()
        async with CrawlService(settings) as service:
            seconds = time.perf_counter() - started
            gc.collect()
            after = proc.memory_info().rss
            workers = sum(c.memory_info().rss for c in proc.children(recursive=True))
            assert service.loop.scheduler is not None
            urls = service.loop.scheduler.size
        return {
            "seconds": seconds,
            "rss_mb": (after - before) / 2**20,
            "urls": urls,
            "workers_mb": workers / 2**20,
        }

    print(json.dumps(asyncio.run(main())))


def start_once(database_url: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", database_url],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run(kind: str, n: int) -> None:
    with database(kind) as url:
        store = Store(url)
        store.upgrade()
        t0 = time.perf_counter()
        store.add_urls([NewUrl(f"https://site{i % 5000}.example/page/{i}") for i in range(n)])
        print(f"[{kind}] added {n:,} URLs in {time.perf_counter() - t0:.1f} s")
        for label in ("first start", "restart with a saved state"):
            if label.startswith("restart"):
                ids, _ = store.active_urls()
                sched = schedulers.create(SCHEDULER, capacity=n / 100, seed=1)
                sched.add(ids)
                store.save_scheduler_state(sched.take_delta())
                del sched, ids
            r = start_once(url)
            per_url = r["rss_mb"] * 2**20 / max(1, r["urls"])
            print(
                f"[{kind}] {label}: {r['urls']:,.0f} URLs in {r['seconds']:.1f} s, "
                f"RSS +{r['rss_mb']:.0f} MB = {per_url:.0f} bytes per URL; the crawl workers "
                f"{r['workers_mb']:.0f} MB in all (their size does not grow with the URLs)"
            )
        store.close()


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="both")
    args = parser.parse_args()
    for kind in ("sqlite", "postgresql") if args.db == "both" else (args.db,):
        run(kind, args.urls)


if __name__ == "__main__":
    main()
