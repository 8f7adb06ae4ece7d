"""Cluster workers end to end, in one process: real PostgreSQL, real loopback
sites, real CrawlServices; a "dead" worker is one whose heartbeat and coordinator stop
and whose lock sessions close, without leaving (what kill -9 does to a process, as far
as the database can tell). The three-process acceptance test (kill -9, SIGSTOP) is
tests/cluster/test_cluster_processes.py (cluster-ops)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from crawler.service import CrawlService
from crawler.store import NewUrl, ServiceLockHeld, Store
from crawler.testsite import ChangingSite, zipf_rates
from tests._until import until
from tests.service.conftest import service_settings

SITES = 4
PAGES = 10


@pytest.fixture
def db_backend() -> str:
    return "postgresql"


@pytest.fixture
async def sites() -> AsyncIterator[list[ChangingSite]]:
    """SITES loopback sites of PAGES pages, each on a host of its own (127.0.0.k): the
    sites of one host go to one worker, so sites on ports of one host would not spread."""
    started = []
    try:
        for k in range(SITES):
            site = ChangingSite(
                zipf_rates(PAGES, 0.6, 0.5),
                tick_seconds=0.1,
                page_size=2_000,
                seed=k,
                host=f"127.0.0.{k + 1}",
            )
            await site.start()
            started.append(site)
        yield started
    finally:
        for site in started:
            await site.stop()


def worker_settings(database_url: str, name: str, **overrides: Any) -> Any:
    values: dict[str, Any] = {
        "cluster": True,
        "worker_name": name,
        "capacity": 6.0,
        "slot_seconds": 0.1,
        "heartbeat_s": 0.25,
        "worker_timeout_s": 1.5,
        "fetch_workers": 0,
        "slot_deadline_s": 0.5,
    }
    values.update(overrides)
    return service_settings(database_url, **values)


class Worker:
    """A CrawlService in cluster mode running in a task."""

    def __init__(self, database_url: str, name: str, **overrides: Any) -> None:
        self.service = CrawlService(worker_settings(database_url, name, **overrides))
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> Worker:
        await self.service.__aenter__()
        self.task = asyncio.create_task(self.service.run(self.stop))
        return self

    @property
    def member(self) -> Any:
        assert self.service.cluster is not None
        return self.service.cluster

    @property
    def id(self) -> str:
        return str(self.member.worker_id)

    async def leave(self) -> None:
        self.stop.set()
        if self.task is not None:
            await self.task
        await self.service.__aexit__(None, None, None)

    async def die(self) -> None:
        """Stop heartbeating and coordinating and close the sessions, without leaving."""
        member = self.member
        member._stop.set()
        if member._thread is not None:
            await asyncio.to_thread(member._thread.join, 10)
        if member.coordinator is not None:
            await asyncio.to_thread(member.coordinator.stop)
        self.stop.set()
        if self.task is not None:
            await self.task
        member.worker_id = ""  # so the exit does not deregister
        await self.service.__aexit__(None, None, None)


def watch(database_url: str, sites: list[ChangingSite]) -> None:
    with Store(database_url) as store:
        store.add_urls([NewUrl(u) for s in sites for u in s.urls()])


def site_names(sites: list[ChangingSite]) -> set[str]:
    return {f"{s.host}:{s.port}" for s in sites}


async def owners(store: Store) -> dict[str, str | None]:
    return {lease.site: lease.worker_id for lease in await asyncio.to_thread(store.cluster.leases)}


@pytest.mark.slow
async def test_workers_share_the_sites_fail_over_and_keep_what_was_learned(
    database_url: str, sites: list[ChangingSite]
) -> None:
    watch(database_url, sites)
    store = Store(database_url)
    workers = [await Worker(database_url, f"w{i}").start() for i in range(3)]
    try:
        ids = {w.id for w in workers}
        names = site_names(sites)

        got: dict[str, str | None] = {}

        async def settled() -> bool:
            """Every site leased to a live worker, every worker's scheduler watching
            exactly the URLs of its sites, and no URL in two schedulers: at one moment."""
            nonlocal got
            got = await owners(store)
            if set(got) != names or not all(o in ids for o in got.values()):
                return False
            watched = []
            for w in workers:
                mine = {s for s, o in got.items() if o == w.id}
                if not mine or set(w.member.leases) != mine:  # each has some: spread
                    return False
                sched = w.service.loop.scheduler
                assert sched is not None
                watched.append(set(sched.frequencies()[0].tolist()))
            return sum(map(len, watched)) == len(set().union(*watched)) == SITES * PAGES

        await until(settled, 40, "every site leased to one live worker, schedulers in step")
        # each URL is polled (by the worker that leases its site)
        await until(
            lambda: _async(all(len(s.truth.last_served) == PAGES for s in sites)),
            30,
            "every URL polled",
        )
        state = await asyncio.to_thread(store.cluster.cluster_state)
        assert state is not None and state.coordinator in ids
        assert state.live_workers == 3 and state.threshold == 1 and state.states == 32

        # the coordinator dies: another takes over
        coordinator = next(w for w in workers if w.id == state.coordinator)
        victim_sites = {s for s, o in got.items() if o == coordinator.id}
        await asyncio.sleep(0.5)  # its last slots committed
        saved_before = _learning_counts(store, victim_sites)
        await coordinator.die()
        workers.remove(coordinator)
        survivors = {w.id for w in workers}

        async def moved() -> bool:
            st = await asyncio.to_thread(store.cluster.cluster_state)
            now = await owners(store)
            return (
                st is not None
                and st.coordinator in survivors
                and all(now[s] in survivors for s in victim_sites)
            )

        # dead after 1.5 s (the timeout), then a round of 0.25 s; generous margin
        await until(moved, 20, "the dead coordinator's sites move to the survivors")
        await until(
            lambda: _async(all(any(s in w.member.leases for w in workers) for s in victim_sites)),
            10,
            "the survivors took the moved sites",
        )
        # learned state preserved: the new owners loaded the rows the dead one committed
        restored = sum(w.member.rows_restored_total for w in workers)
        assert restored >= len(victim_sites) * PAGES
        for w in workers:
            sched = w.service.loop.scheduler
            assert sched is not None
            st = sched.state()
            counts = dict(
                zip(
                    st.ids.tolist(),
                    (np.asarray(st.rows["hit_count"]) + np.asarray(st.rows["miss_count"])).tolist(),
                    strict=True,
                )
            )
            for uid, before in saved_before.items():
                if uid in counts:  # learning continued from the saved counts, not from 0
                    assert counts[uid] >= 0.9 * before - 1e-6, (uid, before, counts[uid])

        # a new worker joins and receives sites
        joiner = await Worker(database_url, "w3").start()
        workers.append(joiner)
        await until(
            lambda: _async(len(joiner.member.leases) > 0), 20, "the new worker receives sites"
        )
    finally:
        for w in workers:
            with contextlib.suppress(Exception):
                await w.leave()
        store.close()
    # leaving frees the leases (epochs bumped)
    with Store(database_url) as st:
        assert all(lease.worker_id is None for lease in st.cluster.leases())
        # only the dead one's row is left (forgotten after 10 timeouts)
        assert [w.name for w in st.cluster.cluster_workers()] == [coordinator.service.cluster.name]  # type: ignore[union-attr]


def _learning_counts(store: Store, site_set: set[str]) -> dict[int, float]:
    """hit_count + miss_count of the saved bayes rows of the sites' URLs."""
    with store.engine.connect() as conn:
        ids = [
            int(i)
            for (i,) in conn.execute(
                text(
                    "SELECT u.id FROM urls u JOIN sites s ON s.id = u.site_id "
                    "WHERE s.host = ANY(:h)"
                ),
                {"h": sorted(site_set)},
            )
        ]
    saved = store.cluster.load_url_states("bayes", ids)
    assert saved is not None and saved.ids.size > 0
    total = np.asarray(saved.rows["hit_count"]) + np.asarray(saved.rows["miss_count"])
    return dict(zip(saved.ids.tolist(), total.tolist(), strict=True))


async def _async(value: bool) -> bool:
    return value


@pytest.mark.slow
async def test_a_paused_worker_commits_nothing_for_the_sites_it_lost(
    database_url: str, sites: list[ChangingSite]
) -> None:
    """In-process fencing: a worker's commits are held (as if it were paused) while its
    heartbeat stops and its sites move; released, they land nothing for those sites."""
    watch(database_url, sites)
    store = Store(database_url)
    a = await Worker(database_url, "a").start()
    b: Worker | None = None
    gate = threading.Event()
    held: list[tuple[int, float]] = []
    try:
        await until(lambda: _async(len(a.member.leases) == SITES), 20, "a leases every site")
        b = await Worker(database_url, "b").start()
        await asyncio.sleep(1.0)
        # pause a: its commits wait at the gate, its heartbeat and coordinator stop
        real = a.service.store.commit_slot

        def paused_commit(slot: Any, polls: Any, delta: Any = None, fence: Any = None) -> int:
            held.extend((p.url_id, p.polled_at.timestamp()) for p in polls)
            gate.wait(60)
            return real(slot, polls, delta, fence)

        a.service.store.commit_slot = paused_commit  # type: ignore[method-assign]
        a.member._stop.set()
        if a.member.coordinator is not None:
            await asyncio.to_thread(a.member.coordinator.stop)
        a_sites = set(a.member.leases)

        async def b_has_them() -> bool:
            now = await owners(store)
            return bool(a_sites) and all(now.get(s) == b.id for s in a_sites)  # type: ignore[union-attr]

        await until(b_has_them, 45, "a's sites move to b")
        assert held, "a polled while paused"
        gate.set()  # a wakes up: its held commits run with its old fence
        await until(
            lambda: _async(a.member.fenced_polls_total >= len(held)),
            20,
            "a's held polls are fenced",
        )
        with store.engine.connect() as conn:
            landed = {
                (int(u), t.timestamp())
                for u, t in conn.execute(text("SELECT url_id, polled_at FROM poll_log"))
            }
        assert not landed & set(held)
        # awake, a heartbeats again (it was past its renew deadline: it polls nothing until
        # it has renewed and re-read its leases) and drops the sites it lost at that sync
        a.member._stop.clear()
        a.member._thread = threading.Thread(target=a.member._beat, daemon=True)
        a.member._thread.start()
        await until(
            lambda: _async(a.service.loop.scheduler.size == 0),  # type: ignore[union-attr]
            10,
            "a drops the lost sites",
        )
    finally:
        gate.set()
        for w in (a, b):
            if w is not None:
                with contextlib.suppress(Exception):
                    await w.leave()
        store.close()


async def test_cluster_and_single_service_refuse_each_other(database_url: str) -> None:
    cluster_worker = CrawlService(worker_settings(database_url, "c"))
    single = CrawlService(service_settings(database_url))
    async with cluster_worker:
        with pytest.raises(ServiceLockHeld):
            await single.__aenter__()
        # a second cluster worker is welcome
        async with CrawlService(worker_settings(database_url, "d")):
            pass
    async with CrawlService(service_settings(database_url)):
        with pytest.raises(ServiceLockHeld):
            await CrawlService(worker_settings(database_url, "e")).__aenter__()
