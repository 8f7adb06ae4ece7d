"""Cluster throughput: polls per second of 1, 2 and 4 ``crawler run
--cluster`` workers (real processes) on one PostgreSQL, next to the single-process
non-cluster service, in the same run, interleaved; and what coordinating costs per slot.

    python -m benchmarks.cluster_throughput                         # 2 rounds, 1/2/4 workers
    python -m benchmarks.cluster_throughput --rounds 3 --measure 40 --workers 1,2

The site (crawler.testsite.LoggedSite in its own process) serves ``--urls`` pages of about
``--page-bytes`` bytes over ``--hosts`` loopback addresses (127.0.0.1 ..), each page changing
with probability ``--change-rate`` per second. Every configuration gets a fresh PostgreSQL
schema with the same watch list; its processes run with slots back to back (a tiny
``slot_seconds``; ``--capacity`` polls per slot per process) and the service's defaults
otherwise (crawl worker processes: one per CPU). After ``--warmup`` seconds, the polls
committed in the next ``--measure`` seconds (poll_log rows by ``polled_at``) give polls/s.
Configurations run one after the other, in rounds (single, 1, 2, 4 workers, then again), so
the machine's drift hits all alike; the table gives each round's figure and the median.

Coordination cost per slot, for each cluster configuration: from PostgreSQL's own counters
(``pg_stat_user_tables`` of the schema's cluster_workers, cluster_leases and cluster_state:
scans ~ statements that touched them, rows read, rows written), divided by the slots the
workers committed in the window. (pg_stat_statements would give per-statement times, but
needs ``shared_preload_libraries`` and a server restart: not available on a shared server.)
Milliseconds: the statements a worker runs per slot outside its own polls -- the version
check (``cluster_version``), the metrics' ``cluster_state`` read, and the fence (the leases'
rows read FOR SHARE inside the commit) -- are replayed 200 times from this process against
the same schema while nothing else runs, median per slot; the heartbeat and the
coordinator's round run every ``heartbeat_s`` in their own threads, and are reported per
second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np
import psutil
from sqlalchemy import Engine, create_engine, text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_databases import database  # noqa: E402

from crawler.store import Fence, NewUrl, Store  # noqa: E402
from crawler.testsite import site_process  # noqa: E402
from tests.cluster._harness import Worker, worker_env  # noqa: E402

CLUSTER_TABLES = ("cluster_workers", "cluster_leases", "cluster_state")
TIMELINE_S = 5.0


@dataclass
class Measured:
    config: str
    processes: int
    polls: int
    seconds: float
    slots: int
    scans: int = 0
    rows_read: int = 0
    rows_written: int = 0
    sites: list[int] = field(default_factory=list)
    cpu_s: float = 0.0  # CPU seconds of the crawler processes (and their children) in the window
    #: polls committed in each ``TIMELINE_S`` bin from the processes' start to the window's end
    timeline: list[int] = field(default_factory=list)

    @property
    def polls_per_s(self) -> float:
        return self.polls / self.seconds

    @property
    def cpu_ms_per_poll(self) -> float:
        return self.cpu_s / max(1, self.polls) * 1000


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes and all their children, so far."""
    total = 0.0
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            for p in [proc, *proc.children(recursive=True)]:
                t = p.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            continue
    return total


def table_counters(engine: Engine) -> tuple[int, int, int]:
    """(scans, rows read, rows written) of the cluster tables in the current schema."""
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        row = conn.execute(
            text(
                "SELECT coalesce(sum(coalesce(seq_scan, 0) + coalesce(idx_scan, 0)), 0), "
                "coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0), "
                "coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) "
                "FROM pg_stat_user_tables WHERE schemaname = current_schema() "
                "AND relname = ANY(:t)"
            ),
            {"t": list(CLUSTER_TABLES)},
        ).one()
    return int(row[0]), int(row[1]), int(row[2])


def committed(engine: Engine, since: float, until: float) -> tuple[int, int]:
    """(poll_log rows, slot rows) with their time in [since, until)."""
    window = {
        "a": datetime.fromtimestamp(since, UTC),
        "b": datetime.fromtimestamp(until, UTC),
    }
    with engine.connect() as conn:
        polls = conn.execute(
            text("SELECT count(*) FROM poll_log WHERE polled_at >= :a AND polled_at < :b"), window
        ).scalar_one()
        slots = conn.execute(
            text("SELECT count(*) FROM slots WHERE started_at >= :a AND started_at < :b"), window
        ).scalar_one()
    return int(polls), int(slots)


def timeline(engine: Engine, since: float, until: float) -> list[int]:
    """Polls committed (by ``polled_at``) in each ``TIMELINE_S`` bin of [since, until)."""
    bins = [0] * int(np.ceil((until - since) / TIMELINE_S))
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT floor((extract(epoch FROM polled_at) - :a) / :w), count(*) "
                "FROM poll_log WHERE polled_at >= :ta AND polled_at < :tb GROUP BY 1"
            ),
            {
                "a": since,
                "w": TIMELINE_S,
                "ta": datetime.fromtimestamp(since, UTC),
                "tb": datetime.fromtimestamp(until, UTC),
            },
        ).all()
    for k, c in rows:
        if 0 <= int(k) < len(bins):
            bins[int(k)] += int(c)
    return bins


@contextmanager
def watched_schema(urls: list[str]) -> Iterator[str]:
    with database("postgresql") as url:
        with Store(url) as st:
            st.upgrade()
            st.add_urls([NewUrl(u) for u in urls])
        yield url


def run_config(config: str, urls: list[str], args: argparse.Namespace, logs: Path) -> Measured:
    """One configuration: "single", "N" (N cluster workers) or "N@base" (N cluster workers
    running the code of ``args.base``)."""
    count, _, tree = config.partition("@")
    n = 1 if count == "single" else int(count)
    cluster = count != "single"
    code = args.base if tree else None
    with watched_schema(urls) as url:
        engine = create_engine(url)
        procs: list[Worker] = []
        launched = time.time()
        try:
            for i in range(n):
                name = f"{config.replace('@', '-')}-{i + 1}"
                env = worker_env(
                    url,
                    name,
                    capacity=args.capacity,
                    slot_seconds=args.slot_seconds,
                    cluster=cluster,
                    extra={
                        "CRAWLER_FETCH_WORKERS": str(args.fetch_workers),
                        "CRAWLER_NORMALIZE_WORKERS": "0",
                        "CRAWLER_PER_HOST_CONCURRENCY": "8",
                        "CRAWLER_STORE_SNAPSHOTS": "false",
                        "CRAWLER_LOG_LEVEL": args.log_level,
                        "CRAWLER_DEFAULT_MIN_INTERVAL_S": "0",  # as measured: no polite bound
                        **({"PYTHONPATH": str(code)} if code else {}),
                    },
                )
                logs.mkdir(parents=True, exist_ok=True)
                procs.append(Worker(name, env, logs / f"{name}.log", cwd=code).start())
            time.sleep(args.warmup)
            for p in procs:
                if not p.alive():
                    raise RuntimeError(f"{p.name} exited: {p.output()}")
            before = table_counters(engine)
            pids = [p.pid for p in procs]
            cpu_before = cpu_seconds(pids)
            start = time.time()
            time.sleep(args.measure)
            end = time.time()
            cpu_used = cpu_seconds(pids) - cpu_before
            time.sleep(1.5)  # the servers' statistics are flushed about once a second
            after = table_counters(engine)
            sites = []
            if cluster:
                with engine.connect() as conn:
                    sites = sorted(
                        int(c)
                        for (c,) in conn.execute(
                            text(
                                "SELECT count(*) FROM cluster_leases WHERE worker_id IS NOT "
                                "NULL GROUP BY worker_id"
                            )
                        )
                    )
        finally:
            for p in procs:
                p.stop()
        polls, slots = committed(engine, start, end)
        line = timeline(engine, launched, end)
        engine.dispose()
    return Measured(
        config,
        n,
        polls,
        end - start,
        slots,
        *(b - a for a, b in zip(before, after, strict=True)),
        sites=sites,
        cpu_s=cpu_used,
        timeline=line,
    )


def replay_ms(urls: list[str], repeat: int = 200) -> dict[str, float]:
    """Median milliseconds of the per-slot cluster statements, replayed on a fresh schema
    holding the same watch list and one worker's leases of every site."""
    with watched_schema(urls) as url, Store(url) as st:
        hosts = sorted(st.cluster.site_url_counts())
        wid = st.cluster.register_worker(100.0, name="replay")
        st.cluster.claim_coordinator(wid)
        st.cluster.assign_leases(dict.fromkeys(hosts, wid), wid, weights=dict.fromkeys(hosts, 1.0))
        fence = Fence(wid, st.cluster.leases_of(wid))
        out: dict[str, list[float]] = {"cluster_version": [], "cluster_state": [], "fence": []}
        for _ in range(repeat):
            t = time.perf_counter()
            st.cluster.versions()
            out["cluster_version"].append(time.perf_counter() - t)
            t = time.perf_counter()
            st.cluster.cluster_state()
            out["cluster_state"].append(time.perf_counter() - t)
            t = time.perf_counter()
            with st.engine.begin() as conn:
                conn.execute(
                    text(
                        "SELECT site, worker_id, epoch FROM cluster_leases "
                        "WHERE site = ANY(:s) FOR SHARE"
                    ),
                    {"s": sorted(fence.leases)},
                )
            out["fence"].append(time.perf_counter() - t)
        beat: list[float] = []
        for _ in range(repeat):
            t = time.perf_counter()
            st.cluster.heartbeat(wid, len(hosts), 100.0, None, 1)
            beat.append(time.perf_counter() - t)
    result = {k: statistics.median(v) * 1000 for k, v in out.items()}
    result["heartbeat"] = statistics.median(beat) * 1000
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--urls", type=int, default=4_000)
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--page-bytes", type=int, default=10_000)
    parser.add_argument("--change-rate", type=float, default=0.05)
    parser.add_argument("--capacity", type=float, default=300.0)
    parser.add_argument("--slot-seconds", type=float, default=0.05)
    parser.add_argument("--fetch-workers", type=int, default=-1)
    parser.add_argument("--warmup", type=float, default=20.0)
    parser.add_argument("--measure", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--log-level", default="WARNING", help="the processes' log level")
    parser.add_argument("--logs", type=Path, default=None, help="keep the processes' logs here")
    parser.add_argument(
        "--base",
        type=Path,
        default=None,
        help="also run each cluster configuration with the code of this tree (a worktree at "
        "an earlier commit), interleaved in every round: before/after in one run",
    )
    args = parser.parse_args(argv)
    counts = args.workers.split(",")
    configs = ["single", *counts, *(f"{c}@base" for c in counts if args.base)]
    rates = np.full(args.urls, args.change_rate)
    results: dict[str, list[Measured]] = {c: [] for c in configs}
    print(
        f"{args.urls} URLs of ~{args.page_bytes} bytes on {args.hosts} hosts, change rate "
        f"{args.change_rate}/s; {args.capacity:g} polls per slot per process, slots back to "
        f"back; warm-up {args.warmup:g} s, window {args.measure:g} s, {args.rounds} round(s); "
        f"started {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        flush=True,
    )
    with (
        TemporaryDirectory(prefix="cluster-bench-") as tmp,
        site_process(rates, hosts=args.hosts, tick_seconds=1.0, page_size=args.page_bytes) as port,
    ):
        urls = [
            f"http://127.0.0.{(k - 1) % args.hosts + 1}:{port}/page/{k}"
            for k in range(1, args.urls + 1)
        ]
        logs = args.logs or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        for r in range(args.rounds):
            for config in configs:
                m = run_config(config, urls, args, logs / f"round{r + 1}")
                results[config].append(m)
                print(
                    f"  round {r + 1} {config:>6}: {m.polls_per_s:7.0f} polls/s, "
                    f"{m.cpu_ms_per_poll:.2f} CPU ms/poll, load {os.getloadavg()[0]:.1f}, "
                    f"{m.slots} slots, sites per worker {m.sites or '-'}",
                    file=sys.stderr,
                    flush=True,
                )
                print(
                    f"    polls per {TIMELINE_S:g} s from launch: "
                    + " ".join(str(c) for c in m.timeline),
                    file=sys.stderr,
                    flush=True,
                )
        ms = replay_ms(urls)
    single = statistics.median(m.polls_per_s for m in results["single"])
    print()
    print(
        "| configuration | polls/s per round | median | vs single | CPU ms per poll (median) "
        "| vs single | sites per worker (last round) | cluster-table scans / slot | "
        "rows read / slot | rows written / slot |"
    )
    print("|---|---|---:|---:|---:|---:|---|---:|---:|---:|")
    single_cpu = statistics.median(m.cpu_ms_per_poll for m in results["single"])
    for config in configs:
        runs = results[config]
        med = statistics.median(m.polls_per_s for m in runs)
        cpu = statistics.median(m.cpu_ms_per_poll for m in runs)
        slots = sum(m.slots for m in runs) or 1
        name = "single process (no --cluster)" if config == "single" else f"{config} worker(s)"
        name = name.replace("@base worker(s)", f" worker(s), {args.base}")
        print(
            f"| {name} | {', '.join(f'{m.polls_per_s:.0f}' for m in runs)} | {med:.0f} | "
            f"{med / single:.0%} | {cpu:.2f} | {cpu / single_cpu:.0%} | {runs[-1].sites or '-'} | "
            f"{sum(m.scans for m in runs) / slots:.1f} | "
            f"{sum(m.rows_read for m in runs) / slots:.1f} | "
            f"{sum(m.rows_written for m in runs) / slots:.1f} |"
        )
    per_slot = ms["cluster_version"] + ms["cluster_state"] + ms["fence"]
    print(
        f"\nper-slot cluster statements, replayed (median ms): version check "
        f"{ms['cluster_version']:.2f}, cluster_state read {ms['cluster_state']:.2f}, fence "
        f"(leases FOR SHARE, {args.hosts} sites) {ms['fence']:.2f}: {per_slot:.2f} ms per slot; "
        f"heartbeat {ms['heartbeat']:.2f} ms per heartbeat_s"
    )
    for config in configs[1:]:  # each round's cluster against that round's single process
        ratios = [
            c.polls_per_s / s.polls_per_s
            for c, s in zip(results[config], results["single"], strict=True)
        ]
        print(
            f"{config} worker(s) / single, round by round: "
            + ", ".join(f"{r:.0%}" for r in ratios)
            + f"; median {statistics.median(ratios):.0%}"
        )
    for config in ("2", "2@base"):
        if config not in results:
            continue
        two = statistics.median(m.polls_per_s for m in results[config])
        rounds = [
            c.polls_per_s >= 0.9 * s.polls_per_s
            for c, s in zip(results[config], results["single"], strict=True)
        ]
        verdict = "met" if all(rounds) else "NOT met"
        print(
            f"{config} workers: median {two / single:.0%} of the single process's polls/s; "
            f">= 90% in {sum(rounds)} of {len(rounds)} rounds (target: every round): {verdict}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
