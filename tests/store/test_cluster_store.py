"""The cluster's tables: membership, leases, the coordinator's writes, fencing.

PostgreSQL only (cluster mode needs it): the database's clock, FOR SHARE, NOTIFY.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from sqlalchemy import text

from crawler.store import Fence, NewUrl, NotCoordinator, Store
from crawler.store.models import url_state
from tests.store._helpers import add, custom_state, poll, slot_record


@pytest.fixture
def db_backend() -> str:
    return "postgresql"


def test_register_heartbeat_and_liveness_by_the_database_clock(store: Store) -> None:
    a = store.cluster.register_worker(10.0, name="a", metrics_url="http://127.0.0.1:9410/metrics")
    b = store.cluster.register_worker(20.0, name="b")
    assert len(a) == 32 and a != b
    assert store.cluster.heartbeat(a, 3, 7.5, 0.25, 42)
    rows = {w.worker_id: w for w in store.cluster.cluster_workers()}
    assert rows[a].sites == 3 and rows[a].weight == 7.5 and rows[a].multiplier == 0.25
    assert rows[a].slot == 42 and rows[a].capacity == 10.0 and rows[a].state == "live"
    assert rows[a].heartbeat_age_s < 5
    # age b's heartbeat by 60 s on the server's clock: dead for a 10 s timeout
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE cluster_workers SET heartbeat_at = heartbeat_at - interval '60 seconds' "
                "WHERE worker_id = :b"
            ),
            {"b": b},
        )
    assert [w.worker_id for w in store.cluster.live_workers(10.0)] == [a]
    assert {w.worker_id for w in store.cluster.live_workers(120.0)} == {a, b}
    assert store.cluster.forget_workers(30.0) == 1
    assert not store.cluster.heartbeat(b, 0, 0.0, None, 0)  # gone: re-register
    state = store.cluster.cluster_state()
    assert state is not None and state.version == 0


def test_assign_leases_bumps_epochs_of_moved_sites_only(store: Store) -> None:
    a = store.cluster.register_worker(10.0, name="a")
    b = store.cluster.register_worker(10.0, name="b")
    with pytest.raises(NotCoordinator):
        store.cluster.assign_leases({"x.test": a}, a)
    store.cluster.claim_coordinator(a)
    moved = store.cluster.assign_leases(
        {"x.test": a, "y.test": b, "z.test": None},
        a,
        weights={"x.test": 2.0, "y.test": 3.0},
        figures={"live_workers": 2, "total_weight": 5.0, "moves_total": 0},
    )
    assert moved == 2
    assert store.cluster.leases_of(a) == {"x.test": 1}
    assert store.cluster.leases_of(b) == {"y.test": 1}
    v1 = store.cluster.cluster_version()
    assert v1 == 1
    # nothing moves: same epochs, same version
    assert store.cluster.assign_leases({"x.test": a, "y.test": b}, a) == 0
    assert store.cluster.cluster_version() == v1
    # y moves to a: only its epoch grows
    assert store.cluster.assign_leases({"y.test": a}, a, figures={"moves_total": 1}) == 1
    assert store.cluster.leases_of(a) == {"x.test": 1, "y.test": 2}
    assert store.cluster.cluster_version() == v1 + 1
    # both versions a worker reads at a slot start, in one statement
    watch = store.watch_list_version()
    assert store.cluster.versions() == (watch, v1 + 1)
    store.add_urls([NewUrl("http://w.test/new")])
    assert store.cluster.versions() == (store.watch_list_version(), v1 + 1) != (watch, v1 + 1)
    leases = {le.site: le for le in store.cluster.leases()}
    assert leases["y.test"].weight == 3.0 and leases["z.test"].worker_id is None
    state = store.cluster.cluster_state()
    assert state is not None and state.moves_total == 1 and state.live_workers == 2
    assert state.coordinator == a
    # another worker takes over: the old coordinator's writes are refused
    store.cluster.claim_coordinator(b)
    with pytest.raises(NotCoordinator):
        store.cluster.assign_leases({"x.test": b}, a)
    # b reports weights only for the sites it holds
    assert store.cluster.report_site_weights(a, {"x.test": 4.5, "z.test": 9.0}) == 1
    assert {le.site: le.weight for le in store.cluster.leases()}["x.test"] == 4.5
    # leaving frees a's leases, bumping their epochs
    assert store.cluster.deregister_worker(a) == 2
    leases = {le.site: le for le in store.cluster.leases()}
    assert leases["x.test"].worker_id is None and leases["x.test"].epoch == 2
    assert leases["y.test"].epoch == 3
    assert [w.worker_id for w in store.cluster.cluster_workers()] == [b]


def test_site_queries(store: Store) -> None:
    ids_a = add(store, 3, "a.test")
    ids_b = add(store, 2, "b.test:8080")
    store.remove_urls(["https://a.test/page/0"])
    assert store.cluster.site_url_counts() == {"a.test": 2, "b.test:8080": 2}
    ids, imp, site = store.cluster.active_urls_of(["b.test:8080"])
    assert ids.tolist() == ids_b and imp.tolist() == [1.0, 1.0]
    assert site == ["b.test:8080"] * 2
    ids, _, _ = store.cluster.active_urls_of(["a.test", "b.test:8080"])
    assert ids.tolist() == ids_a[1:] + ids_b


def _fenced_commit_setup(store: Store) -> tuple[str, str, list[int], list[int]]:
    a = store.cluster.register_worker(10.0, name="a")
    b = store.cluster.register_worker(10.0, name="b")
    xs = add(store, 2, "x.test")
    ys = add(store, 2, "y.test")
    store.cluster.claim_coordinator(a)
    store.cluster.assign_leases({"x.test": a, "y.test": a}, a)
    return a, b, xs, ys


def test_a_commit_under_a_stale_epoch_lands_nothing_for_that_site(store: Store) -> None:
    a, b, xs, ys = _fenced_commit_setup(store)
    fence = Fence(a, store.cluster.leases_of(a))  # what a polled under: both at epoch 1
    store.cluster.assign_leases({"x.test": b}, a)  # x moves to b (epoch 2) before a commits
    polls = [poll(i, "hit", content_hash=f"h{i}") for i in xs + ys]
    delta = custom_state(xs + ys, level=np.array([1.0, 2.0, 3.0, 4.0]))
    fenced = store.commit_slot(slot_record(1, polls), polls, delta, fence=fence)
    assert fenced == 2
    with store.engine.connect() as conn:
        logged = sorted(r[0] for r in conn.exec_driver_sql("SELECT url_id FROM poll_log"))
        hashes = dict(conn.exec_driver_sql("SELECT id, last_hash FROM urls").all())
        saved = sorted(r[0] for r in conn.exec_driver_sql("SELECT url_id FROM url_state"))
    assert logged == ys and saved == ys
    assert [hashes[i] for i in xs] == [None, None]
    assert [hashes[i] for i in ys] == [f"h{i}" for i in ys]
    # b, the new owner, commits x under its own epoch: it lands
    polls_b = [poll(i, "miss", content_hash=f"b{i}") for i in xs]
    assert (
        store.commit_slot(
            slot_record(1, polls_b), polls_b, fence=Fence(b, store.cluster.leases_of(b))
        )
        == 0
    )
    # without a fence (not a cluster) nothing is checked
    assert store.commit_slot(slot_record(2, polls), polls) == 0


def test_a_revoked_site_lands_its_slot_then_is_released_in_one_commit(store: Store) -> None:
    """A move between live workers: the site is asked of its owner (owner and epoch kept),
    so the slot in flight's polls and learning land; the next commit releases it."""
    a, _, xs, ys = _fenced_commit_setup(store)
    fence = Fence(a, store.cluster.leases_of(a))  # slot 1 polled x and y under epoch 1
    assert store.cluster.assign_leases({"x.test": a, "y.test": a}, a, revoke=["x.test"]) == 1
    assert store.cluster.held_leases(a) == ({"y.test": 1}, {"x.test": 1})
    asked = {lease.site: lease for lease in store.cluster.leases()}["x.test"]
    assert asked.worker_id == a and asked.revoked_age_s is not None and not asked.released
    polls = [poll(i, "hit", content_hash=f"h{i}") for i in xs + ys]
    delta = custom_state(xs + ys, level=np.array([1.0, 2.0, 3.0, 4.0]))
    assert store.commit_slot(slot_record(1, polls), polls, delta, fence=fence) == 0
    # slot 2 polls y only and releases x in its commit
    release = Fence(a, {"y.test": 1}, release={"x.test": 1})
    later = [poll(i, "miss", content_hash=f"h{i}") for i in ys]
    assert store.commit_slot(slot_record(2, later), later, fence=release) == 0
    with store.engine.connect() as conn:
        logged = sorted(r[0] for r in conn.exec_driver_sql("SELECT url_id FROM poll_log"))
        saved = sorted(r[0] for r in conn.exec_driver_sql("SELECT url_id FROM url_state"))
    assert logged == sorted(xs + ys + ys) and saved == sorted(xs + ys)
    x = {lease.site: lease for lease in store.cluster.leases()}["x.test"]
    assert x.worker_id is None and x.epoch == 2 and x.released and x.revoked_age_s is None
    assert store.cluster.held_leases(a) == ({"y.test": 1}, {})
    # a release of an epoch no longer held changes nothing
    assert store.commit_slot(slot_record(3, []), [], fence=release) == 0
    assert {lease.site: lease for lease in store.cluster.leases()}["x.test"].epoch == 2


def test_one_release_lets_go_of_sites_asked_and_sites_taken_back(store: Store) -> None:
    """A worker names the sites it polls no more with the epochs it polled them under; the
    lease rows say which is which: one asked of it (owner and epoch kept) is released, one
    taken back the old way (owner NULL, epoch bumped) is acknowledged, one that moved on
    (owner NULL, epoch bumped twice) and one it still holds unasked are left alone."""
    sites = [f"{s}.test" for s in ("w", "x", "y", "z")]
    for site in sites:
        add(store, 1, host=site)
    a = store.cluster.register_worker(4.0, name="a")
    store.cluster.claim_coordinator(a)
    store.cluster.assign_leases(dict.fromkeys(sites, a), a)  # all at epoch 1
    store.cluster.assign_leases(dict.fromkeys(sites, a), a, revoke=["x.test"])  # x asked
    with store.engine.begin() as conn:  # y taken back; z taken back and moved on since
        conn.execute(
            text("UPDATE cluster_leases SET worker_id = NULL, epoch = 2 WHERE site = 'y.test'")
        )
        conn.execute(
            text("UPDATE cluster_leases SET worker_id = NULL, epoch = 3 WHERE site = 'z.test'")
        )
    held = dict.fromkeys(sites, 1)
    assert store.cluster.release_leases(a, held) == 2
    after = {lease.site: lease for lease in store.cluster.leases()}
    assert after["x.test"].worker_id is None and after["x.test"].epoch == 2
    assert after["x.test"].released and after["x.test"].revoked_age_s is None
    assert after["y.test"].epoch == 2 and after["y.test"].released
    assert after["z.test"].epoch == 3 and not after["z.test"].released
    assert after["w.test"].worker_id == a and after["w.test"].epoch == 1  # never asked
    store.cluster.release_leases(a, {"x.test": 1})  # again (a retry): nothing moves
    again = {lease.site: lease for lease in store.cluster.leases()}["x.test"]
    assert again.worker_id is None and again.epoch == 2 and again.released


def test_reassignment_waits_for_a_commit_holding_the_lease(store: Store) -> None:
    """FOR SHARE: the coordinator's UPDATE of a lease blocks until the commit that read it
    is done, so no commit lands under a lease that moved during it."""
    a, b, xs, _ = _fenced_commit_setup(store)
    fence = Fence(a, store.cluster.leases_of(a))
    conn = store.engine.connect()
    trans = conn.begin()
    from crawler.store._cluster import fence_rows

    polls = [poll(i, "hit") for i in xs]
    kept, _, dropped, _ = fence_rows(conn, fence, polls, None)
    assert dropped == 0 and len(kept) == 2
    done = threading.Event()

    def move() -> None:
        store.cluster.assign_leases({"x.test": b}, a)
        done.set()

    mover = threading.Thread(target=move)
    mover.start()
    time.sleep(0.5)
    assert not done.is_set()  # waiting for the commit's share lock
    trans.commit()
    conn.close()
    mover.join(10)
    assert done.is_set()
    assert store.cluster.leases_of(b) == {"x.test": 2}


def test_load_url_states_returns_the_saved_rows(store: Store) -> None:
    ids = add(store, 4, "x.test")
    state = custom_state(ids, slot=9, level=np.array([1.0, 2.0, 3.0, 4.0]))
    store.save_scheduler_state(state)
    got = store.cluster.load_url_states("custom", [ids[3], ids[1], 99999])
    assert got is not None and got.slot == 9
    assert got.ids.tolist() == [ids[1], ids[3]]
    assert got.rows["level"].tolist() == [2.0, 4.0]
    assert store.cluster.load_url_states("nothing", ids) is None
    with store.engine.begin() as conn:  # a row damaged on disk: left out, the rest kept
        conn.execute(url_state.update().where(url_state.c.url_id == int(ids[1])).values(data=b"x"))
    got = store.cluster.load_url_states("custom", [ids[3], ids[1]])
    assert got is not None and got.ids.tolist() == [ids[3]]
    assert got.rows["level"].tolist() == [4.0]
