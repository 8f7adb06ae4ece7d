"""Whole-service throughput: polls per second of CrawlService (fetch, normalize, hash, feedback,
database write) against a local site, next to a bare aiohttp GET loop against the same site.

    .venv/bin/python benchmarks/service_throughput.py                 # SQLite and PostgreSQL
    .venv/bin/python benchmarks/service_throughput.py --db sqlite --urls 10000 --per-slot 1500
    CRAWLER_BENCH_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:5432/crawler_bench ...

The site (crawler.testsite.ChangingSite: ~30 KB realistic pages with rotating nonces in a
script, a comment, a hidden input and a noscript) runs in a separate process and answers on
``--hosts`` loopback addresses (127.0.0.1, 127.0.0.2, ...; the pages spread over them): a
crawl watches many sites, and the service gives each host to one crawl worker. All processes
share the machine's cores, so the figures are for the whole. After a warm-up (every URL's
baseline), the service runs ``--rounds`` times for ``--polls`` polls, and the bare loop GETs the
same URLs before the first run and after each one (in the service's process, while the service
is idle). A VM's speed drifts by tens of percent within minutes (runs minutes apart would
measure the drift), so each service run is compared with the bare runs just before and after
it: with their mean (what the bare loop would have done during the run if the speed drifted
evenly), and, as a lower bound, with the faster of the two (the larger of two noisy samples
is biased upwards: this figure understates the service). The medians over the rounds are
reported. Two scenarios per database:

* ``nonce``: the pages never change; only their nonces rotate (every poll a miss, and the exact
  raw-hash pre-check cannot answer it);
* ``changing``: each page also changes with probability ``--change-rate`` per second.

The service runs with slots back to back (a tiny ``slot_seconds``, ``--per-slot`` polls per
slot); a run's time ends when its last slot is committed. Politeness is open (no delay
between a host's requests, 256 at once) and the per-host caps are off, as in the harness the
earlier figures were taken with: with caps on, a nominal slot of 10 ms caps each host at what
it can take in 10 ms (``--host-caps`` shows it: 250-330 polls a slot of the 1,500), so the
slot's fixed costs are spread over a fifth of its polls. A slot's deadline is the fetch
timeout (``--deadline``), again as in that harness: the service's default deadline, the
slot but at least 1 s, would defer the polls of a 1,500-poll slot still queued after 1 s
(a third to a half of them on 2 cores): selected, sent and dropped. PostgreSQL runs
in a temporary schema of the database at CRAWLER_BENCH_POSTGRES_URL (dropped afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import psutil
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_databases import database

from crawler.service import CrawlService, tune_gc
from crawler.service._loop import SlotSummary
from crawler.settings import Settings, load_settings
from crawler.store import NewUrl, Store
from crawler.testsite import ChangingSite, PageRenderer


def _serve(n: int, rate: float, page_bytes: int, hosts: int, conn: Connection) -> None:
    async def main() -> None:
        site = ChangingSite(np.full(n, rate), tick_seconds=1.0, seed=11)
        renderer = PageRenderer(int(page_bytes / 0.82))
        site._renderer = renderer
        for k in range(1, n + 1):
            renderer._body(k, 0)
        await site.start()
        assert site._runner is not None
        for h in range(2, hosts + 1):  # the same server on more loopback addresses
            await web.TCPSite(site._runner, f"127.0.0.{h}", site.port).start()
        conn.send(site.port)
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        await site.stop()

    asyncio.run(main())


def page_url(port: int, hosts: int, k: int) -> str:
    """Page ``k`` (1-based) of the site answering on ``hosts`` loopback addresses."""
    return f"http://127.0.0.{(k - 1) % hosts + 1}:{port}/page/{k}"


@contextmanager
def site_process(n: int, rate: float, page_bytes: int, hosts: int) -> Iterator[tuple[int, int]]:
    """Start the site in a child process; yields its port and process id."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(n, rate, page_bytes, hosts, child), daemon=True)
    proc.start()
    try:
        if not parent.poll(120):
            raise RuntimeError("the site did not start")
        port = parent.recv()
        assert proc.pid is not None
        yield port, proc.pid
    finally:
        parent.send("stop")
        proc.join(10)
        if proc.is_alive():
            proc.terminate()


# ----- CPU accounting -------------------------------------------------------------------------


class CpuMeter:
    """CPU seconds (user + system) of this process, its other children (the detector's worker
    pool) and the site process, between ``start()`` and ``stop()``: the machine is shared, so
    CPU time per poll is the figure that does not depend on what else runs."""

    def __init__(self, site_pid: int) -> None:
        self.site = psutil.Process(site_pid)
        self.me = psutil.Process()
        self._start = (0.0, 0.0, 0.0)
        self.used = (0.0, 0.0, 0.0)

    def _now(self) -> tuple[float, float, float]:
        def cpu(p: psutil.Process) -> float:
            try:
                t = p.cpu_times()
            except psutil.Error:
                return 0.0
            return float(t.user + t.system)

        kids = [c for c in self.me.children(recursive=True) if c.pid != self.site.pid]
        return cpu(self.me), sum(cpu(c) for c in kids), cpu(self.site)

    def start(self) -> None:
        self._start = self._now()

    def stop(self) -> None:
        self.used = tuple(b - a for a, b in zip(self._start, self._now(), strict=True))  # type: ignore[assignment]

    def per_item_us(self, items: int) -> str:
        me, kids, site = (v / max(1, items) * 1e6 for v in self.used)
        return f"CPU per poll: {me:.0f} us main + {kids:.0f} us workers + {site:.0f} us site"


# ----- the bare loop ---------------------------------------------------------------------------


async def bare_loop(
    urls: list[str], total: int, concurrency: int, meter: CpuMeter
) -> tuple[float, int]:
    """(pages/s, mean body bytes) of plain aiohttp GETs of the pages, ``concurrency`` at once."""
    connector = aiohttp.TCPConnector(limit=concurrency)
    received = 0
    async with aiohttp.ClientSession(connector=connector) as session:
        queue = iter(range(total))

        async def worker() -> None:
            nonlocal received
            for i in queue:
                async with session.get(urls[i % len(urls)]) as resp:
                    received += len(await resp.read())

        queue = iter(range(3 * concurrency))
        await asyncio.gather(*(worker() for _ in range(concurrency)))  # warm the connections
        received = 0
        queue = iter(range(total))
        meter.start()
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        meter.stop()
    return total / elapsed, received // total


# ----- the service -----------------------------------------------------------------------------


#: the fetcher's budget per poll, and a slot's deadline here (``--deadline``)
FETCH_TIMEOUT_S = 10.0


def bench_settings(
    database_url: str, per_slot: int, *, host_caps: bool = False, **overrides: Any
) -> Settings:
    values: dict[str, Any] = {
        "database_url": database_url,
        "slot_seconds": 0.01,  # the minimum: slots run back to back (each overruns)
        "capacity": float(per_slot),
        "metrics_port": 0,
        "allow_private_addresses": True,
        "per_host_min_delay_s": 0.0,
        "per_host_concurrency": 256,
        "fetch_retries": 0,
        "fetch_timeout_s": FETCH_TIMEOUT_S,
        "seed": 1,
        "default_min_interval_s": 0,  # the allocation as measured: no polite bound
        "host_caps": host_caps,
        "slot_deadline_s": FETCH_TIMEOUT_S,  # a slot's polls are not deferred
    }
    values.update(overrides)
    return load_settings(values)


@dataclass
class ServiceRun:
    polls: int
    seconds: float
    hits: int
    misses: int
    errors: int
    deferred: int
    slots: int
    mean_slot_s: float

    @property
    def rate(self) -> float:
        return self.polls / self.seconds


async def interleaved_runs(
    settings: Settings, urls: list[str], args: argparse.Namespace, meter: CpuMeter, label: str
) -> tuple[list[float], list[ServiceRun]]:
    """One service (after a warm-up that takes every URL's baseline) run ``args.rounds`` times
    for ``args.polls`` polls, with the bare loop run before the first round and after each
    one, in this process while the service is idle. (bare rates, service runs)"""
    store = Store.from_settings(settings)
    store.upgrade()
    store.add_urls([NewUrl(u) for u in urls])
    n = len(urls)
    bares: list[float] = []
    runs: list[ServiceRun] = []
    async with CrawlService(settings, store=store) as service:
        baselines = 0

        def warm(s: SlotSummary) -> None:
            nonlocal baselines
            baselines += s.baselines
            if baselines >= n:
                warmed.set()

        warmed = asyncio.Event()
        tune_gc()  # as `crawler run` does once the service has started
        await service.run(warmed, on_slot=warm)
        for round_no in range(args.rounds + 1):
            bare, size = await bare_loop(urls, args.bare, args.concurrency, meter)
            bares.append(bare)
            print(
                f"{label} bare aiohttp GET loop: {bare:,.0f} pages/s ({size / 1000:.1f} KB pages, "
                f"{args.concurrency} connections; {meter.per_item_us(args.bare)})"
            )
            if round_no == args.rounds:
                break
            prof = f"{args.profile}.{label}.{round_no}" if args.profile else None
            run = await service_run(service, args.polls, meter, prof)
            runs.append(run)
            print(
                f"{label} service: {run.rate:,.0f} polls/s ({run.polls:,} polls in "
                f"{run.seconds:.1f} s, {run.slots} slots of {run.mean_slot_s * 1000:.0f} ms; "
                f"hits {run.hits:,}, misses {run.misses:,}, errors {run.errors:,}, "
                f"deferred {run.deferred:,}; "
                f"{meter.per_item_us(run.polls)})"
            )
    store.close()
    return bares, runs


async def service_run(
    service: CrawlService, measure_polls: int, meter: CpuMeter, profile: str | None
) -> ServiceRun:
    """Run the (warmed-up) service until ``measure_polls`` polls are done and committed."""
    summaries: list[SlotSummary] = []
    stop = asyncio.Event()
    prof = cProfile.Profile() if profile else None

    def on_slot(s: SlotSummary) -> None:
        summaries.append(s)
        if sum(x.polls for x in summaries) >= measure_polls:
            stop.set()

    meter.start()
    if prof is not None:
        prof.enable()
    started = time.perf_counter()
    await service.run(stop, on_slot=on_slot)  # returns once every slot is committed
    seconds = time.perf_counter() - started
    if prof is not None and profile:
        prof.disable()
        prof.dump_stats(profile)
    meter.stop()
    return ServiceRun(
        polls=sum(s.polls for s in summaries),
        seconds=seconds,
        hits=sum(s.hits for s in summaries),
        misses=sum(s.misses for s in summaries),
        errors=sum(s.errors for s in summaries),
        deferred=sum(s.deferred for s in summaries),
        slots=len(summaries),
        mean_slot_s=float(np.mean([s.duration_s for s in summaries])),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--scenario", choices=("nonce", "changing", "both"), default="both")
    parser.add_argument("--urls", type=int, default=10_000)
    parser.add_argument("--per-slot", type=int, default=1_500)
    parser.add_argument("--polls", type=int, default=24_000, help="polls per service run")
    parser.add_argument("--rounds", type=int, default=5, help="service runs per database")
    parser.add_argument("--change-rate", type=float, default=0.01, help="per page per second")
    parser.add_argument("--page-bytes", type=int, default=30_000)
    parser.add_argument("--bare", type=int, default=24_000, help="GETs per bare-loop run")
    parser.add_argument("--concurrency", type=int, default=100, help="bare-loop connections")
    parser.add_argument(
        "--hosts", type=int, default=4, help="loopback addresses the site answers on (1-250)"
    )
    parser.add_argument(
        "--fetch-workers", type=int, default=-1, help="crawl workers (-1 = auto, 0 = none)"
    )
    parser.add_argument("--workers", type=int, default=0, help="normalize workers (0 = auto)")
    parser.add_argument("--profile", help="cProfile the service runs into this file prefix")
    parser.add_argument(
        "--host-caps", action="store_true", help="per-host caps on (the service's default)"
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=FETCH_TIMEOUT_S,
        help="a slot's deadline in seconds (the service's default here: 1)",
    )
    args = parser.parse_args()
    kinds = ("sqlite", "postgresql") if args.db == "both" else (args.db,)
    scenarios = ("nonce", "changing") if args.scenario == "both" else (args.scenario,)
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.urls:,} URLs; "
        f"{args.per_slot:,} polls per slot; the site on {args.hosts} loopback address(es); "
        f"host caps {'on' if args.host_caps else 'off'}; slot deadline {args.deadline:g} s"
    )
    summary: list[str] = []
    for scenario in scenarios:
        rate = 0.0 if scenario == "nonce" else args.change_rate
        with site_process(args.urls, rate, args.page_bytes, args.hosts) as (port, pid):
            urls = [page_url(port, args.hosts, k) for k in range(1, args.urls + 1)]
            meter = CpuMeter(pid)
            for kind in kinds:
                with database(kind) as url:
                    settings = bench_settings(
                        url,
                        args.per_slot,
                        normalize_workers=args.workers,
                        fetch_workers=args.fetch_workers,
                        host_caps=args.host_caps,
                        slot_deadline_s=args.deadline,
                    )
                    bares, runs = asyncio.run(
                        interleaved_runs(settings, urls, args, meter, f"[{scenario}, {kind}]")
                    )
                # each run against the bare runs just before and after it
                mean = [r.rate / ((bares[i] + bares[i + 1]) / 2) for i, r in enumerate(runs)]
                low = [r.rate / max(bares[i], bares[i + 1]) for i, r in enumerate(runs)]
                summary.append(
                    f"[{scenario}] {kind}: median {np.median([r.rate for r in runs]):,.0f} "
                    f"polls/s = {np.median(mean):.0%} of the bare loop (each run against the "
                    f"mean of the bare runs next to it: {', '.join(f'{x:.0%}' for x in mean)}; "
                    f"against the faster one: {np.median(low):.0%}, runs "
                    f"{', '.join(f'{x:.0%}' for x in low)}; "
                    f"bare runs {min(bares):,.0f}-{max(bares):,.0f} pages/s)"
                )
                print(summary[-1])
    print("\n".join(["", "summary:", *summary]))


if __name__ == "__main__":
    main()
