"""The service's live acceptance: learning live on a local changing site, across a kill -9.

    python -m benchmarks.live_acceptance                     # bayes, lakg, fpa, uniform
    python -m benchmarks.live_acceptance --schedulers bayes --slots 600

For each scheduler: a site on 127.0.0.1 with N pages changing at Zipf rates (one site tick
per slot; pages carry rotating nonces in scripts, comments and CSRF inputs) and the real
service, ``python -m crawler run`` in its own process on SQLite, C polls per slot. Halfway
through the service is killed with SIGKILL and started again. The site's own record of which
version it served to each poll is the truth: a truly detected change is a poll that got a
version different from the one served before. Reported: truly detected changes per slot
against the analytic limit (windows of 200 slots), the first window at >= 90% of the limit,
and the service's own hit count against the site's truth.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from crawler.schedulers import expected_hits, limit
from crawler.store import NewUrl, Store
from crawler.testsite import ChangingSite, zipf_rates


@dataclass
class Run:
    scheduler: str
    samples: list[tuple[int, int]] = field(default_factory=list)  # (slots committed, truth)
    service_hits: int = 0
    truth_hits: int = 0
    slots: int = 0
    seconds: float = 0.0
    overruns: int = 0


def service_env(database_url: str, scheduler: str, capacity: float, slot: float) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "CRAWLER_DATABASE_URL": database_url,
            "CRAWLER_SCHEDULER": scheduler,
            "CRAWLER_CAPACITY": str(capacity),
            "CRAWLER_SLOT_SECONDS": str(slot),
            "CRAWLER_METRICS_PORT": "0",
            "CRAWLER_ALLOW_PRIVATE_ADDRESSES": "true",
            "CRAWLER_PER_HOST_MIN_DELAY_S": "0",
            "CRAWLER_PER_HOST_CONCURRENCY": "16",
            "CRAWLER_NORMALIZE_WORKERS": "1",
            "CRAWLER_LOG_LEVEL": "WARNING",
            "CRAWLER_SEED": "11",
            "CRAWLER_DEFAULT_MIN_INTERVAL_S": "0",  # as measured: no polite bound
        }
    )
    return env


async def committed_slots(store: Store) -> int:
    return (await asyncio.to_thread(store.stats)).slots


async def run_service_until(
    env: dict[str, str], store: Store, site: ChangingSite, target: int, run: Run, kill: bool
) -> None:
    """Run ``crawler run`` until ``target`` slots are committed; SIGKILL or SIGTERM it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "crawler",
        "run",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        while True:
            slots = await committed_slots(store)
            run.samples.append((slots, site.truth.true_changes_seen))
            if slots >= target or proc.returncode is not None:
                break
            await asyncio.sleep(0.25)
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        _, err = await proc.communicate()
        if proc.returncode not in (0, -signal.SIGKILL):
            raise RuntimeError(f"crawler run failed: {err.decode()[-2000:]}")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def one_run(scheduler: str, args: argparse.Namespace, rates: np.ndarray) -> Run:
    run = Run(scheduler)
    site = ChangingSite(rates, tick_seconds=args.slot_seconds, seed=args.seed)
    await site.start()
    began = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="crawler-live-") as tmp:
            url = f"sqlite:///{Path(tmp) / 'live.db'}"
            with Store(url) as store:
                store.upgrade()
                store.add_urls([NewUrl(u) for u in site.urls()])
                env = service_env(url, scheduler, args.capacity, args.slot_seconds)
                half = args.slots // 2
                await run_service_until(env, store, site, half, run, kill=True)
                print(
                    f"  {scheduler}: killed with SIGKILL at slot {run.samples[-1][0]}, restarting",
                    file=sys.stderr,
                )
                await run_service_until(env, store, site, args.slots, run, kill=False)
                stats = store.stats()
                run.service_hits = stats.hits
                run.slots = stats.slots
    finally:
        await site.stop()
    run.truth_hits = site.truth.true_changes_seen
    run.seconds = time.monotonic() - began
    return run


def windows(run: Run, width: int) -> list[tuple[int, float]]:
    """(end slot, true changes per slot) over consecutive windows of ``width`` slots."""
    slots = np.array([s for s, _ in run.samples], dtype=float)
    truth = np.array([t for _, t in run.samples], dtype=float)
    out = []
    for end in range(width, int(slots.max()) + 1, width):
        lo = np.interp(end - width, slots, truth)
        hi = np.interp(end, slots, truth)
        out.append((end, (hi - lo) / width))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedulers", default="bayes,lakg,fpa,uniform")
    parser.add_argument("--urls", type=int, default=300)
    parser.add_argument("--capacity", type=float, default=3.0)
    parser.add_argument("--slot-seconds", type=float, default=0.1)
    parser.add_argument("--slots", type=int, default=2000)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--beta", type=float, default=1.2)
    parser.add_argument("--window", type=int, default=200)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args(argv)
    rates = zipf_rates(args.urls, args.alpha, args.beta)
    bound = limit(rates, args.capacity)
    uniform = expected_hits(np.full(args.urls, args.capacity / args.urls), rates)
    print(
        f"{args.urls} pages, Zipf({args.alpha}, {args.beta}), C = {args.capacity:g} per "
        f"{args.slot_seconds:g} s slot, {args.slots} slots, SIGKILL at slot {args.slots // 2}"
    )
    print(
        f"analytic limit {bound:.4f} changes/slot; uniform's expectation {uniform:.4f} "
        f"({uniform / bound:.2f} of the limit)\n"
    )
    rows = []
    for name in args.schedulers.split(","):
        print(f"running {name} ...", file=sys.stderr)
        run = asyncio.run(one_run(name, args, rates))
        series = windows(run, args.window)
        first90 = next((end for end, v in series if v >= 0.9 * bound), None)
        last = series[-1][1] if series else 0.0
        second_half = [v for end, v in series if end > args.slots // 2 + args.window]
        agreement = run.service_hits / run.truth_hits if run.truth_hits else float("nan")
        rows.append((name, series, first90, last, second_half, run, agreement))
        print(f"  {name}: " + " ".join(f"{v / bound:.2f}" for _, v in series), file=sys.stderr)
    print(
        "| scheduler | ratio per 200-slot window | first window >= 0.9 | last window | "
        "mean after restart | service hits / truth | wall s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, series, first90, last, second_half, run, agreement in rows:
        mean2 = float(np.mean(second_half)) / bound if second_half else float("nan")
        print(
            f"| {name} | {' '.join(f'{v / bound:.2f}' for _, v in series)} | "
            f"{first90 if first90 is not None else 'never'} | {last / bound:.3f} | "
            f"{mean2:.3f} | {run.service_hits}/{run.truth_hits} = {agreement:.4f} | "
            f"{run.seconds:.0f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
