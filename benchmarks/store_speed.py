"""Store speed: slot-commit throughput, 1M-URL add, and start-up load time and memory.

    python benchmarks/store_speed.py                      # SQLite (temp file) and PostgreSQL
    python benchmarks/store_speed.py --urls 100000 --db sqlite
    CRAWLER_BENCH_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test ...

PostgreSQL runs in a temporary schema of that database (dropped afterwards).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from crawler import schedulers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_databases import database

from crawler.store import NewUrl, PollRecord, SlotRecord, Store


def rss_mb() -> float:
    """Current resident set size in MB (Linux /proc, else peak RSS)."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def entries(n: int) -> list[NewUrl]:
    return [NewUrl(f"https://site{i % 5000}.example/page/{i}") for i in range(n)]


def bench_commit(store: Store, ids: np.ndarray, per_slot: int, slots: int, name: str) -> float:
    """Polls per second through commit_slot (slot row, poll log, changes, URL counters,
    scheduler delta), with a real scheduler's take_delta()."""
    sched = schedulers.create(name, capacity=per_slot, seed=1)
    sched.add(ids)
    store.save_scheduler_state(sched.take_delta())
    rng = np.random.default_rng(0)
    total = 0.0
    polls_done = 0
    for k in range(slots):
        chosen = sched.select()
        hits = rng.random(chosen.size) < 0.3
        errors = rng.random(chosen.size) < 0.02
        ok = ~errors
        sched.feedback(chosen[ok], hits[ok])
        now = datetime.now(UTC)
        polls = []
        for uid, hit, err in zip(chosen.tolist(), hits.tolist(), errors.tolist(), strict=True):
            if err:
                polls.append(
                    PollRecord(uid, "error", now, None, 0.2, error_kind="timeout", error="t/o")
                )
            else:
                polls.append(
                    PollRecord(
                        uid,
                        "hit" if hit else "miss",
                        now,
                        200,
                        0.1,
                        12_345,
                        content_hash=f"{uid:016x}{k:016x}",
                        raw_hash=f"{k:016x}",
                        old_hash="0" * 32,
                        etag=f'"{k}"',
                        snapshot=("text " * 200) if hit else None,
                    )
                )
        record = SlotRecord(k + 1, name, now, 1.0, len(polls), int(hits.sum()), 0, 0, 0)
        delta = sched.take_delta()
        t0 = time.perf_counter()
        store.commit_slot(record, polls, delta)
        total += time.perf_counter() - t0
        polls_done += len(polls)
    return polls_done / total


def run(kind: str, n_urls: int, scheduler: str) -> None:
    print(f"== {kind} ==")
    with database(kind) as url:
        store = Store(url)
        store.upgrade()
        t0 = time.perf_counter()
        store.add_urls(entries(n_urls))
        t_add = time.perf_counter() - t0
        print(f"add_urls: {n_urls:,} URLs in {t_add:.1f} s ({n_urls / t_add:,.0f} URLs/s)")
        ids, _ = store.active_urls()
        for per_slot, slots in ((100, 50), (1000, 20)):
            rate = bench_commit(store, ids, per_slot, slots, "uniform")
            print(f"commit_slot: {per_slot} polls/slot -> {rate:,.0f} polls/s")
        # a full saved state for every URL (as after a long run)
        sched = schedulers.create(scheduler, capacity=max(1.0, n_urls / 100), seed=1)
        sched.add(ids)
        t0 = time.perf_counter()
        store.save_scheduler_state(sched.take_delta())
        print(f"save full {scheduler} state: {time.perf_counter() - t0:.1f} s")
        del sched
        store.close()

        gc.collect()
        before = rss_mb()
        t0 = time.perf_counter()
        fresh = Store(url)
        active, weights = fresh.active_urls()  # held: part of the measured memory
        t_active = time.perf_counter() - t0
        state = fresh.load_scheduler_state(scheduler)
        t_state = time.perf_counter() - t0 - t_active
        restored = schedulers.restore(state) if state is not None else None
        t_total = time.perf_counter() - t0
        gc.collect()
        after = rss_mb()
        print(
            f"start-up with {active.size:,} URLs: active_urls {t_active:.1f} s, "
            f"load_scheduler_state {t_state:.1f} s, total incl. restore {t_total:.1f} s"
        )
        print(
            f"RSS delta after load: {after - before:.0f} MB "
            f"= {(after - before) * 2**20 / max(1, active.size):.0f} bytes per URL"
        )
        assert restored is not None and restored.size == active.size == weights.size
        fresh.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--scheduler", default="lakg")
    args = parser.parse_args()
    kinds = ("sqlite", "postgresql") if args.db == "both" else (args.db,)
    for kind in kinds:
        run(kind, args.urls, args.scheduler)


if __name__ == "__main__":
    main()
