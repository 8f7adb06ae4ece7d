"""Issue 22's acceptance 2 through the real service: discovery with a fixed budget over HTTP.

A generated site of 5,000 pages in 50 sections, 5 of which gain new pages (one new page every
2 slots in all, 20-page listings on the section indexes), served on 127.0.0.1 at a simulated
time that moves one hour per slot. The service (``CrawlService``, a real database, its real
poller) watches the site's pages except the 50 section indexes, with a capacity of 50 polls
per slot of which discovery gets 20% (10 polls); one source, the front page, whose links (the
section indexes) become the start pages. After the run it reports, from the site's own
counters and the service's records:

- the share of the new pages found within 5 slots of their appearance (target >= 90%);
- the 5 active sections' share of the source's start-page polls (what was learned; 10% if
  the polls were spread evenly);
- discovery's downloads (200 responses; a 304 to a conditional poll is a poll, not a
  download) split into new pages, first reads of a start page, re-reads of a start page that
  had changed (a new link on it), and the rest;
- the same for a breadth-first re-crawl of the sections (``round_robin``: the start pages in
  turn) with the same budget, on the same site.

The service's discovery clock is the site's simulated clock (the "no older than 24 h" verdict
compares page dates with it).

    PYTHONPATH=. python benchmarks/discovery_service.py [--slots 150] [--slot-seconds 0.3] \\
        [--plot docs/discovery_service.png]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from crawler.fetch import validate_url
from crawler.service import CrawlService, SlotSummary
from crawler.settings import load_settings
from crawler.store import DiscoveryStore, NewUrl, SourceSpec, Store
from crawler.testsite._graph import generate
from crawler.testsite._graphserver import EPOCH, GraphSite

SLOT = 3_600.0  # simulated seconds per slot
PAGES = 5_000
SECTIONS = 50
ACTIVE = 5
CAPACITY = 50.0
SHARE = 0.2


@dataclass
class Outcome:
    """What one run measured."""

    start_choice: str
    slots: int
    new: int = 0  # new pages that appeared at least 5 slots before the end
    found_in_5: float = 0.0
    mean_delay_slots: float = 0.0
    delays: list[float] = field(default_factory=list)  # per new page (inf: not found)
    active_share: float = 0.0
    shares: dict[int, float] = field(default_factory=dict)  # section -> share of start polls
    discovery_polls: int = 0  # as the service counted them (304s included)
    max_slot_polls: int = 0  # the most discovery polls in one slot
    downloads: int = 0
    new_downloads: int = 0
    first_reads: int = 0
    changed_reads: int = 0
    other_downloads: int = 0
    not_modified: int = 0
    seconds: float = 0.0

    @property
    def not_new(self) -> float:
        return 1.0 - self.new_downloads / max(self.downloads, 1)

    @property
    def barren(self) -> float:
        """Downloads that were neither a new page nor a start page that had changed."""
        return (self.first_reads + self.other_downloads) / max(self.downloads, 1)

    def line(self) -> str:
        return (
            f"{self.start_choice:11s} {self.new} new pages, found within 5 slots "
            f"{self.found_in_5:.2f} (mean delay {self.mean_delay_slots:.2f} slots); active "
            f"sections' share of start polls {self.active_share:.2f}; {self.discovery_polls} "
            f"discovery polls (at most {self.max_slot_polls} a slot), {self.not_modified} "
            f"answered 304, {self.downloads} downloads: "
            f"{self.new_downloads} new pages, {self.first_reads} first reads, "
            f"{self.changed_reads} changed start pages, {self.other_downloads} other; not new "
            f"{self.not_new:.2f}, neither new nor a changed start page {self.barren:.2f} "
            f"({self.seconds:.0f} s)"
        )


async def run_acceptance(
    database_url: str,
    *,
    start_choice: str = "bandit",
    slots: int = 150,
    slot_seconds: float = 0.3,
    seed: int = 0,
    max_step: int = 0,
) -> Outcome:
    """One run of the service against a fresh copy of the generated site."""
    started = time.perf_counter()
    graph = generate(
        pages=PAGES,
        sections=SECTIONS,
        active_sections=ACTIVE,
        new_per_hour=0.5,
        duration=slots * SLOT,
        seed=seed,
    )
    site = GraphSite(graph, now=SLOT)
    site.conditional = True
    await site.start()
    sections = set(range(SECTIONS))
    new_pages = {int(p) for p in graph.new_pages()}
    active = {int(graph.section[p]) for p in new_pages}
    try:
        with Store(database_url) as store:
            watched = [
                NewUrl(validate_url(site.url(p))) for p in range(SECTIONS, graph.size)
                if graph.exists(p, 0.0)
            ]  # fmt: skip
            store.add_urls(watched)
            DiscoveryStore(store).add_source(
                SourceSpec(validate_url(site.url(0)), budget_per_slot=10, max_depth=3)
            )
        settings = load_settings(
            {
                "database_url": database_url,
                "slot_seconds": slot_seconds,
                "capacity": CAPACITY,
                "discovery_share": SHARE,
                "discovery_start_choice": start_choice,
                "discovery_max_step": max_step,
                "metrics_port": 0,
                "allow_private_addresses": True,
                "per_host_min_delay_s": 0.0,
                "per_host_concurrency": 16,
                "fetch_timeout_s": 5.0,
                "fetch_retries": 0,
                "normalize_workers": 1,
                "fetch_workers": 0,
                "seed": seed,
            }
        )
        outcome = Outcome(start_choice, slots)

        per_slot: list[int] = []

        async with CrawlService(settings) as service:
            discovery = service.loop.discovery

            def on_slot(summary: SlotSummary) -> None:
                per_slot.append(discovery.last.polls)
                site.now += SLOT

            discovery.clock = lambda: EPOCH.timestamp() + site.now
            await service.run(asyncio.Event(), slots, on_slot)
            crawls = [s.crawl for s in discovery.sources.values() if s.crawl is not None]
        with Store(database_url) as store:
            found_rows = DiscoveryStore(store).discovered()
    finally:
        await site.stop()
    end = site.now - SLOT  # the simulated time of the last slot
    found: dict[int, float] = {}
    for row in found_rows:
        page = int(row.url.rsplit("/", 1)[1])
        found.setdefault(page, row.found_at.timestamp() - EPOCH.timestamp())
    due = sorted(p for p in new_pages if graph.created[p] <= end - 5 * SLOT)
    outcome.new = len(due)
    outcome.delays = [
        (found[p] - float(graph.created[p])) / SLOT if p in found else float("inf") for p in due
    ]
    outcome.found_in_5 = sum(d <= 5.0 for d in outcome.delays) / max(len(due), 1)
    finite = [d for d in outcome.delays if d != float("inf")]
    outcome.mean_delay_slots = sum(finite) / max(len(finite), 1)
    shares: dict[int, float] = {}
    for crawl in crawls:
        for url, share in crawl.start_shares().items():
            page = int(url.rsplit("/", 1)[1])
            if page in sections:
                shares[page] = shares.get(page, 0.0) + share
    outcome.shares = shares
    outcome.discovery_polls = sum(per_slot)
    outcome.max_slot_polls = max(per_slot, default=0)
    outcome.active_share = sum(shares.get(c, 0.0) for c in active)
    outcome.not_modified = sum(site.unchanged[p] for p in sections)
    for page, served in site.served.items():
        count = served - site.unchanged[page]  # downloads: 304s are not
        if page in new_pages:
            outcome.new_downloads += min(count, 1)
            outcome.other_downloads += count - 1  # a new page downloaded again
        elif page in sections and count:
            outcome.first_reads += 1
            outcome.changed_reads += count - 1
    outcome.downloads = (
        outcome.new_downloads + outcome.other_downloads + outcome.first_reads
        + outcome.changed_reads
    )  # fmt: skip
    outcome.seconds = time.perf_counter() - started
    return outcome


def _plot(outcomes: list[Outcome], active: set[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    for o in outcomes:
        delays = sorted(o.delays)
        xs = [0.0] + [d for d in delays if d != float("inf")]
        ys = [0.0] + [(i + 1) / len(delays) for i in range(len(xs) - 1)]
        xs.append(10.0)
        ys.append(ys[-1])
        left.step(xs, ys, where="post", label=f"{o.start_choice} ({o.found_in_5:.0%} by 5)")
    left.axvline(5.0, color="k", ls=":", lw=1)
    left.axhline(0.9, color="k", ls=":", lw=1)
    left.set_xlim(0, 10)
    left.set_xlabel("slots from a page's appearance to its discovery")
    left.set_ylabel("share of the new pages found")
    left.legend(fontsize=8, loc="lower right")
    left.set_title("the service: how soon new pages are found")
    width = 0.4
    for i, o in enumerate(outcomes):
        xs = sorted(o.shares)
        right.bar([c + (i - 0.5) * width for c in xs], [o.shares[c] for c in xs], width,
                  label=o.start_choice)  # fmt: skip
    for c in active:
        right.axvspan(c - 0.5, c + 0.5, color="gold", alpha=0.3, lw=0)
    right.set_xlabel("section (shaded: the 5 that gain pages)")
    right.set_ylabel("share of the start-page polls")
    right.legend(fontsize=8)
    right.set_title("where the discovery polls went")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    print(f"plot written to {path}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=150)
    parser.add_argument("--slot-seconds", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory() as tmp:
        for choice in ("bandit", "round_robin"):
            url = args.database_url or f"sqlite:///{tmp}/{choice}.db"
            with Store(url) as store:
                store.upgrade()
            outcome = await run_acceptance(
                url,
                start_choice=choice,
                slots=args.slots,
                slot_seconds=args.slot_seconds,
                seed=args.seed,
            )
            print(outcome.line(), flush=True)
            outcomes.append(outcome)
    if args.plot is not None:
        graph = generate(
            pages=PAGES, sections=SECTIONS, active_sections=ACTIVE, new_per_hour=0.5,
            duration=args.slots * SLOT, seed=args.seed,
        )  # fmt: skip
        _plot(outcomes, {int(graph.section[p]) for p in graph.new_pages()}, args.plot)


if __name__ == "__main__":
    asyncio.run(main())
