"""The embedded demo: a local changing site, watched by the real service on SQLite."""

from __future__ import annotations

import asyncio
import tempfile
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from crawler.schedulers import expected_hits, limit
from crawler.service import CrawlService, SlotSummary
from crawler.settings import load_settings
from crawler.store import NewUrl, Store
from crawler.testsite import ChangingSite, zipf_rates


@dataclass(frozen=True)
class DemoOptions:
    urls: int = 300
    capacity: float = 3.0
    slot_seconds: float = 0.1
    slots: int = 600
    alpha: float = 0.6
    beta: float = 1.2
    scheduler: str = "bayes"
    database: Path | None = None  # None: a temporary file
    window: int = 100
    seed: int = 1


@dataclass
class DemoProgress:
    """Live figures after each slot."""

    slot: int = 0
    polls: int = 0
    hits: int = 0
    errors: int = 0
    limit: float = 0.0
    uniform: float = 0.0
    window_hits: deque[int] = field(default_factory=lambda: deque(maxlen=100))
    true_changes_seen: int = 0

    @property
    def hits_per_slot(self) -> float:
        return sum(self.window_hits) / len(self.window_hits) if self.window_hits else 0.0

    @property
    def ratio(self) -> float:
        return self.hits_per_slot / self.limit if self.limit else 0.0


async def run_demo(
    options: DemoOptions, on_slot: Callable[[DemoProgress], None] | None = None
) -> DemoProgress:
    """Start the site and the service, run ``options.slots`` slots, return the figures."""
    rates = zipf_rates(options.urls, options.alpha, options.beta)
    site = ChangingSite(rates, tick_seconds=options.slot_seconds, seed=options.seed)
    progress = DemoProgress(window_hits=deque(maxlen=options.window))
    progress.limit = limit(rates, options.capacity)
    progress.uniform = expected_hits(np.full(rates.size, options.capacity / rates.size), rates)
    with tempfile.TemporaryDirectory(prefix="crawler-demo-") as tmp:
        db = options.database or Path(tmp) / "demo.db"
        settings = load_settings(
            {
                "database_url": f"sqlite:///{db}",
                "scheduler": options.scheduler,
                "capacity": options.capacity,
                "slot_seconds": options.slot_seconds,
                "metrics_port": 0,
                "allow_private_addresses": True,
                "per_host_min_delay_s": 0.0,
                "per_host_concurrency": 16,
                "seed": options.seed,
                "log_level": "WARNING",
                # short slots show the learning: no polite minimum interval
                "default_min_interval_s": 0,
            }
        )
        await site.start()
        try:
            store = Store(settings.database_url)
            await asyncio.to_thread(store.upgrade)
            await asyncio.to_thread(store.add_urls, [NewUrl(u) for u in site.urls()])

            def observe(summary: SlotSummary) -> None:
                progress.slot += 1
                progress.polls += summary.polls
                progress.hits += summary.hits
                progress.errors += summary.errors
                progress.window_hits.append(summary.hits)
                progress.true_changes_seen = site.truth.true_changes_seen
                if on_slot is not None:
                    on_slot(progress)

            async with CrawlService(settings, store=store) as service:
                await service.run(asyncio.Event(), options.slots, observe)
            store.close()
        finally:
            await site.stop()
    return progress
