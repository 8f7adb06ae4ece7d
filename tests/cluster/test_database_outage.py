"""PostgreSQL unreachable for 20 s: no site moves, polls resume, nothing committed is lost.

Three ``crawler run --cluster`` workers on one logged site (360 pages on 36 loopback hosts)
reach PostgreSQL through one TCP proxy (tests/cluster/_proxy.py). Once every worker holds
sites and polls, the proxy closes every connection and refuses new ones (a database
restart: sessions killed, connections refused) for ``OUTAGE`` seconds, then forwards again.
Every heartbeat is then stale at once, far past the worker timeout: a stall, not a mass
death. From the leases, the poll log and the site's own log (one User-Agent per worker):

* every worker is still running after the outage (none exits on a refused connection);
* no site moves: no site is placed anew as its owner's (the coordinator logs such
  placements), and no lease changes owner or epoch, though the comparison is made well
  after the coordinator's settling time (the weights it would move by are fresh again by
  then, and drift within the overload margin moves nothing);
* every worker polls again within ``RESUME_SLOTS`` slots of the database's return;
* nothing committed is lost: every poll-log row written before the outage is still there,
  and every request the site logged in the steady state before the outage has its
  poll-log row (slots kept in memory while the database was away are committed once it is
  back).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, make_url, text

from crawler.store import session_name
from crawler.testsite import site_process
from tests.cluster._harness import (
    UA_PREFIX,
    SiteLog,
    Workers,
    lease_epochs,
    owners,
    schema,
    site_urls,
    via,
    wait_until,
    watch,
)
from tests.cluster._proxy import TcpProxy

pytestmark = pytest.mark.slow

PAGES = 360
HOSTS = 36  # 12 sites a worker: the packing's noise stays within its margin
SLOT = 1.0
OUTAGE = 20.0
RESUME_SLOTS = 2
#: the leases must stay put this long before the outage (the weights are learned first)
STEADY_S = 8.0
#: the leases are compared this long after the return: a coordinator that took the
#: stall for deaths would have moved sites by then (the worker timeout, 2 s, after it
#: read the database again), and one that re-packed by the weights after its settling
#: time (6 s: six 1 s slots) would have had some 30 rounds to do so
AFTER_S = 15.0
NAMES = ("w1", "w2", "w3")


def _poll_rows(engine: Any) -> tuple[int, int]:
    """(rows, largest id) of the poll log."""
    with engine.connect() as conn:
        n, top = conn.execute(text("SELECT count(*), coalesce(max(id), 0) FROM poll_log")).one()
    return int(n), int(top)


def _rows_per_url(engine: Any, before: float, since: float) -> Counter[int]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT url_id, count(*) FROM poll_log WHERE polled_at < to_timestamp(:t) "
                "AND polled_at >= to_timestamp(:s) GROUP BY url_id"
            ),
            {"t": before, "s": since},
        ).all()
    return Counter({int(u): int(n) for u, n in rows})


def test_a_database_outage_moves_no_site_and_loses_nothing(_postgres: Any, tmp_path: Path) -> None:
    rates = np.full(PAGES, 0.3)
    with (
        site_process(rates, hosts=HOSTS, tick_seconds=SLOT, page_size=500, seed=11) as port,
        schema(_postgres) as url,
    ):
        ids = watch(url, site_urls(port, PAGES, HOSTS))
        target = make_url(url)
        proxy = TcpProxy(target.host or "127.0.0.1", target.port or 5432)
        proxied = via(url, proxy.start())
        engine = create_engine(url)
        workers = Workers(proxied, tmp_path, capacity=10.0, slot_seconds=SLOT)
        workers.extra["CRAWLER_LOG_LEVEL"] = "INFO"
        try:
            _scenario(workers, engine, proxy, SiteLog(port), ids)
        finally:
            workers.stop_all()
            proxy.close()
            engine.dispose()


def _scenario(
    workers: Workers, engine: Any, proxy: TcpProxy, log: SiteLog, ids: dict[str, int]
) -> None:
    for name in NAMES:
        workers.start(name)
    clients = [UA_PREFIX + n for n in NAMES]

    def all_hold_and_poll() -> bool:
        workers.check()
        log.refresh()
        return set(owners(engine).values()) == set(NAMES) and all(c in log.client for c in clients)

    wait_until(all_hold_and_poll, 120, what="every worker holding sites and polling")
    time.sleep(3 * SLOT)  # the hand-overs of the start settle

    steady: list[float] = []

    def settled() -> bool:
        leases = lease_epochs(engine)
        steady[:] = [time.time()]  # start-up's slots (deadline-cut first polls) are over
        time.sleep(STEADY_S)
        return leases == lease_epochs(engine) and all(o is not None for o, _ in leases.values())

    wait_until(settled, 120, step=0.1, what=f"the leases staying put for {STEADY_S:g} s")
    steady_at = steady[0]
    before = lease_epochs(engine)
    rows_before, top_before = _poll_rows(engine)

    # -- the outage: every connection closed, new ones refused --------------------------------
    proxy.refuse()
    down_at = time.time()
    # and their sessions killed on the server's side too: this test's workers' only (the
    # server is shared with other tests, whose workers' sessions are named alike)
    with engine.connect() as conn:
        mine = [
            session_name(str(w))
            for (w,) in conn.execute(text("SELECT worker_id FROM cluster_workers"))
        ]
        conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = ANY(:names) AND pid <> pg_backend_pid()"
            ),
            {"names": mine},
        )
    while time.time() < down_at + OUTAGE:
        workers.check()
        time.sleep(0.5)
    up_at = time.time()
    proxy.recover()

    def all_polling_again() -> bool:
        workers.check()
        log.refresh()
        return all(log.select([c], since=up_at).any() for c in clients)

    wait_until(all_polling_again, 60, what="every worker polling again")
    time.sleep(max(0.0, up_at + AFTER_S - time.time()))
    workers.check()
    after = lease_epochs(engine)
    log.refresh()

    t = np.asarray(log.t)
    who = np.asarray(log.client)
    page = np.asarray(log.page)
    resumed = {
        c: float(t[(who == c) & (t >= up_at)].min()) - up_at
        for c in clients
        if ((who == c) & (t >= up_at)).any()
    }
    last_before = {c: float(t[(who == c) & (t < down_at)].max()) - down_at for c in clients}
    moved = sorted(s for s in before if after.get(s) != before[s])
    # a site placed anew because its owner was presumed dead: what a stall must not cause
    orphaned = [
        line
        for p in workers.tmp.glob("*.log")
        for line in p.read_text().splitlines()
        if "presumed dead placed anew" in line
    ]
    with engine.connect() as conn:
        kept = int(
            conn.execute(
                text("SELECT count(*) FROM poll_log WHERE id <= :top"), {"top": top_before}
            ).scalar_one()
        )
    # every request the site logged in the steady state before the outage has its
    # poll-log row (the last slots' rows were kept in memory through the outage)
    by_id = {k: ids[u] for k, u in enumerate(sorted(ids, key=_page_of), start=1)}
    in_steady = np.isin(who, clients) & (t >= steady_at) & (t < down_at - 0.5)
    wanted = Counter(by_id[int(k)] for k in page[in_steady].tolist())
    rows = _rows_per_url(engine, down_at + OUTAGE, steady_at)
    missing = {u: n - rows[u] for u, n in wanted.items() if rows[u] < n}
    print(
        f"\ndatabase outage of {OUTAGE:g} s ({SLOT:g} s slots): last requests before it "
        + ", ".join(f"{c[len(UA_PREFIX) :]} {v:+.2f} s" for c, v in last_before.items())
        + "; first after its return "
        + ", ".join(f"{c[len(UA_PREFIX) :]} {v:+.2f} s" for c, v in resumed.items())
        + f"; leases moved: {len(moved)} of {len(before)} ({len(orphaned)} placements of "
        "sites of workers presumed dead); poll-log rows before: "
        f"{rows_before}, still there: {kept}; requests before the outage without their row: "
        f"{sum(missing.values())} of {sum(wanted.values())}"
    )
    assert not orphaned, f"sites of workers presumed dead moved: {orphaned}"
    assert not moved, (
        f"sites moved across the outage (site, before, after): "
        f"{[(s, before[s], after[s]) for s in moved]}; the coordinator must move nothing "
        "held while it settles, nor by drift within the overload margin"
    )
    assert kept == rows_before, "poll-log rows committed before the outage are gone"
    assert not missing, f"requests without their poll-log row: {missing}"
    late = {c: v for c, v in resumed.items() if v > RESUME_SLOTS * SLOT}
    assert not late, f"polls resumed later than {RESUME_SLOTS} slots after the return: {late}"


def _page_of(u: str) -> int:
    return int(u.rsplit("/", 1)[1])
