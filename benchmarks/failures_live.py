"""Failures live: 10% of a live site's URLs fail mid-run (404, 410, timeouts).

    python -m benchmarks.failures_live                      # SQLite, the default figures
    python -m benchmarks.failures_live --database-url postgresql+psycopg://...

Two runs of the real service (in this process, crawl worker and all) on the same local site
over loopback HTTP, with the same seeds, one site tick per slot (so both runs see the same
changes at the same slots): one where every page stays good, one where, after ``learn``
slots, 10% of the pages start failing (404, 410 and timeouts; the site's pages hang past the
fetch timeout). Reported:

- the failing URLs' share of all polls in the ``measure`` slots that follow a settling
  time of ``settle`` slots (the acceptance: < 1%);
- the good URLs' learned change probabilities at the end of that window, against the run
  without failures (same seeds): the median and the largest relative difference, and each
  run's mean absolute error against the true probabilities;
- then a timed-out page comes back by itself and a retired (410) one is revived by the
  operator (``crawler revive``): the slots until each is polled again and revived.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import select

from crawler.schedulers.bayes import BayesRate
from crawler.service import CrawlService, SlotSummary
from crawler.settings import load_settings
from crawler.store import NewUrl, Store
from crawler.store.models import poll_log, urls
from crawler.testsite import zipf_rates
from crawler.testsite._failing import FailingSite, Failure

#: pages that fail (1-based), about 10% of 50, spread over the rates, and how
FAILURES: dict[int, Failure] = {3: "404", 8: "timeout", 14: "410", 22: "404", 31: "timeout"}
#: the pages that come back at the end: one by itself, one by the operator
BACK_BY_ITSELF, BACK_BY_OPERATOR = 8, 14


@dataclass
class Outcome:
    failures: bool
    slots: int = 0
    seconds: float = 0.0
    polls_in_window: int = 0
    failing_polls_in_window: int = 0
    hits_in_window: int = 0
    rates: dict[int, float] = field(default_factory=dict)  # page -> learned p at the window end
    back_after: dict[int, int | None] = field(default_factory=dict)  # page -> slots to a good poll
    polls_after_back: dict[int, int] = field(default_factory=dict)

    @property
    def failing_share(self) -> float:
        return self.failing_polls_in_window / max(1, self.polls_in_window)


async def run(
    database_url: str,
    *,
    failures: bool,
    n: int = 50,
    capacity: float = 3.0,
    learn: int = 150,
    settle: int = 300,
    measure: int = 500,
    after: int = 400,
    slot_seconds: float = 0.02,
    seed: int = 3,
) -> Outcome:
    """One run (see the module docstring); the database must be empty and migrated."""
    rates = zipf_rates(n, 0.6, 1.0)
    site = FailingSite(rates, page_size=3_000, seed=5, manual=True, hang_s=3.0)
    await site.start()
    out = Outcome(failures)
    window_end = learn + settle + measure
    try:
        with Store(database_url) as store:
            store.add_urls([NewUrl(u) for u in site.urls()])
            with store.engine.connect() as conn:
                ids = {str(u): int(i) for u, i in conn.execute(select(urls.c.url, urls.c.id))}
        page_of = {ids[site.url(k)]: k for k in range(1, n + 1)}
        settings = load_settings(
            {
                "database_url": database_url,
                "slot_seconds": slot_seconds,
                "capacity": capacity,
                "default_min_interval_s": 0,  # the allocation as measured: no polite bound
                "metrics_port": 0,
                "allow_private_addresses": True,
                "per_host_min_delay_s": 0.0,
                "per_host_concurrency": 16,
                "fetch_timeout_s": 0.25,
                "slot_deadline_s": 2.0,
                "fetch_retries": 0,
                # the back-off stops at a poll every 200 slots: a timed-out page that answers
                # again is found again within the run's ``after`` slots, whatever the phase
                "failure_max_interval_s": 200 * slot_seconds,
                "normalize_workers": 1,
                "fetch_workers": 1,
                "seed": seed,
                "log_level": "WARNING",
            }
        )
        stop = asyncio.Event()
        count = 0
        came_back: dict[int, int] = {}
        started = time.monotonic()
        async with CrawlService(settings) as service:
            scheduler = service.loop.scheduler

            def on_slot(summary: SlotSummary) -> None:
                nonlocal count
                count += 1
                site.tick()
                if failures and count == learn:
                    site.failing.update(FAILURES)
                if count == window_end:
                    assert isinstance(scheduler, BayesRate)
                    got_ids, p = scheduler.rates()
                    out.rates = {page_of[int(i)]: float(q) for i, q in zip(got_ids, p, strict=True)}
                    if failures:
                        del site.failing[BACK_BY_ITSELF]
                        del site.failing[BACK_BY_OPERATOR]
                        with Store(database_url) as admin:  # what `crawler revive` does
                            admin.revive_urls([_id_of(ids, site, BACK_BY_OPERATOR)])
                if count > window_end and failures:
                    failing = set(scheduler.failing()[0].tolist()) if scheduler else set()
                    for k in (BACK_BY_ITSELF, BACK_BY_OPERATOR):
                        if (
                            k not in came_back
                            and site.requests[k]
                            and (_id_of(ids, site, k) not in failing)
                        ):
                            came_back.setdefault(k, count - window_end)
                if count >= window_end + after:
                    stop.set()

            await service.run(stop, None, on_slot)
        out.seconds = time.monotonic() - started
        out.slots = count
        with Store(database_url) as store, store.engine.connect() as conn:
            rows = conn.execute(
                select(poll_log.c.url_id, poll_log.c.slot, poll_log.c.outcome)
            ).all()
        bad = {ids[site.url(k)] for k in FAILURES}
        for uid, slot, outcome in rows:
            if learn + settle < slot <= window_end:
                out.polls_in_window += 1
                out.failing_polls_in_window += uid in bad
                out.hits_in_window += outcome == "hit"
            if slot > window_end and page_of[uid] in (BACK_BY_ITSELF, BACK_BY_OPERATOR):
                k = page_of[uid]
                if outcome != "error":
                    out.polls_after_back[k] = out.polls_after_back.get(k, 0) + 1
        out.back_after = {k: came_back.get(k) for k in (BACK_BY_ITSELF, BACK_BY_OPERATOR)}
    finally:
        await site.stop()
    return out


def _id_of(ids: dict[str, int], site: FailingSite, k: int) -> int:
    return ids[site.url(k)]


def compare(good: Outcome, bad: Outcome, n: int = 50) -> dict[str, Any]:
    """The good URLs' learned probabilities in both runs, and against the truth."""
    truth = zipf_rates(n, 0.6, 1.0)
    pages = [k for k in range(1, n + 1) if k not in FAILURES]
    a = np.array([good.rates[k] for k in pages])
    b = np.array([bad.rates[k] for k in pages])
    t = truth[np.array(pages) - 1]
    rel = np.abs(b - a) / a
    return {
        "median_rel_diff": float(np.median(rel)),
        "max_rel_diff": float(rel.max()),
        "mae_without_failures": float(np.mean(np.abs(a - t))),
        "mae_with_failures": float(np.mean(np.abs(b - t))),
    }


async def main_async(database_url: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        outcomes = []
        for j, (failures, seed) in enumerate(((False, 3), (True, 3), (False, 4))):
            url = database_url or f"sqlite:///{Path(tmp) / f'run{j}.db'}"
            with Store(url) as store:
                store.upgrade()
                if j and database_url:
                    _empty(store)
            outcomes.append(await run(url, failures=failures, seed=seed))
    good, bad, other = outcomes
    for o in outcomes:
        print(
            f"failures={o.failures}: {o.slots} slots in {o.seconds:.0f} s; window: "
            f"{o.polls_in_window} polls, {o.failing_polls_in_window} to failing URLs "
            f"({100 * o.failing_share:.2f}%), {o.hits_in_window} hits"
        )
    print("good URLs' learned p, with vs without failures:", compare(good, bad))
    print("the noise: without failures, scheduler seed 4 vs 3:", compare(good, other))
    print("came back (slots to a good poll after the return):", bad.back_after)
    print("good polls after the return:", bad.polls_after_back)


def _empty(store: Store) -> None:
    from crawler.store.models import Base

    with store.engine.begin() as conn:
        for table in reversed(Base.metadata.sorted_tables):
            conn.execute(table.delete())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None, help="an EMPTY database (default: SQLite)")
    args = parser.parse_args()
    asyncio.run(main_async(args.database_url))


if __name__ == "__main__":
    main()
