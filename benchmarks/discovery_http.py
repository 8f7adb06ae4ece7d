"""Discovery over real HTTP with a fixed budget per slot (the shape of issue 22's acceptance 2,
without the service): a generated site of 5,000 pages and 50 sections, 5 of which gain new pages
(one every 2 slots in all), served on 127.0.0.1; ``SourceCrawl`` gets ``--polls`` fetches per
slot (20% of 50 = 10) from the front page. For each fleet kind: the share of new pages found
within 5 slots of their appearance, the share of fetches spent on pages that were not new, and
the share of fetches that went to the active sections' index pages.

    PYTHONPATH=. python benchmarks/discovery_http.py [--slots 200] [--polls 10]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from email.utils import parsedate_to_datetime

import aiohttp

from crawler.discovery import STRATEGIES, Scope, SourceCrawl
from crawler.testsite._graph import generate
from crawler.testsite._graphserver import EPOCH, GraphSite

SLOT = 3_600.0


async def run(
    strategy: str,
    slots: int,
    polls: int,
    seed: int,
    max_step: int,
    section_seeds: bool,
    start_choice: str = "weblog",
) -> dict[str, float]:
    graph = generate(
        pages=5_000,
        sections=50,
        active_sections=5,
        new_per_hour=0.5,
        duration=slots * SLOT,
        seed=seed,
    )
    site = GraphSite(graph, now=0.0)
    await site.start()
    active = {int(graph.section[p]) for p in graph.new_pages()}
    hub_fetches = 0
    try:
        known = {site.url(p) for p in range(graph.size) if graph.exists(p, 0.0)}
        crawl = SourceCrawl(
            site.url(0),
            strategy=strategy,
            known=known,
            scope=Scope.same_host(site.url(0), page_budget=10**9, max_depth=20),
            seeds=[site.url(c) for c in range(graph.sections)] if section_seeds else None,
            max_step=max_step,
            seed=seed,
            start_choice=start_choice,
        )
        async with aiohttp.ClientSession() as http:
            for slot in range(slots):
                site.now = (slot + 1) * SLOT
                crawl.new_slot()
                for _ in range(polls):
                    url = crawl.next_url()
                    if url is None:
                        break
                    async with http.get(url) as response:
                        html = await response.text() if response.status == 200 else None
                        stamp = response.headers.get("Last-Modified")
                    published = None
                    if stamp is not None:
                        published = (parsedate_to_datetime(stamp) - EPOCH).total_seconds()
                    crawl.fetched(url, html, published=published, now=site.now)
                    page = int(url.rsplit("/", 1)[1])
                    hub_fetches += page in active
    finally:
        await site.stop()
    found = {int(d.url.rsplit("/", 1)[1]): d.found_at for d in crawl.found}
    new = [int(p) for p in graph.new_pages() if graph.created[p] <= site.now - 5 * SLOT]
    in_time = sum(1 for p in new if p in found and found[p] - graph.created[p] <= 5 * SLOT)
    return {
        "new": len(new),
        "found_in_5_slots": in_time / max(len(new), 1),
        "wasted": 1.0 - len(found) / max(crawl.fetches, 1),
        "active_index_share": hub_fetches / max(crawl.fetches, 1),
        "fetches": crawl.fetches,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=200)
    parser.add_argument("--polls", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-step", type=int, default=100)
    parser.add_argument("--section-seeds", action="store_true", help="all section indexes")
    parser.add_argument("--start-choice", choices=("weblog", "bandit"), default="weblog")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    args = parser.parse_args()
    for strategy in args.strategies.split(","):
        for seed in range(args.runs):
            started = time.perf_counter()
            r = await run(
                strategy,
                args.slots,
                args.polls,
                seed,
                args.max_step,
                args.section_seeds,
                args.start_choice,
            )
            print(
                f"{strategy:13s} site {seed}: {r['new']:.0f} new, found within 5 slots "
                f"{r['found_in_5_slots']:.2f}, fetches not new {r['wasted']:.2f}, "
                f"on active section indexes {r['active_index_share']:.2f} "
                f"({r['fetches']:.0f} fetches, {time.perf_counter() - started:.1f} s)",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
