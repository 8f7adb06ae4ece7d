"""Cluster at size: what a worker's start-up, memory, version bumps and commits cost, and
what a coordination round costs, with millions of URLs.

    python -m benchmarks.cluster_scale                    # 2M URLs, 20k sites, 4 workers
    python -m benchmarks.cluster_scale --urls 200000 --sites 2000 --big-sites 100000

What it does, printing progress as it goes (the default run takes tens of minutes):

1. **The watch list.** ``--urls`` URLs on ``--sites`` sites (loopback names 127.1.x.y, one
   port where nothing listens: the workers need not fetch; each poll is refused at once
   and committed as an error), added through ``Store.add_urls``, and a saved scheduler
   state with a per-URL row for every URL (``url_state``), as a running cluster leaves it.
2. **Start-up and memory.** One ``crawler run --cluster`` worker alone over all the URLs,
   then ``--workers`` workers together (real processes). The benchmark holds the
   coordinator lock while they start, so the first round sees them all (without it the
   first worker to start takes every site at once and the others join later); start-up is
   "spawn -> registered" (imports, migrations check, the saved scalars) plus "leases
   assigned -> its share watched" (the ``crawler_watched_urls`` gauge at its leased sites'
   URL count). RSS: the worker's main process now, and its peak (VmHWM).
3. **Per slot.** Each worker's commit time per slot (``crawler_db_commit_duration_seconds``
   sum / count over a window), and the rows the workers read from ``urls``, ``url_state``
   and ``sites`` per slot (``pg_stat_user_tables``).
4. **Per version bump.** Watch-list bumps (``crawler edit`` of one URL's importance) while
   the workers run: rows read per bump by all workers (against a quiet window of the same
   length). And replayed in this process for one worker's share: the statements a bump
   runs, as this code runs them (the URLs of the sites the edit changed, by
   ``sites.edit_version``; the rules, failures and revivals of its own sites), as they
   were before (every URL of its own sites) and at first (every URL of the table: rules,
   failures, revivals; on a lease change every leased site's URLs again), wall time and
   rows read; and a commit's lease lock, the leases of the sites in the commit (now)
   against every lease held (before).
5. **The coordinator's round** at ``--sites`` sites with ``--workers`` simulated workers,
   and at ``--big-sites`` sites (one URL each) with 100 simulated workers (heartbeats
   written by this process): a steady round, and a round after one worker died (its sites
   moved in one UPDATE); wall time and rows read from the schema's tables. Next to it the
   URL count as it was read before (a GROUP BY over every URL).

Rows read are PostgreSQL's own counters (sequential rows read + index rows fetched), read
after a 1.2 s pause (the server flushes them about once a second); they include whatever
else ran in the schema meanwhile, which is said where it applies.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

import psutil
from sqlalchemy import Engine, create_engine, text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_databases import database  # noqa: E402

from crawler import schedulers  # noqa: E402
from crawler.service._coordinator import Coordinator  # noqa: E402
from crawler.settings import Settings  # noqa: E402
from crawler.store import NewUrl, Store, owner_info  # noqa: E402
from tests.cluster._harness import Worker, free_port, worker_env  # noqa: E402

TABLES = ("urls", "url_state", "sites", "cluster_leases", "cluster_workers", "cluster_state")
T0 = time.monotonic()


def say(message: str) -> None:
    """Progress, with the time since the start."""
    print(f"[{time.monotonic() - T0:7.1f} s] {message}", flush=True)


def host_of(k: int, base: int = 1) -> str:
    """The loopback name of site ``k``: 127.<base + k // 65536>.<..>.<..>."""
    return f"127.{base + (k >> 16)}.{(k >> 8) & 255}.{k & 255}"


# ----- the watch list ---------------------------------------------------------------------


def fill(url: str, n_urls: int, n_sites: int, port: int, base: int = 1, save: bool = True) -> None:
    """``n_urls`` URLs on ``n_sites`` sites, and (``save``) a saved scheduler state of all."""
    with Store(url) as store:
        store.upgrade()
        chunk = 100_000
        started = time.perf_counter()
        for start in range(0, n_urls, chunk):
            stop = min(n_urls, start + chunk)
            store.add_urls(
                [
                    NewUrl(f"http://{host_of(i % n_sites, base)}:{port}/p/{i}")
                    for i in range(start, stop)
                ]
            )
            say(f"  added {stop:,} of {n_urls:,} URLs ({time.perf_counter() - started:.0f} s)")
        if not save:
            return
        ids, importance = store.active_urls()
        name = Settings().scheduler
        sched = schedulers.create(name, capacity=max(1.0, n_urls / 100), seed=1)
        sched.add(ids, importance=importance)
        t = time.perf_counter()
        store.save_scheduler_state(sched.take_delta())
        say(f"  saved the {name} state of {ids.size:,} URLs in {time.perf_counter() - t:.0f} s")


def rows_read(engine: Engine, tables: tuple[str, ...] = TABLES) -> dict[str, int]:
    """Rows read so far (sequential + index fetches) per table of the current schema."""
    time.sleep(1.2)  # the server flushes its counters about once a second
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        rows = conn.execute(
            text(
                "SELECT relname, coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
                "FROM pg_stat_user_tables WHERE schemaname = current_schema() "
                "AND relname = ANY(:t)"
            ),
            {"t": list(tables)},
        ).all()
    return {str(name): int(n) for name, n in rows}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {
        k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)
    }


def fmt_rows(rows: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(rows.items())) or "none"


# ----- real workers -----------------------------------------------------------------------


def scrape(port: int) -> dict[str, float]:
    """The worker's metrics (unlabelled samples only)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        body = response.read().decode()
    out: dict[str, float] = {}
    for line in body.splitlines():
        m = re.fullmatch(r"([a-z_]+) ([0-9.e+-]+|NaN)", line.strip())
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def try_scrape(port: int, tries: int = 1) -> dict[str, float]:
    """The worker's metrics, or {} (a worker busy loading may not answer in time)."""
    for _ in range(tries):
        try:
            return scrape(port)
        except OSError:
            continue
    return {}


@dataclass
class Started:
    name: str
    registered_s: float  # spawn -> registered
    loaded_s: float  # leases assigned -> its share watched
    urls: int
    sites: int
    rss_mb: float
    peak_mb: float
    commit_ms: float = float("nan")
    slots: int = 0


def peak_mb(pid: int) -> float:
    """VmHWM of a process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worker_ids(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return {n: w for w, n in conn.execute(text("SELECT worker_id, name FROM cluster_workers"))}


def shares(engine: Engine) -> tuple[dict[str, tuple[int, int]], int]:
    """worker id -> (sites, URLs) it leases; and the sites without an owner."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT l.worker_id, count(*), coalesce(sum(s.url_count), 0) FROM cluster_leases l "
                "JOIN sites s ON s.host = l.site GROUP BY l.worker_id"
            )
        ).all()
    out = {str(w): (int(n), int(u)) for w, n, u in rows if w is not None}
    unowned = sum(int(n) for w, n, _ in rows if w is None)
    return out, unowned


def run_workers(url: str, n: int, args: argparse.Namespace, logs: Path, tag: str) -> list[Started]:
    """Start ``n`` workers together; measure start-up, memory, commits, bumps; stop them."""
    engine = create_engine(url)
    store = Store(url)
    lock = store.acquire_service_lock(owner_info("cluster_scale benchmark"), role="coordinator")
    procs: list[Worker] = []
    spawned: dict[str, float] = {}
    try:
        for i in range(n):
            name = f"{tag}-{i + 1}"
            env = worker_env(
                url,
                name,
                capacity=args.capacity,
                slot_seconds=args.slot_seconds,
                extra={
                    "CRAWLER_LOG_LEVEL": "INFO",
                    "CRAWLER_FETCH_TIMEOUT_S": "2",
                    "CRAWLER_NORMALIZE_WORKERS": "0",
                    "CRAWLER_STORE_SNAPSHOTS": "false",
                },
            )
            spawned[name] = time.monotonic()
            procs.append(Worker(name, env, logs / f"{name}.log").start())
        registered: dict[str, float] = {}
        deadline = time.monotonic() + 300
        while len(registered) < n and time.monotonic() < deadline:
            for name in worker_ids(engine):
                registered.setdefault(name, time.monotonic())
            for p in procs:
                if not p.alive():
                    raise RuntimeError(f"{p.name} exited: {p.output()}")
            time.sleep(0.2)
        say(f"  {len(registered)} of {n} worker(s) registered; releasing the coordinator lock")
        lock.release()
        released = time.monotonic()
        ids = worker_ids(engine)
        by_id = {ids[p.name]: p for p in procs if p.name in ids}
        loaded: dict[str, float] = {}
        stable = 0
        last_print = 0.0
        deadline = time.monotonic() + args.load_timeout
        while time.monotonic() < deadline:
            held, unowned = shares(engine)
            done = 0
            for wid, (_sites, want) in held.items():
                p = by_id.get(wid)
                if p is None:
                    continue
                got = try_scrape(p.metrics_port).get("crawler_watched_urls", -1)
                if got == want and want > 0:
                    loaded.setdefault(p.name, time.monotonic())
                    done += 1
                else:
                    loaded.pop(p.name, None)
            stable = stable + 1 if done == n and unowned == 0 else 0
            if stable >= 3:
                break
            if time.monotonic() - last_print > 15:
                last_print = time.monotonic()
                say(
                    f"  waiting: {done} of {n} worker(s) hold their share, "
                    f"{unowned} site(s) unowned"
                )
            for p in procs:
                if not p.alive():
                    raise RuntimeError(f"{p.name} exited: {p.output()}")
            time.sleep(1.0)
        held, _ = shares(engine)
        out = []
        for p in procs:
            wid = ids[p.name]
            proc = psutil.Process(p.pid)
            out.append(
                Started(
                    p.name,
                    registered[p.name] - spawned[p.name],
                    loaded.get(p.name, float("nan")) - released,
                    held.get(wid, (0, 0))[1],
                    held.get(wid, (0, 0))[0],
                    proc.memory_info().rss / 2**20,
                    peak_mb(p.pid),
                )
            )
        say(f"  all {n} worker(s) hold their share; measuring commits for {args.window:g} s")
        first = {p.name: try_scrape(p.metrics_port, tries=5) for p in procs}
        before = rows_read(engine)
        time.sleep(args.window)
        after = rows_read(engine)
        slots = 0
        for s, p in zip(out, procs, strict=True):
            a, b = first[p.name], try_scrape(p.metrics_port, tries=5)
            if not a or not b:  # not answered: no figure rather than a wrong one
                s.slots = 0
                continue
            count = b.get("crawler_db_commit_duration_seconds_count", 0) - a.get(
                "crawler_db_commit_duration_seconds_count", 0
            )
            total = b.get("crawler_db_commit_duration_seconds_sum", 0) - a.get(
                "crawler_db_commit_duration_seconds_sum", 0
            )
            s.commit_ms = total / count * 1000 if count > 0 else float("nan")
            s.slots = int(count)
            slots += int(count)
        per_slot = {k: v // max(1, slots) for k, v in delta(before, after).items()}
        say(f"  rows read per committed slot (all workers, {slots} slots): {fmt_rows(per_slot)}")
        if n > 1:
            bumps(store, engine, args)
    finally:
        for p in procs:
            p.stop(60)
        if lock is not None:
            with contextlib.suppress(Exception):  # released above already
                lock.release()
        store.close()
        engine.dispose()
    return out


def bumps(store: Store, engine: Engine, args: argparse.Namespace) -> None:
    """Rows read per watch-list bump by the running workers, against a quiet window."""
    quiet_s = args.bumps * args.bump_every
    before = rows_read(engine)
    time.sleep(quiet_s)
    quiet = delta(before, rows_read(engine))
    # the URLs to edit: a few rows (reading every URL here, as this did, counted about
    # one whole read of urls into the bumps: the server flushed this session's counters
    # only after the window had begun)
    with engine.connect() as conn:
        ids = (
            conn.execute(
                text("SELECT id FROM urls WHERE removed_at IS NULL ORDER BY id LIMIT :n"),
                {"n": args.bumps},
            )
            .scalars()
            .all()
        )
    before = rows_read(engine)
    for k in range(args.bumps):
        store.edit_urls([int(ids[k])], {"importance": 0.5 + 0.01 * k})
        time.sleep(args.bump_every)
    busy = delta(before, rows_read(engine))
    per_bump = {t: (busy.get(t, 0) - quiet.get(t, 0)) // args.bumps for t in set(busy) | set(quiet)}
    say(
        f"  a watch-list bump, rows read by all workers (beyond a quiet window of "
        f"{quiet_s:g} s): {fmt_rows({k: v for k, v in per_bump.items() if v})}"
    )


# ----- replayed in this process -----------------------------------------------------------


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def replay(url: str, n_workers: int, repeat: int) -> None:
    """One worker's share of the sites: the statements of a bump and a commit's lease
    lock, as now and as before."""
    with Store(url) as store:
        engine = store.engine
        hosts = sorted(store.cluster.site_url_counts())
        wid = store.cluster.register_worker(10.0, name="replay")
        store.cluster.claim_coordinator(wid)
        own = hosts[: max(1, len(hosts) // n_workers)]
        store.cluster.assign_leases(dict.fromkeys(own, wid), wid)
        leases = store.cluster.leases_of(wid)
        gained = own[:1]
        # an edit of one URL of the worker's first site (its importance), as the workers'
        # bumps above: the sites edited since the version the worker saw before it
        seen = store.watch_list_version()
        first = store.cluster.active_urls_of(own[:1])[0]
        store.edit_urls([int(first[0])], {"importance": 0.75})
        version = store.watch_list_version()
        mine = set(own)

        def bump_now() -> None:
            edited = store.cluster.sites_edited_since(seen) & mine
            store.cluster.active_urls_of(sorted(edited))
            store.url_rules(own), store.url_failures(own), store.revived_since(version - 1, own)

        def bump_share() -> None:
            store.cluster.active_urls_of(own)
            store.url_rules(own), store.url_failures(own), store.revived_since(version - 1, own)

        def bump_before() -> None:
            store.cluster.active_urls_of(own)
            store.url_rules(), store.url_failures(), store.revived_since(version - 1)

        def lease_now() -> None:
            store.cluster.leases_of(wid)
            store.cluster.active_urls_of(gained)
            store.url_rules(own), store.url_failures(own), store.revived_since(version - 1, own)

        def lease_before() -> None:
            store.cluster.leases_of(wid)
            store.cluster.active_urls_of(own)
            store.url_rules(), store.url_failures(), store.revived_since(version - 1)

        counts = store.cluster.site_url_counts()  # once: not once per site
        urls_own = sum(counts[h] for h in own)
        say(f"replayed for one worker of {n_workers}: {len(own):,} sites, {urls_own:,} URLs")
        for label, fn in (
            ("watch-list bump, now (the sites the edit changed)", bump_now),
            ("watch-list bump, before (every URL of its own sites)", bump_share),
            ("watch-list bump, at first (every URL)", bump_before),
            ("lease change (+1 site), now (the gained site)", lease_now),
            ("lease change (+1 site), before (every leased site again)", lease_before),
        ):
            ms = median_ms(fn, repeat)
            before = rows_read(engine)
            fn()
            rows = delta(before, rows_read(engine))
            say(f"  {label}: {ms:.1f} ms (median of {repeat}); rows read: {fmt_rows(rows)}")
        # a commit's lease lock: the leases of the sites of 20 polls, or every lease held
        polled = own[:20]
        for label, sites in (
            ("now (the 20 polled sites)", polled),
            ("before (every lease held)", sorted(leases)),
        ):

            def lock(sites: list[str] = sites) -> None:
                with engine.begin() as conn:
                    conn.execute(
                        text(
                            "SELECT site, worker_id, epoch FROM cluster_leases "
                            "WHERE site = ANY(:s) FOR SHARE"
                        ),
                        {"s": sites},
                    )

            say(
                f"  a commit's lease lock, {label}: {median_ms(lock, repeat):.2f} ms "
                f"({len(sites):,} rows)"
            )
        store.cluster.deregister_worker(wid)


@contextmanager
def simulated(store: Store, n: int, capacity: float) -> Iterator[list[str]]:
    ids = [store.cluster.register_worker(capacity, name=f"sim-{k}") for k in range(n)]
    try:
        yield ids
    finally:
        for w in ids:
            store.cluster.deregister_worker(w)


def rounds(url: str, n_workers: int, label: str, kill: bool) -> None:
    """The coordinator's rounds with ``n_workers`` simulated workers."""
    settings = Settings(
        database_url=url, cluster=True, capacity=10.0, heartbeat_s=1.0, worker_timeout_s=3.0
    )
    with Store(url) as store:
        engine = store.engine
        counts = store.cluster.site_url_counts()
        total = sum(counts.values())
        with simulated(store, n_workers, max(1.0, total / n_workers)) as ids:
            coordinator = Coordinator(settings, store, ids[0])

            def beat(skip: str | None = None) -> None:
                for w in ids:
                    if w != skip:
                        store.cluster.heartbeat(w, 0, 0.0, None, 1)

            def timed(what: str, skip: str | None = None) -> None:
                beat(skip)
                before = rows_read(engine)
                beat(skip)
                t = time.perf_counter()
                result = coordinator.tick()
                seconds = time.perf_counter() - t
                rows = delta(before, rows_read(engine))
                moved = "-" if result is None else f"{result.moved} moved between live workers"
                say(f"  {label}, {what}: {seconds:.2f} s ({moved}); rows read: {fmt_rows(rows)}")

            timed("first round (every site placed)")
            timed("a steady round")
            timed("a steady round")
            if kill:
                dead = ids[-1]
                for _ in range(4):  # past the worker timeout (3 s) for the last one
                    beat(dead)
                    time.sleep(1.0)
                timed("the round after a worker died", skip=dead)
            coordinator.stop()
        t = time.perf_counter()
        with engine.connect() as conn:
            before = rows_read(engine)
            conn.execute(
                text(
                    "SELECT s.host, count(*) FROM urls u JOIN sites s ON s.id = u.site_id "
                    "WHERE u.removed_at IS NULL GROUP BY s.host"
                )
            ).all()
            seconds = time.perf_counter() - t
        rows = delta(before, rows_read(engine))
        say(
            f"  {label}, the URL count as read before (GROUP BY every URL): {seconds:.2f} s; "
            f"rows read: {fmt_rows(rows)}"
        )
        # before: one UPDATE per moved site (10,000 here), in a transaction rolled back
        moved = sorted(counts)[:10_000]
        with engine.connect() as conn, conn.begin() as tx:
            t = time.perf_counter()
            for site in moved:
                conn.execute(
                    text(
                        "UPDATE cluster_leases SET worker_id = NULL, epoch = epoch + 1 "
                        "WHERE site = :s"
                    ),
                    {"s": site},
                )
            each = time.perf_counter() - t
            t = time.perf_counter()
            conn.execute(
                text(
                    "UPDATE cluster_leases l SET worker_id = NULL, epoch = l.epoch + 1 "
                    "FROM unnest(CAST(:s AS text[])) AS t(s) WHERE l.site = t.s"
                ),
                {"s": moved},
            )
            one = time.perf_counter() - t
            tx.rollback()
        say(
            f"  {label}, moving {len(moved):,} leases: one UPDATE each {each:.2f} s, "
            f"one UPDATE for all {one:.2f} s"
        )


# ----- main -------------------------------------------------------------------------------


def table(rows: list[Started], title: str) -> None:
    print(f"\n{title}")
    print(
        "| worker | sites | URLs | spawn -> registered (s) | leases -> share watched (s) "
        "| RSS now (MB) | RSS peak (MB) | commit per slot (ms) | slots |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in rows:
        print(
            f"| {s.name} | {s.sites:,} | {s.urls:,} | {s.registered_s:.1f} | {s.loaded_s:.1f} | "
            f"{s.rss_mb:.0f} | {s.peak_mb:.0f} | {s.commit_ms:.1f} | {s.slots} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--urls", type=int, default=2_000_000)
    parser.add_argument("--sites", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--big-sites", type=int, default=1_000_000)
    parser.add_argument("--big-workers", type=int, default=100)
    parser.add_argument("--capacity", type=float, default=20.0, help="polls per slot per worker")
    parser.add_argument("--slot-seconds", type=float, default=1.0)
    parser.add_argument("--window", type=float, default=20.0, help="seconds of commits measured")
    parser.add_argument("--bumps", type=int, default=5)
    parser.add_argument("--bump-every", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=5, help="replays per statement set")
    parser.add_argument("--load-timeout", type=float, default=900.0)
    parser.add_argument(
        "--skip", default="", help="comma-separated: single,workers,replay,rounds,big"
    )
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    say(
        f"cluster_scale: {args.urls:,} URLs on {args.sites:,} sites, {args.workers} workers; "
        f"{args.big_sites:,} sites for the coordinator; load {psutil.getloadavg()[0]:.1f}"
    )
    port = free_port()  # nothing listens there: polls are refused at once
    with database("postgresql") as url, TemporaryDirectory() as tmp:
        say("building the watch list")
        fill(url, args.urls, args.sites, port)
        results: list[tuple[str, list[Started]]] = []
        if "single" not in skip:
            say(f"one worker over all {args.urls:,} URLs")
            results.append(
                ("one worker over every URL", run_workers(url, 1, args, Path(tmp), "one"))
            )
            table(results[-1][1], results[-1][0])
        if "workers" not in skip:
            say(f"{args.workers} workers together")
            results.append(
                (f"{args.workers} workers", run_workers(url, args.workers, args, Path(tmp), "w"))
            )
            table(results[-1][1], results[-1][0])
        if "replay" not in skip:
            replay(url, args.workers, args.repeat)
        if "rounds" not in skip:
            say(f"the coordinator at {args.sites:,} sites, {args.workers} simulated workers")
            rounds(url, args.workers, f"{args.sites:,} sites", kill=True)
    if "big" not in skip:
        with database("postgresql") as url:
            say(f"the coordinator at {args.big_sites:,} sites (one URL each)")
            fill(url, args.big_sites, args.big_sites, port, base=2, save=False)
            rounds(url, args.big_workers, f"{args.big_sites:,} sites", kill=True)
    for title, rows in results:
        table(rows, title)
    say(f"done; load {psutil.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
