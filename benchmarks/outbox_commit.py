"""What the outbox costs the slot's commit: ``Store.commit_slot`` time per slot with the
``page.changed`` event rows written (as the crawl does) and without them, interleaved.

    .venv/bin/python benchmarks/outbox_commit.py                 # SQLite and PostgreSQL
    .venv/bin/python benchmarks/outbox_commit.py --db sqlite --hit-share 1.0

Every slot commits ``--per-slot`` polls, ``--hit-share`` of them changes (each a change
row with its snapshot and, with the outbox, an event row: one more executemany on SQLite,
one more binary COPY on PostgreSQL). "Without" drops only the event rows' statement (a
stand-in for the crawl before the outbox existed); everything else is the same commit.
Slots alternate with and without, in one run, so the machine's drift falls on both;
CPU seconds of this process are reported beside the wall time (the machine is shared).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_databases import database

from crawler.store import NewUrl, PollRecord, SlotRecord, Store, _outbox, _pg, _sqlite


@contextmanager
def without_events() -> Iterator[None]:
    """The slot commit with its event rows' statement skipped."""
    execute_rows, copy_rows = _sqlite.execute_rows, _pg.copy_rows

    def sqlite_rows(conn: Any, sql: str, rows: Any) -> None:
        if sql != _outbox.SQLITE_INSERT:
            execute_rows(conn, sql, rows)

    def pg_rows(conn: Any, sql: str, types: Any, rows: Any) -> None:
        if sql != _outbox.PG_COPY:
            copy_rows(conn, sql, types, rows)

    _sqlite.execute_rows, _pg.copy_rows = sqlite_rows, pg_rows  # type: ignore[assignment]
    try:
        yield
    finally:
        _sqlite.execute_rows, _pg.copy_rows = execute_rows, copy_rows  # type: ignore[assignment]


def polls_of(
    ids: list[int], slot: int, hit_share: float, rng: np.random.Generator
) -> list[PollRecord]:
    now = datetime.now(UTC)
    hits = rng.random(len(ids)) < hit_share
    return [
        PollRecord(
            uid,
            "hit" if hit else "miss",
            now,
            200,
            0.1,
            4_000,
            content_hash=f"{uid:016x}{slot:016x}",
            raw_hash=f"{slot:016x}",
            old_hash=f"{uid:016x}{slot - 1:016x}",
            snapshot=f"Page {uid}\nversion {slot}\n" + "words of the page " * 150 if hit else None,
        )
        for uid, hit in zip(ids, hits.tolist(), strict=True)
    ]


def run(kind: str, args: argparse.Namespace) -> list[str]:
    with database(kind) as url:
        store = Store(url)
        store.upgrade()
        store.add_urls([NewUrl(f"https://s{i % 50}.example/p/{i}") for i in range(args.urls)])
        ids = list(range(1, args.urls + 1))  # a new database numbers its URLs from 1
        rng = np.random.default_rng(1)
        times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for k in range(1, 2 * args.slots + 1):
            with_events = k % 2 == 0
            chosen = rng.choice(ids, size=args.per_slot, replace=False).tolist()
            polls = polls_of(chosen, k, args.hit_share, rng)
            record = SlotRecord(k, "bench", datetime.now(UTC), 1.0, len(polls), 0, 0, 0, 0)
            t0, c0 = time.perf_counter(), time.process_time()
            if with_events:
                store.commit_slot(record, polls)
            else:
                with without_events():
                    store.commit_slot(record, polls)
            times[with_events].append((time.perf_counter() - t0, time.process_time() - c0))
        store.close()
    lines = []
    for label, flag in (("without events", False), ("with events", True)):
        wall = np.array([w for w, _ in times[flag]]) * 1000
        cpu = np.array([c for _, c in times[flag]]) * 1000
        lines.append(
            f"[{kind}] {label}: commit of {args.per_slot} polls ({args.hit_share:.0%} changes) "
            f"median {np.median(wall):.1f} ms wall, {np.median(cpu):.1f} ms CPU "
            f"(p90 {np.percentile(wall, 90):.1f} ms wall; {args.slots} slots)"
        )
    on = np.median([w for w, _ in times[True]])
    off = np.median([w for w, _ in times[False]])
    con = np.median([c for _, c in times[True]])
    coff = np.median([c for _, c in times[False]])
    lines.append(
        f"[{kind}] the event rows add {on / off - 1:+.1%} wall, {con / coff - 1:+.1%} CPU "
        f"to the slot's commit (medians)"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--urls", type=int, default=5_000)
    parser.add_argument("--per-slot", type=int, default=500)
    parser.add_argument("--slots", type=int, default=40, help="slots each way, interleaved")
    parser.add_argument("--hit-share", type=float, default=1.0)
    args = parser.parse_args()
    kinds = ("sqlite", "postgresql") if args.db == "both" else (args.db,)
    out: list[str] = []
    for kind in kinds:
        out += run(kind, args)
        print("\n".join(out[-3:]), flush=True)


if __name__ == "__main__":
    main()
