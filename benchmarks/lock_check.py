"""Cost of the service lock's checks: the one at every slot start, the one in every commit.

    python benchmarks/lock_check.py                 # SQLite (temp file) and PostgreSQL
    python benchmarks/lock_check.py --db postgresql --rounds 3000

Slot start: ``ServiceLock.ensure()`` as the loop's guard calls it (PostgreSQL: one query
on the lock's own connection; SQLite: the fence's generation read). Commit: the same small
slot (one slot row, 20 polls) committed with and without the fence check, interleaved, so
a loaded machine slows both alike; the difference is what the check costs. Medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_databases import database

from crawler.store import NewUrl, PollRecord, SlotRecord, Store


def _slot(no: int, ids: list[int]) -> tuple[SlotRecord, list[PollRecord]]:
    now = datetime.now(UTC)
    polls = [PollRecord(url_id=i, outcome="miss", polled_at=now, status=200) for i in ids]
    slot = SlotRecord(
        slot=no,
        scheduler="bench",
        started_at=now,
        duration_s=0.1,
        polls=len(polls),
        hits=0,
        misses=len(polls),
        not_modified=0,
        errors=0,
        capacity=float(len(polls)),
    )
    return slot, polls


def run(kind: str, rounds: int) -> None:
    with database(kind) as url, Store(url) as store:
        store.upgrade()
        report = store.add_urls([NewUrl(f"https://bench.example/{i}") for i in range(20)])
        ids = [uid for _, uid in report.added]
        with store.acquire_service_lock() as lock:
            generation = store.claim_service_fence(lock)
            checks = []
            for i in range(rounds):
                began = time.perf_counter()
                assert lock.ensure()
                checks.append(time.perf_counter() - began)
                if i % 500 == 0:
                    print(f"  {kind}: slot-start checks {i}/{rounds}", file=sys.stderr)
            fenced, plain = [], []
            no = 0
            for i in range(rounds // 5):
                for with_fence, into in ((True, fenced), (False, plain)):
                    store.service_fence = ("service", generation) if with_fence else None
                    no += 1
                    slot, polls = _slot(no, ids)
                    began = time.perf_counter()
                    store.commit_slot(slot, polls)
                    into.append(time.perf_counter() - began)
                if i % 100 == 0:
                    print(f"  {kind}: commits {i}/{rounds // 5}", file=sys.stderr)
        check_us = statistics.median(checks) * 1e6
        fenced_us = statistics.median(fenced) * 1e6
        plain_us = statistics.median(plain) * 1e6
        print(
            f"{kind}: slot-start lock check {check_us:.0f} us (median of {rounds}); "
            f"commit of 20 polls {fenced_us:.0f} us with the fence check, {plain_us:.0f} us "
            f"without: +{fenced_us - plain_us:.0f} us (median of {len(fenced)} each)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    for kind in ("sqlite", "postgresql") if args.db == "both" else (args.db,):
        run(kind, args.rounds)


if __name__ == "__main__":
    main()
