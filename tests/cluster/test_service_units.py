"""The cluster's worker and coordinator pieces, one at a time."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from crawler import schedulers
from crawler.service._cluster import multiplier_of
from crawler.service._coordinator import Coordinator, shared_level_weights
from crawler.service._watch import merge_saved
from crawler.settings import SettingsError, load_settings
from crawler.store import NewUrl, NotCoordinator, ServiceLockHeld, Store
from crawler.store._lock import NAMESPACE, lock_key
from tests.service.conftest import service_settings


def _learned(ids: list[int], slots: int = 60, seed: int = 1) -> schedulers.Scheduler:
    sched = schedulers.create("bayes", capacity=3.0, seed=seed)
    sched.add(np.array(ids))
    rng = np.random.default_rng(seed)
    p = np.linspace(0.05, 0.9, len(ids))
    index = {i: k for k, i in enumerate(ids)}
    for _ in range(slots):
        chosen = sched.select()
        hits = rng.random(chosen.size) < p[[index[int(i)] for i in chosen]]
        sched.feedback(chosen, hits)
    return sched


def test_merge_saved_adds_the_saved_rows_exactly() -> None:
    old_owner = _learned(list(range(1, 11)))
    saved = old_owner.state()
    moved = np.arange(1, 6)
    keep = np.isin(saved.ids, moved)
    kept = old_owner.persistent_fields()
    part = dataclasses.replace(
        saved,
        ids=saved.ids[keep],
        rows={k: np.asarray(v)[keep] for k, v in saved.rows.items() if "url_" + k in kept},
    )
    new_owner = _learned(list(range(11, 21)), seed=2)
    before = new_owner.state()
    merged = merge_saved(new_owner, part, seed=0)
    assert merged is not None
    after = merged.state()
    assert after.ids.tolist() == [*range(1, 6), *range(11, 21)]
    for key in merged.persistent_fields():
        field = key.removeprefix("url_")
        got = np.asarray(after.rows[field])
        np.testing.assert_array_equal(got[:5], np.asarray(part.rows[field]))
        np.testing.assert_array_equal(got[5:], np.asarray(before.rows[field]))
    # the merged scheduler carries on learning and selecting
    for _ in range(10):
        chosen = merged.select()
        assert 0 < chosen.size <= 3
        merged.feedback(chosen, np.ones(chosen.size, bool))
    x = merged.frequencies()[1]
    assert np.all(np.isfinite(x)) and 0 < x.sum() <= 15
    # a saved state missing a kept field cannot be merged (another release)
    bad = dataclasses.replace(part, rows={"importance": part.rows["importance"]})
    assert merge_saved(new_owner, bad) is None


def test_multiplier_of_reads_the_water_level() -> None:
    sched = _learned(list(range(1, 41)), slots=200)
    u = multiplier_of(sched)
    assert u is not None and u > 0
    assert multiplier_of(schedulers.create("uniform", capacity=2.0)) is None


def test_shared_level_weights() -> None:
    n = np.array([10.0, 10.0, 10.0])
    # nothing reported: the uniform share, summing to the capacity
    w = shared_level_weights(n, np.zeros(3), np.full(3, np.nan), 6.0)
    np.testing.assert_allclose(w, [2.0, 2.0, 2.0])
    # equal reports at different owner levels: the squeezed owner's site weighs more
    w = shared_level_weights(n, np.array([3.0, 3.0, 3.0]), np.array([2.0, 1.0, 1.0]), 12.0)
    assert w.sum() == pytest.approx(12.0)
    assert w[0] == pytest.approx(2 * w[1])
    # a site not reported yet gets the mean rate mass per URL of the others
    w = shared_level_weights(n, np.array([3.0, 1.0, 0.0]), np.full(3, np.nan), 6.0)
    assert w[2] == pytest.approx((w[0] + w[1]) / 2)
    # caps: no site gets more than a poll per URL per slot
    w = shared_level_weights(np.array([2.0, 10.0]), np.array([5.0, 1.0]), np.ones(2), 5.0)
    assert w[0] == pytest.approx(2.0) and w.sum() == pytest.approx(5.0)
    # more capacity than URLs: every URL every slot
    np.testing.assert_allclose(shared_level_weights(n, np.ones(3), np.ones(3), 100.0), n)


def test_cluster_needs_postgresql_and_a_capacity(tmp_path: Any) -> None:
    with pytest.raises(SettingsError, match="cluster mode needs PostgreSQL"):
        load_settings({"cluster": True, "capacity": 5.0,
                       "database_url": f"sqlite:///{tmp_path / 'c.db'}"})  # fmt: skip
    with pytest.raises(SettingsError, match="needs capacity"):
        load_settings({"cluster": True, "database_url": "postgresql://x@127.0.0.1/db"})
    settings = load_settings(
        {"cluster": True, "capacity": 5.0, "database_url": "postgresql://x@127.0.0.1/db"}
    )
    assert settings.effective_worker_timeout() == pytest.approx(3 * 2.0 + 2.0)


@pytest.fixture
def db_backend() -> str:
    return "postgresql"


def _cluster_settings(database_url: str) -> Any:
    return service_settings(
        database_url, cluster=True, capacity=4.0, heartbeat_s=0.2, worker_timeout_s=1.0
    )


def test_coordinator_failover_when_its_connection_dies(store: Store, database_url: str) -> None:
    store.add_urls([NewUrl(f"http://s{k}.test/p{i}") for k in range(4) for i in range(5)])
    settings = _cluster_settings(database_url)
    a_id = store.cluster.register_worker(4.0, name="a")
    b_id = store.cluster.register_worker(4.0, name="b")
    a, b = Coordinator(settings, store, a_id), Coordinator(settings, store, b_id)
    try:
        first = a.tick()
        assert first is not None and first.live_workers == 2 and first.sites == 4
        assert b.tick() is None  # the lock is a's
        leases = store.cluster.leases()
        assert {lease.worker_id for lease in leases} == {a_id, b_id}  # spread over both
        assert all(lease.epoch == 1 for lease in leases)
        # a's lock session is killed (its connection dies)
        held = (
            "FROM pg_locks WHERE locktype = 'advisory' AND classid = CAST(:ns AS oid) "
            "AND objid = CAST(:key AS oid) AND objsubid = 2 AND granted"
        )
        with store.engine.connect() as conn:
            schema = conn.execute(text("SELECT current_schema()")).scalar()
            lock = {"ns": NAMESPACE, "key": lock_key(str(schema), "coordinator") % 2**32}
            killed = conn.execute(text(f"SELECT pg_terminate_backend(pid) {held}"), lock).all()
            assert len(killed) == 1
            # the termination is asynchronous: the server frees the lock once the session
            # has ended, after pg_terminate_backend returned
            deadline = time.monotonic() + 10
            while conn.execute(text(f"SELECT count(*) {held}"), lock).scalar():
                assert time.monotonic() < deadline, "the lock outlived its session"
                time.sleep(0.01)
        assert b.tick() is not None  # b's next try takes over
        assert a.tick() is None  # a finds the lock taken and steps down
        assert not a.is_coordinator and b.is_coordinator
        state = store.cluster.cluster_state()
        assert state is not None and state.coordinator == b_id
        with pytest.raises(NotCoordinator):  # a's late writes are refused
            store.cluster.assign_leases({"s0.test": a_id}, a_id)
        # a's heartbeat stops: after the timeout its sites move to b, epochs bumped
        time.sleep(1.2)
        store.cluster.heartbeat(b_id, 0, 0.0, None, 0)
        done = b.tick()
        assert done is not None and done.live_workers == 1
        after = store.cluster.leases()
        assert {lease.worker_id for lease in after} == {b_id}
        moved = {lease.site for lease in leases if lease.worker_id == a_id}
        assert all(lease.epoch == 2 for lease in after if lease.site in moved)
        assert all(lease.epoch == 1 for lease in after if lease.site not in moved)
    finally:
        a.stop()
        b.stop()


def test_a_paused_coordinator_loses_its_lock(store: Store, database_url: str) -> None:
    """The server ends an idle coordinator lock session (SIGSTOP, a hang)."""
    lock = store.acquire_service_lock(role="coordinator")
    lock.end_session_when_idle(0.5)
    try:
        with pytest.raises(ServiceLockHeld):  # held, while the holder is not yet idle
            store.acquire_service_lock(role="coordinator")
        # paused, the lock not touched: once the server ends the idle session (0.5 s),
        # another process takes the lock (no ServiceLockHeld; a fixed 1.5 s wait before),
        # and the woken holder then finds it taken
        give_up = time.monotonic() + 10.0
        while True:
            try:
                other = store.acquire_service_lock(role="coordinator")
                break
            except ServiceLockHeld:
                assert time.monotonic() < give_up, "the idle session was never ended"
                time.sleep(0.05)
        try:
            assert not lock.ensure()
        finally:
            other.release()
    finally:
        lock.release()


def test_a_site_heavier_than_any_worker_is_reported_as_a_shortfall(
    store: Store, database_url: str
) -> None:
    """Weights sum to the live capacity on one shared level, so a shortfall means the sites
    do not pack: here one site wants more than any worker can give."""
    store.add_urls([NewUrl(f"http://big.test/p{i}") for i in range(10)])
    store.add_urls([NewUrl("http://small.test/p0")])
    settings = _cluster_settings(database_url)
    a_id = store.cluster.register_worker(1.0, name="a")
    b_id = store.cluster.register_worker(1.0, name="b")
    coordinator = Coordinator(settings, store, a_id)
    try:
        done = coordinator.tick()
        assert done is not None and done.total_capacity == 2.0
        assert done.total_weight == pytest.approx(2.0)
        state = store.cluster.cluster_state()
        assert state is not None
        # one more worker, big enough for the big site: 10 of the 11 URLs' share of 2
        assert state.shortfall_workers == 1
        assert state.shortfall_capacity == pytest.approx(2.0 * 10 / 11)
        # every site still has an owner (the overflow goes where the most room is)
        assert {lease.worker_id for lease in store.cluster.leases()} <= {a_id, b_id}
        assert all(lease.worker_id is not None for lease in store.cluster.leases())
    finally:
        coordinator.stop()
