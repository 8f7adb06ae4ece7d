"""Discovery over real HTTP with a fixed budget per slot (the shape of discovery's acceptance run,
without the service): a generated site of 5,000 pages and 50 sections, 5 of which gain new pages
(one every 2 slots in all), served on 127.0.0.1; ``SourceCrawl`` gets ``--polls`` fetches per
slot (20% of 50 = 10). For each fleet kind: the share of new pages found within 5 slots of their
appearance, the share of downloads spent on pages that were not new, and the share of the start
pages' polls that went to the 5 active sections.

Sources (``--source``): ``front`` (the front page only), ``sections`` (the 50 section pages as
start pages), ``sitemap`` (the sitemap index; its section sitemaps become start pages), ``feed``
(the site's RSS feed). ``--start-choice bandit`` lets the start-page bandit choose where paths
begin; ``--conditional`` sends ``If-Modified-Since`` (a 304 is a poll but not a download).

    PYTHONPATH=. python benchmarks/discovery_http.py [--slots 200] [--polls 10] \\
        [--source sections --max-step 1 --start-choice bandit --conditional]
    PYTHONPATH=. python benchmarks/discovery_http.py --plot docs/discovery_http.png

``--plot``: the start-page bandit and the round-robin re-crawl of the sections (both with
conditional polls and paths of the start page alone) on the same site, side by side: new pages
that appeared and were found over the slots, and each section's share of the polls.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import aiohttp

from crawler.discovery import START_CHOICES, STRATEGIES, Scope, SourceCrawl
from crawler.testsite._graph import generate
from crawler.testsite._graphserver import EPOCH, GraphSite

SLOT = 3_600.0
_SECTION = re.compile(r"/(?:p|sitemap)/(\d+)(?:\.xml)?$")


async def run(
    strategy: str,
    slots: int,
    polls: int,
    seed: int,
    max_step: int,
    source: str,
    start_choice: str = "weblog",
    conditional: bool = False,
    min_yield: float = 0.0,
    trace: dict[str, Any] | None = None,
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
    site.conditional = conditional
    await site.start()
    active = {int(graph.section[p]) for p in graph.new_pages()}
    downloads = not_new = barren = 0
    stamps: dict[str, str] = {}
    try:
        known = {site.url(p) for p in range(graph.size) if graph.exists(p, 0.0)}
        seeds = {
            "front": [site.url(0)],
            "sections": [site.url(c) for c in range(graph.sections)],
            "sitemap": [f"{site.base}/sitemap.xml"],
            "feed": [f"{site.base}/feed.xml"],
        }[source]
        crawl = SourceCrawl(
            seeds[0],
            strategy=strategy,
            known=known,
            scope=Scope.same_host(site.url(0), page_budget=10**9, max_depth=20),
            seeds=seeds,
            max_step=max_step,
            seed=seed,
            start_choice=start_choice,
            min_yield=min_yield,
        )
        async with aiohttp.ClientSession() as http:
            for slot in range(slots):
                site.now = (slot + 1) * SLOT
                crawl.new_slot()
                fetched: list[tuple[str, bool]] = []
                for _ in range(polls):
                    url = crawl.next_url()
                    if url is None:
                        break
                    headers = {}
                    if conditional and url in stamps:
                        headers["If-Modified-Since"] = stamps[url]
                    async with http.get(url, headers=headers) as response:
                        body = await response.read() if response.status == 200 else None
                        stamp = response.headers.get("Last-Modified")
                        status = response.status
                    published = None
                    if stamp is not None:
                        stamps[url] = stamp
                        published = (parsedate_to_datetime(stamp) - EPOCH).total_seconds()
                    new = crawl.fetched(
                        url, body, published=published, now=site.now, not_modified=status == 304
                    )
                    if status == 200:
                        downloads += 1
                        fetched.append((url, new))
                vias = {d.via for d in crawl.found if d.found_at == site.now}
                for url, new in fetched:
                    not_new += not new
                    barren += not new and url not in vias
    finally:
        await site.stop()
    found = {int(d.url.rsplit("/", 1)[1]): d.found_at for d in crawl.found}
    new_pages = [int(p) for p in graph.new_pages() if graph.created[p] <= site.now - 5 * SLOT]
    in_time = sum(1 for p in new_pages if p in found and found[p] - graph.created[p] <= 5 * SLOT)
    delays = [(found[p] - graph.created[p]) / SLOT for p in new_pages if p in found]
    if trace is not None:
        trace["delays"] = sorted(
            (found[p] - graph.created[p]) / SLOT if p in found else float("inf") for p in new_pages
        )
        trace["active"] = sorted(active)
        trace["shares"] = {
            int(m.group(1)): share
            for url, share in crawl.start_shares().items()
            if (m := _SECTION.search(url))
        }
    shares = crawl.start_shares()
    active_share = 0.0
    for url, share in shares.items():
        match = _SECTION.search(url)
        if match and int(match.group(1)) in active:
            active_share += share
    return {
        "new": len(new_pages),
        "found_in_5_slots": in_time / max(len(new_pages), 1),
        "delay_slots": sum(delays) / max(len(delays), 1),
        "polls": crawl.fetches,
        "downloads": downloads,
        "not_new": not_new / max(downloads, 1),
        "barren": barren / max(downloads, 1),
        "active_share": active_share,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=200)
    parser.add_argument("--polls", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-step", type=int, default=100)
    parser.add_argument(
        "--source", choices=("front", "sections", "sitemap", "feed"), default="front"
    )
    parser.add_argument("--start-choice", choices=START_CHOICES, default="weblog")
    parser.add_argument("--conditional", action="store_true", help="If-Modified-Since")
    parser.add_argument("--min-yield", type=float, default=0.0)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    if args.plot is not None:
        traces: dict[str, dict[str, Any]] = {}
        for choice in ("bandit", "round_robin"):
            traces[choice] = {}
            r = await run(
                "weblog",
                args.slots,
                args.polls,
                0,
                0,
                "sections",
                choice,
                True,
                0.0,
                traces[choice],
            )
            print(choice, {k: round(v, 3) for k, v in r.items()}, flush=True)
        _plot(traces, args.plot)
        return
    for strategy in args.strategies.split(","):
        for seed in range(args.runs):
            started = time.perf_counter()
            r = await run(
                strategy,
                args.slots,
                args.polls,
                seed,
                args.max_step,
                args.source,
                args.start_choice,
                args.conditional,
                args.min_yield,
            )
            print(
                f"{strategy:13s} site {seed}: {r['new']:.0f} new, found within 5 slots "
                f"{r['found_in_5_slots']:.2f} (mean delay {r['delay_slots']:.2f} slots); "
                f"{r['polls']:.0f} polls, {r['downloads']:.0f} "
                f"downloads, not new {r['not_new']:.2f}, neither new nor listing a new page "
                f"{r['barren']:.2f}; active sections' share of start polls "
                f"{r['active_share']:.2f} ({time.perf_counter() - started:.1f} s)",
                flush=True,
            )


def _plot(traces: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    first = next(iter(traces.values()))
    for name, trace in traces.items():
        delays = trace["delays"]
        xs = [0.0] + [d for d in delays if d != float("inf")]
        ys = [0.0] + [(i + 1) / len(delays) for i in range(len(xs) - 1)]
        xs.append(10.0)
        ys.append(ys[-1])
        left.step(xs, ys, where="post", label=name)
    left.axvline(5.0, color="k", ls=":", lw=1)
    left.axhline(0.9, color="k", ls=":", lw=1)
    left.set_xlim(0, 10)
    left.set_xlabel("slots from a page's appearance to its discovery")
    left.set_ylabel("share of the new pages found")
    left.legend(fontsize=8, loc="lower right")
    left.set_title("how soon new pages are found (target: 90% within 5 slots)")
    sections = sorted(set().union(*(t["shares"] for t in traces.values())))
    width = 0.4
    for i, (name, trace) in enumerate(traces.items()):
        shares = [trace["shares"].get(c, 0.0) for c in sections]
        right.bar([c + (i - 0.5) * width for c in sections], shares, width, label=name)
    for c in first["active"]:
        right.axvspan(c - 0.5, c + 0.5, color="gold", alpha=0.3, lw=0)
    right.set_xlabel("section (shaded: the 5 that gain pages)")
    right.set_ylabel("share of start-page polls")
    right.legend(fontsize=8)
    right.set_title("where the discovery polls went")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    print(f"plot written to {path}")


if __name__ == "__main__":
    asyncio.run(main())
