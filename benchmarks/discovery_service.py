"""Discovery's acceptance through the real service: discovery with a fixed budget over HTTP.

A generated site of 5,000 pages in 50 sections, 5 of which gain new pages (one new page every
2 slots in all, 20-page listings on the section indexes), served on 127.0.0.1 at a simulated
time that moves one hour per slot. The service (``CrawlService``, a real database, its real
poller) watches the site's pages except the 50 section indexes, with a capacity of 50 polls
per slot of which discovery gets 20% (10 polls); one source, the front page, whose links (the
section indexes) become the start pages; or, with ``--marked sections``, each of the 50 section
indexes a source of its own (what an operator who marks "section indexes" does: their links,
old articles, become start pages too, and the sections themselves must still be the pages
read). Three set-ups, each on a fresh database and site:

- ``watched`` (the default, ``discovery_watch_starts``): the start pages go on the watch list,
  the re-polling scheduler polls them at the rates it learns, and a changed one's new links
  are what discovery polls;
- ``bandit``: discovery reads the start pages itself, chosen by the start-page bandit;
- ``round_robin``: the breadth-first re-crawl of the sections (the start pages in turn).

After each run it reports, from the site's own counters and the service's records:

- the share of the new pages found within 5 slots of their appearance (target >= 90%);
- the 5 active sections' share of all polls of the section pages, by either side (what was
  learned; 10% if the polls were spread evenly);
- discovery's downloads (200 responses; a 304 to a conditional poll is a poll, not a
  download) split into new pages, reads of a start page, and the rest; "not new" is the share
  of them that were not a new page (the target: < 20%);
- the section reads the re-polling side made (downloads and 304s), counted apart: they did
  not vanish, they moved to the scheduler's share of the capacity.

The service's discovery clock is the site's simulated clock (the "no older than 24 h" verdict
compares page dates with it).

    PYTHONPATH=. python benchmarks/discovery_service.py [--slots 150] [--slot-seconds 0.3] \\
        [--warmup 200] [--marked front,sections] [--plot docs/discovery_service.png]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crawler.fetch import validate_url
from crawler.service import CrawlService, SlotSummary
from crawler.service._discovery import DiscoverySummary
from crawler.settings import load_settings
from crawler.store import NewUrl, SourceSpec, Store
from crawler.testsite._graph import generate
from crawler.testsite._graphserver import EPOCH, GraphSite

SLOT = 3_600.0  # simulated seconds per slot
PAGES = 5_000
SECTIONS = 50
ACTIVE = 5
CAPACITY = 50.0
SHARE = 0.2
#: slots of re-polling alone before the source is added: two rounds of the 4,950 old pages at
#: 50 polls a slot, so the scheduler has seen each of them twice (one unchanged interval
#: each), as a service that has been running for a while has; the section pages then come
#: to it as new URLs. Without it, the scheduler is still on its first round robin over 5,000
#: cold URLs for the whole run and polls each section about once.
WARMUP = 200


@dataclass
class Outcome:
    """What one run measured."""

    start_choice: str
    slots: int
    watch_starts: bool = False
    marked: str = "front"
    new: int = 0  # new pages that appeared at least 5 slots before the end
    found_in_5: float = 0.0
    mean_delay_slots: float = 0.0
    delays: list[float] = field(default_factory=list)  # per new page (inf: not found)
    #: the new pages found later than 5 slots or not at all: (page, slot created, delay)
    late: list[tuple[int, float, float]] = field(default_factory=list)
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
    others: list[str] = field(default_factory=list)  # the "other" downloads' URLs
    lead_polls: int = 0  # discovery polls of links heard from the scheduler's section polls
    repoll_section_downloads: int = 0  # the re-polling side's reads of the sections (200)
    repoll_section_not_modified: int = 0  # ... and its polls of them answered 304
    repoll_polls: int = 0  # all the re-polling side's polls
    seconds: float = 0.0

    @property
    def label(self) -> str:
        label = "watched" if self.watch_starts else self.start_choice
        return label if self.marked == "front" else f"{label}/sections"

    @property
    def not_new(self) -> float:
        return 1.0 - self.new_downloads / max(self.downloads, 1)

    @property
    def barren(self) -> float:
        """Downloads that were neither a new page nor a start page that had changed."""
        return (self.first_reads + self.other_downloads) / max(self.downloads, 1)

    def line(self) -> str:
        return (
            f"{self.label:11s} {self.new} new pages, found within 5 slots "
            f"{self.found_in_5:.2f} (mean delay {self.mean_delay_slots:.2f} slots); active "
            f"sections' share of section polls {self.active_share:.2f}; "
            f"{self.discovery_polls} discovery polls (at most {self.max_slot_polls} a slot; "
            f"{self.lead_polls} of heard links), {self.not_modified} answered 304, "
            f"{self.downloads} downloads: {self.new_downloads} new pages, {self.first_reads} "
            f"first reads, {self.changed_reads} changed start pages, {self.other_downloads} "
            f"other; not new {self.not_new:.2f}, neither new nor a changed start page "
            f"{self.barren:.2f}; re-polling side: {self.repoll_polls} polls, of which section "
            f"reads {self.repoll_section_downloads} + {self.repoll_section_not_modified} "
            f"answered 304 ({self.seconds:.0f} s); later than 5 slots: "
            + (", ".join(f"p/{p} {d:.1f}" for p, _, d in self.late) or "none")
        )


async def run_acceptance(
    database_url: str,
    *,
    start_choice: str = "bandit",
    watch_starts: bool = False,
    slots: int = 150,
    slot_seconds: float = 0.3,
    seed: int = 0,
    max_step: int = 0,
    warmup: int = WARMUP,
    marked: str = "front",
) -> Outcome:
    """One run of the service against a fresh copy of the generated site: ``warmup`` slots
    of re-polling alone (no source yet; the site does not change), then the source is added
    and ``slots`` slots run, the site's clock moving one hour per slot. ``marked``: the
    source is the front page (``front``), or each section index is a source of its own
    (``sections``: what an operator who marks "section indexes" does)."""
    started = time.perf_counter()
    graph = generate(
        pages=PAGES,
        sections=SECTIONS,
        active_sections=ACTIVE,
        new_per_hour=0.5,
        duration=slots * SLOT,
        seed=seed,
    )
    site = GraphSite(graph, now=0.0)
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
        settings = load_settings(
            {
                "database_url": database_url,
                "slot_seconds": slot_seconds,
                "capacity": CAPACITY,
                "default_min_interval_s": 0,  # the allocation as measured: no polite bound
                "discovery_share": SHARE,
                "discovery_start_choice": start_choice,
                "discovery_watch_starts": watch_starts,
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
        outcome = Outcome(start_choice, slots, watch_starts, marked)

        per_slot: list[int] = []
        downloaded: list[str] = []  # discovery's downloads, in order
        polled_by_discovery: dict[str, int] = {}  # URL -> discovery polls (304s included)
        unmodified_by_discovery: dict[str, int] = {}  # URL -> discovery polls answered 304

        async with CrawlService(settings) as service:
            discovery = service.loop.discovery
            # the scheduler learns the old pages (they do not change) before the source comes
            await service.run(asyncio.Event(), warmup)
            pages = [0] if marked == "front" else sorted(sections)
            with Store(database_url) as store:
                for page in pages:
                    store.discovery.add_source(
                        SourceSpec(validate_url(site.url(page)), budget_per_slot=10, max_depth=3)
                    )
            site.served.clear()
            site.unchanged.clear()
            site.now = SLOT
            run_slot = discovery.run_slot

            async def counted(*args: Any, **kwargs: Any) -> DiscoverySummary:
                last = await run_slot(*args, **kwargs)  # each slot's own summary
                per_slot.append(last.polls)
                downloaded.extend(last.downloaded)
                for url in (*last.downloaded, *last.unmodified):
                    polled_by_discovery[url] = polled_by_discovery.get(url, 0) + 1
                for url in last.unmodified:
                    unmodified_by_discovery[url] = unmodified_by_discovery.get(url, 0) + 1
                outcome.lead_polls += last.lead_polls
                return last

            discovery.run_slot = counted  # type: ignore[method-assign]

            def on_slot(summary: SlotSummary) -> None:
                outcome.repoll_polls += summary.polls
                site.now += SLOT

            discovery.clock = lambda: EPOCH.timestamp() + site.now
            await service.run(asyncio.Event(), warmup + slots, on_slot)
        with Store(database_url) as store:
            found_rows = store.discovery.discovered()
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
    outcome.late = [
        (p, float(graph.created[p]) / SLOT, d) for p, d in zip(due, outcome.delays, strict=True)
        if d > 5.0
    ]  # fmt: skip
    outcome.found_in_5 = sum(d <= 5.0 for d in outcome.delays) / max(len(due), 1)
    finite = [d for d in outcome.delays if d != float("inf")]
    outcome.mean_delay_slots = sum(finite) / max(len(finite), 1)

    def page_of(url: str) -> int:
        return int(url.rsplit("/", 1)[1])

    # every poll of a section page, by either side (304s included): where they went
    section_polls = {c: site.served[c] for c in sections if site.served[c]}
    total = sum(section_polls.values())
    outcome.shares = {c: n / max(total, 1) for c, n in section_polls.items()}
    outcome.active_share = sum(outcome.shares.get(c, 0.0) for c in active)
    outcome.discovery_polls = sum(per_slot)
    outcome.max_slot_polls = max(per_slot, default=0)
    # discovery's own downloads, by kind
    seen_new: set[int] = set()
    read_sections: set[int] = set()
    for url in downloaded:
        page = page_of(url)
        if page in new_pages and page not in seen_new:
            seen_new.add(page)
            outcome.new_downloads += 1
        elif page in sections and page not in read_sections:
            read_sections.add(page)
            outcome.first_reads += 1
        elif page in sections:
            outcome.changed_reads += 1
        else:
            outcome.other_downloads += 1  # an old page, or a new page downloaded again
            outcome.others.append(url)
    outcome.downloads = len(downloaded)
    polls_by_discovery = {page_of(u): n for u, n in polled_by_discovery.items()}
    unmodified = {page_of(u): n for u, n in unmodified_by_discovery.items()}
    outcome.not_modified = sum(unmodified.values())
    # the re-polling side's section polls: all the site served of them less discovery's
    for c in sections:
        polls = site.served[c] - polls_by_discovery.get(c, 0)
        answered_304 = site.unchanged[c] - unmodified.get(c, 0)
        outcome.repoll_section_not_modified += answered_304
        outcome.repoll_section_downloads += polls - answered_304
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
        left.step(xs, ys, where="post", label=f"{o.label} ({o.found_in_5:.0%} by 5)")
    left.axvline(5.0, color="k", ls=":", lw=1)
    left.axhline(0.9, color="k", ls=":", lw=1)
    left.set_xlim(0, 10)
    left.set_xlabel("slots from a page's appearance to its discovery")
    left.set_ylabel("share of the new pages found")
    left.legend(fontsize=8, loc="lower right")
    left.set_title("the service: how soon new pages are found")
    width = 0.8 / max(len(outcomes), 1)
    for i, o in enumerate(outcomes):
        xs = sorted(o.shares)
        offset = (i - (len(outcomes) - 1) / 2) * width
        right.bar([c + offset for c in xs], [o.shares[c] for c in xs], width, label=o.label)
    for c in active:
        right.axvspan(c - 0.5, c + 0.5, color="gold", alpha=0.3, lw=0)
    right.set_xlabel("section (shaded: the 5 that gain pages)")
    right.set_ylabel("share of the section-page polls (either side)")
    right.legend(fontsize=8)
    right.set_title("where the section polls went")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    print(f"plot written to {path}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=150)
    parser.add_argument("--slot-seconds", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=WARMUP)
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument(
        "--marked",
        default="front",
        help="which pages are sources (comma-separated, each set-up run with each): front "
        "(the front page), sections (each section index a source of its own)",
    )
    parser.add_argument(
        "--setups",
        default="watched,bandit,round_robin",
        help="which set-ups to run, in order (comma-separated: watched, bandit, round_robin)",
    )
    args = parser.parse_args()
    outcomes: list[Outcome] = []
    setups = {"watched": ("bandit", True), "bandit": ("bandit", False)}
    setups["round_robin"] = ("round_robin", False)
    chosen = [n.strip() for n in args.setups.split(",") if n.strip()]
    if unknown := [n for n in chosen if n not in setups]:
        parser.error(f"unknown set-up(s) {unknown}: choose from {sorted(setups)}")
    with tempfile.TemporaryDirectory() as tmp:
        runs = [(n, m.strip()) for m in args.marked.split(",") if m.strip() for n in chosen]
        for name, marked in runs:
            choice, watch = setups[name]
            url = args.database_url or f"sqlite:///{tmp}/{name}-{marked}.db"
            with Store(url) as store:
                store.upgrade()
            outcome = await run_acceptance(
                url,
                start_choice=choice,
                watch_starts=watch,
                slots=args.slots,
                slot_seconds=args.slot_seconds,
                seed=args.seed,
                warmup=args.warmup,
                marked=marked,
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
