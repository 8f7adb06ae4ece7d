"""What a worker holds is its share: the sites of one host, its own host caps' rows, and
the URLs of a lease change.

* A lease is per site (``host[:port]``, the unit of packing); politeness (the per-host
  cap, delay, Retry-After back-off) is per host (``crawler.sites.host_key``: the host
  without port) and kept by the worker that polls it. Two ports of one host on two
  workers would each get that worker's whole per-host cap: the coordinator keeps a
  host's sites together.
* ``save_host_caps`` of a worker replaces its own rows, not the other workers'.
* A lease change reads the gained sites' URLs only; a watch-list edit, those of the leased
  sites it changed.
"""

from __future__ import annotations

from typing import Any

import pytest

from crawler.service._coordinator import Coordinator
from crawler.sites import host_key
from crawler.store import NewUrl, Store
from tests.service.conftest import service_settings


@pytest.fixture
def db_backend() -> str:
    return "postgresql"


def _settings(database_url: str) -> Any:
    return service_settings(
        database_url, cluster=True, capacity=10.0, heartbeat_s=0.2, worker_timeout_s=5.0,
        slot_seconds=60.0,
    )  # fmt: skip


def _owners_by_host(store: Store) -> dict[str, set[str | None]]:
    out: dict[str, set[str | None]] = {}
    for lease in store.cluster.leases():
        out.setdefault(host_key(lease.site), set()).add(lease.worker_id)
    return out


def test_the_ports_of_one_host_are_leased_to_one_worker(store: Store, database_url: str) -> None:
    # 3 hosts with 3 ports each, 6 hosts with one: spread over 3 workers, the packing alone
    # would split the ports of a host (all sites weigh alike)
    sites = [f"h{k}.test:{8000 + p}" for k in range(3) for p in range(3)]
    sites += [f"single{k}.test" for k in range(6)]
    store.add_urls([NewUrl(f"http://{s}/p{i}") for s in sites for i in range(4)])
    workers = [store.cluster.register_worker(10.0, name=f"w{k}") for k in range(3)]
    coordinator = Coordinator(_settings(database_url), store, workers[0])
    try:
        for _ in range(3):
            for w in workers:
                store.cluster.heartbeat(w, 0, 0.0, None, 1)
            assert coordinator.tick() is not None
        owners = _owners_by_host(store)
        assert len(owners) == 9
        for host, held in owners.items():
            assert len(held) == 1 and None not in held, (host, held)
        # the load is still spread: every worker holds some host
        assert {next(iter(h)) for h in owners.values()} == set(workers)
    finally:
        coordinator.stop()


def test_each_worker_replaces_only_its_own_host_caps(store: Store) -> None:
    from crawler.store import HostCapRow

    def row(host: str, cap: float) -> HostCapRow:
        return HostCapRow(host, cap, cap / 2, False, "delay", None)

    store.save_host_caps([row("a.test", 1.0), row("b.test", 2.0)], "worker-a")
    store.save_host_caps([row("c.test", 3.0)], "worker-b")
    assert set(store.host_caps()) == {"a.test", "b.test", "c.test"}
    # a loses b.test (b takes it over): a's save drops its own b.test row only
    store.save_host_caps([row("b.test", 2.5), row("c.test", 3.0)], "worker-b")
    store.save_host_caps([row("a.test", 1.5)], "worker-a")
    caps = store.host_caps()
    assert {h: r.cap for h, r in caps.items()} == {"a.test": 1.5, "b.test": 2.5, "c.test": 3.0}
    # a worker with no capped host any more leaves the others' rows alone
    store.save_host_caps([], "worker-a")
    assert set(store.host_caps()) == {"b.test", "c.test"}
    # a single service (no worker) replaces the whole table, as before
    store.save_host_caps([row("d.test", 4.0)])
    assert set(store.host_caps()) == {"d.test"}


def test_a_lease_change_reads_only_the_gained_sites_urls(store: Store, database_url: str) -> None:
    """When only the assignment moved, a worker keeps the URLs it holds, drops those of
    the sites it lost and reads those of the sites it gained: the same watch list as a
    full read, for the cost of the change."""
    import asyncio

    import numpy as np

    from crawler import schedulers
    from crawler.service._cluster import ClusterMember

    sites = [f"s{k}.test" for k in range(6)]
    store.add_urls([NewUrl(f"http://{s}/p{i}", importance=0.5 + k / 20) for k, s in
                    enumerate(sites) for i in range(5)])  # fmt: skip
    member = ClusterMember(_settings(database_url), store)
    member.worker_id = store.cluster.register_worker(10.0, name="m")
    store.cluster.claim_coordinator(member.worker_id)
    store.cluster.assign_leases({s: member.worker_id for s in sites[:3]}, member.worker_id)
    version, ids, importance = member.watch_list()
    scheduler = schedulers.create("bayes", capacity=5.0, seed=1)
    scheduler.add(ids, importance=importance)
    read: list[list[str]] = []
    full = store.cluster.active_urls_of

    def spy(site_list: Any) -> Any:
        read.append(list(site_list))
        return full(site_list)

    store.cluster.active_urls_of = spy  # type: ignore[method-assign]
    # s0 moves away, s3 and s4 come: only the assignment's version moves
    owner = {s: member.worker_id for s in sites[1:5]} | {sites[0]: None, sites[5]: None}
    store.cluster.assign_leases(owner, member.worker_id)
    update = asyncio.run(member.sync(scheduler, version))
    assert update is not None
    assert read == [["s3.test", "s4.test"]]
    want_ids, want_importance, _ = full(sites[1:5])
    assert np.array_equal(update.ids, want_ids)
    assert np.allclose(update.importance, want_importance)
    assert member.sites() == sites[1:5]
    # watch-list edits: only the URLs of the leased sites they changed are read again,
    # and the watch list is the same as a full read of every leased site
    seen = update.version
    first = int(want_ids[0])
    edits: list[tuple[Any, list[str]]] = [
        (lambda: store.edit_urls([first], {"importance": 0.9}), ["s1.test"]),
        (lambda: store.add_urls([NewUrl("http://s2.test/new")]), ["s2.test"]),
        (lambda: store.remove_urls(["http://s3.test/p1"]), ["s3.test"]),
        (lambda: store.set_importance("http://s4.test/p2", 0.3), ["s4.test"]),
        # a rule (read whole on every bump, from the rules' partial index), a site not
        # leased here, a revival: no URL of a leased site to read again
        (lambda: store.edit_urls([int(want_ids[-1])], {"paused": True}), []),
        (lambda: store.add_urls([NewUrl("http://s5.test/new")]), []),
        (lambda: store.revive_urls([int(want_ids[1])]), []),
        # an edit of two leased sites at once, and one removed then added back
        (lambda: store.remove_urls(["http://s1.test/p3", "http://s4.test/p3"]),
         ["s1.test", "s4.test"]),
        (lambda: store.add_urls([NewUrl("http://s3.test/p1")]), ["s3.test"]),
    ]  # fmt: skip
    for edit, reread in edits:
        edit()
        read.clear()
        again = asyncio.run(member.sync(scheduler, seen))
        assert again is not None and read == [reread]
        assert again.version[0] == store.watch_list_version() != seen[0]
        want_ids, want_importance, _ = full(sites[1:5])
        assert np.array_equal(again.ids, want_ids)
        assert np.allclose(again.importance, want_importance)
        seen = again.version
    assert member.sites_reread_total == 7
    assert np.allclose(again.importance[again.ids == first], [0.9])
    # an edit between two syncs that also moved a lease: the gained site and the edited
    # one are read, nothing else
    store.add_urls([NewUrl("http://s2.test/newer")])
    store.cluster.assign_leases({sites[5]: member.worker_id}, member.worker_id)
    read.clear()
    again = asyncio.run(member.sync(scheduler, seen))
    assert again is not None and read == [["s2.test", "s5.test"]]
    assert np.array_equal(again.ids, full(sites[1:6])[0])
