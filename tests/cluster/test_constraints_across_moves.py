"""A worker's constraints survive lease changes (real processes on PostgreSQL, the site's log).

A worker that gains sites restores their saved learning rows, which rebuilds its scheduler;
the constraints the loop keeps outside the scheduler's state (operator pauses and bounds,
host caps, the failure back-off) must then be given to the new scheduler for every URL, not
only for those just gained. One URL of each host is paused and one has an operator bound
(at least ``MIN_INTERVAL`` seconds between two polls); workers join, leave and are killed
(each change makes the gaining workers rebuild). From the site's own log: no paused URL is
ever requested, and no worker polls a bounded URL twice within its bound.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, text

from crawler.store import NewUrl, Store
from crawler.testsite import site_process
from tests.cluster._harness import UA_PREFIX, SiteLog, Worker, wait_until, worker_env

pytestmark = pytest.mark.slow

PAGES = 60
HOSTS = 6
SLOT = 0.5
MIN_INTERVAL = 4.0  # seconds: 8 slots
CLUSTER = {
    "CRAWLER_HEARTBEAT_S": "0.3",
    "CRAWLER_WORKER_TIMEOUT_S": "2.0",
    "CRAWLER_FETCH_TIMEOUT_S": "2",
}
NAMES = ("w1", "w2", "w3")


@contextlib.contextmanager
def _schema(pg: Any) -> Iterator[str]:
    name = pg.create()
    url = pg.url_of(name)
    try:
        with Store(url) as st:
            st.upgrade()
        yield url
    finally:
        pg.drop(name)


def _owners(engine: Any) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT l.site, w.name FROM cluster_leases l "
                "JOIN cluster_workers w ON w.worker_id = l.worker_id"
            )
        ).all()
    return {str(s): str(n) for s, n in rows}


def test_pauses_and_bounds_hold_across_joins_leaves_and_kills(
    _postgres: Any, tmp_path: Path
) -> None:
    rates = np.full(PAGES, 0.5)  # every page changes often: the scheduler wants them all
    with (
        site_process(rates, hosts=HOSTS, tick_seconds=SLOT, page_size=400, seed=5) as port,
        _schema(_postgres) as url,
    ):
        urls = [
            f"http://127.0.0.{(k - 1) % HOSTS + 1}:{port}/page/{k}" for k in range(1, 1 + PAGES)
        ]
        with Store(url) as st:
            st.add_urls([NewUrl(u) for u in urls])
            ids = dict((u, i) for i, u in st.select_urls(urls))
            paused_pages = list(range(1, HOSTS + 1))  # one page of each host
            bounded_pages = list(range(HOSTS + 1, 2 * HOSTS + 1))  # another of each
            st.edit_urls([ids[urls[k - 1]] for k in paused_pages], {"paused": True})
            st.edit_urls(
                [ids[urls[k - 1]] for k in bounded_pages], {"min_interval_s": MIN_INTERVAL}
            )
        engine = create_engine(url)
        workers: dict[str, Worker] = {}
        log = SiteLog(port)
        changes: list[str] = []

        def start(name: str) -> None:
            env = worker_env(url, name, capacity=8.0, slot_seconds=SLOT, extra=CLUSTER)
            workers[name] = Worker(name, env, tmp_path / f"{name}.log").start()
            changes.append(f"+{name}")

        def holders() -> set[str]:
            for name, w in workers.items():
                assert w.alive() or name in gone, f"{name} exited: {w.output()}"
            return set(_owners(engine).values())

        gone: set[str] = set()
        try:
            start("w1")
            wait_until(lambda: holders() == {"w1"}, 60, what="w1 holding the sites")
            time.sleep(4.0)
            start("w2")
            wait_until(lambda: holders() == {"w1", "w2"}, 60, what="w2 taking sites")
            time.sleep(4.0)
            start("w3")
            wait_until(lambda: holders() == {"w1", "w2", "w3"}, 60, what="w3 taking sites")
            time.sleep(4.0)
            workers["w2"].stop()  # a clean leave: its sites go to w1 and w3
            gone.add("w2")
            changes.append("-w2")
            wait_until(lambda: holders() == {"w1", "w3"}, 60, what="w2's sites moving")
            time.sleep(4.0)
            workers["w3"].signal(signal.SIGKILL)  # a death: its sites go to w1
            gone.add("w3")
            changes.append("kill w3")
            wait_until(lambda: holders() == {"w1"}, 60, what="w3's sites moving to w1")
            time.sleep(6.0)
            log.refresh()
        finally:
            for w in workers.values():
                w.stop()
            engine.dispose()

    clients = {UA_PREFIX + n for n in NAMES}
    page = np.asarray(log.page)
    t = np.asarray(log.t)
    who = np.asarray(log.client)
    ours = np.isin(who, list(clients))
    polled_paused = int(np.isin(page[ours], paused_pages).sum())
    too_soon: list[tuple[int, str, float]] = []
    bounded_polls = 0
    for k in bounded_pages:
        for name in clients:
            times = np.sort(t[ours & (page == k) & (who == name)])
            bounded_polls += times.size
            gaps = np.diff(times)
            too_soon += [(k, name, float(g)) for g in gaps if g < MIN_INTERVAL - SLOT]
    print(
        f"\nconstraints across {len(changes)} lease changes ({', '.join(changes)}): "
        f"{int(ours.sum())} polls; paused pages polled {polled_paused} times; bounded pages "
        f"polled {bounded_polls} times, {len(too_soon)} within their bound by one worker"
    )
    assert int(ours.sum()) > 0
    assert polled_paused == 0, "a paused URL was polled"
    assert not too_soon, f"a bounded URL polled within its bound: {too_soon[:5]}"
