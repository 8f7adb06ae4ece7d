"""Hand-over of a site between two live workers: asked of its owner (owner and epoch
kept), released in the owner's commit, then handed over; a dead old owner; and the sessions
of a dead worker ended."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from crawler.service._coordinator import Coordinator
from crawler.store import LeaseRow, NewUrl, Store
from crawler.store._cluster import session_name
from tests.service.conftest import service_settings


@pytest.fixture
def db_backend() -> str:
    return "postgresql"


def _settings(database_url: str) -> Any:
    # a long slot: the hand-over grace (deadline + loop grace + slot + heartbeat) is far
    # longer than the test, so a site handed over within it was handed over by the ack
    return service_settings(
        database_url, cluster=True, capacity=4.0, heartbeat_s=0.2, worker_timeout_s=1.0,
        slot_seconds=60.0,
    )  # fmt: skip


def _revoked(store: Store) -> list[LeaseRow]:
    """The leases asked of their owners (a move between live workers)."""
    return [lease for lease in store.cluster.leases() if lease.revoked_age_s is not None]


def _spread_then_join(store: Store, database_url: str) -> tuple[Coordinator, str, str, str]:
    """Two workers share 6 sites; a third joins: sites are revoked from the first two."""
    store.add_urls([NewUrl(f"http://s{k}.test/p{i}") for k in range(6) for i in range(5)])
    a_id = store.cluster.register_worker(4.0, name="a")
    b_id = store.cluster.register_worker(4.0, name="b")
    coordinator = Coordinator(_settings(database_url), store, a_id)
    assert coordinator.handover_grace_s > 60
    assert coordinator.tick() is not None
    assert {lease.worker_id for lease in store.cluster.leases()} == {a_id, b_id}
    # as if it had read the database for its settling time already (it moves nothing
    # held before: tests/cluster/test_membership.py)
    coordinator._observing_since = time.monotonic() - coordinator.settle_s
    c_id = store.cluster.register_worker(4.0, name="c")
    done = coordinator.tick()
    assert done is not None and done.moved > 0
    assert len(_revoked(store)) == done.moved
    return coordinator, a_id, b_id, c_id


def test_a_revoked_site_is_handed_over_once_its_old_owner_acknowledges(
    store: Store, database_url: str
) -> None:
    coordinator, _, _, c_id = _spread_then_join(store, database_url)
    try:
        before = {lease.site: lease for lease in store.cluster.leases()}
        revoked = {lease.site for lease in _revoked(store)}
        assert all(before[s].worker_id is not None for s in revoked)  # owner and epoch kept
        # not released: the sites stay with their owners (the grace is minutes long here)
        assert coordinator.tick() is not None
        assert {lease.site for lease in _revoked(store)} == revoked
        assert {s: (x.worker_id, x.epoch) for s, x in before.items()} == {
            x.site: (x.worker_id, x.epoch) for x in store.cluster.leases()
        }
        # the old owners release them in a slot's commit, with the epochs they held
        from crawler.store import Fence
        from tests.store._helpers import slot_record

        for owner in {before[s].worker_id for s in revoked}:
            assert owner is not None
            mine = {s: before[s].epoch for s in revoked if before[s].worker_id == owner}
            wrong = {s: e - 1 for s, e in mine.items()}  # an older epoch: not this one
            store.commit_slot(slot_record(1, []), [], fence=Fence(owner, {}, release=wrong))
            assert not any(x.released for x in store.cluster.leases() if x.site in mine)
            store.commit_slot(slot_record(1, []), [], fence=Fence(owner, {}, release=mine))
        released = {x.site: x for x in store.cluster.leases() if x.released}
        assert set(released) == revoked
        assert all(released[s].epoch == before[s].epoch + 1 for s in revoked)
        assert coordinator.tick() is not None
        after = {lease.site: lease for lease in store.cluster.leases()}
        assert {after[s].worker_id for s in revoked} == {c_id}
        assert all(after[s].epoch == before[s].epoch + 2 for s in revoked)
        assert not any(lease.released for lease in after.values())
    finally:
        coordinator.stop()


def test_a_site_revoked_from_a_worker_now_dead_is_handed_over_at_once(
    store: Store, database_url: str
) -> None:
    coordinator, a_id, b_id, c_id = _spread_then_join(store, database_url)
    try:
        revoked = {lease.site for lease in _revoked(store)}
        # only a's and c's heartbeats go on: b (and a's sites if it was the one) wait...
        sources = dict(coordinator._revoked_from)
        assert set(sources) == revoked
        time.sleep(1.3)  # past the worker timeout for everybody
        for wid in (a_id, c_id):
            store.cluster.heartbeat(wid, 0, 0.0, None, 0)
        assert coordinator.tick() is not None
        after = {lease.site: lease for lease in store.cluster.leases()}
        for site in revoked:
            if sources[site] == b_id:  # its old owner is dead: placed anew at once
                assert after[site].worker_id in (a_id, c_id)
            else:  # a is alive and has not released it: the site stays asked of a
                assert after[site].worker_id == a_id
                assert after[site].revoked_age_s is not None
    finally:
        coordinator.stop()


def test_the_sessions_of_a_dead_worker_are_ended(store: Store, database_url: str) -> None:
    """A paused worker's session holding its lease rows FOR SHARE is ended, so the
    coordinator can move its sites."""
    store.add_urls([NewUrl("http://s0.test/p0")])
    a_id = store.cluster.register_worker(4.0, name="a")
    coordinator = Coordinator(_settings(database_url), store, a_id)
    try:
        assert coordinator.tick() is not None
        engine = create_engine(
            store.engine.url, connect_args={"application_name": session_name(a_id)}
        )
        conn = engine.connect()
        conn.execute(text("SELECT * FROM cluster_leases FOR SHARE")).all()  # held, open
        assert store.cluster.end_worker_sessions(["someone-else"]) == 0
        assert store.cluster.end_worker_sessions([a_id]) == 1
        with pytest.raises(Exception):  # noqa: B017 - the driver's "terminated" error
            conn.execute(text("SELECT 1"))
        conn.invalidate()
        engine.dispose()
    finally:
        coordinator.stop()


def test_a_slot_is_fenced_with_the_leases_of_its_own_start(store: Store, database_url: str) -> None:
    """A commit retried after the next slot's sync must not carry the new epoch of a site
    lost and regained meanwhile."""
    from types import SimpleNamespace

    from crawler.service._cluster import ClusterMember

    member = ClusterMember(_settings(database_url), store)
    member.worker_id = "w"
    scheduler: Any = SimpleNamespace(slot=7)
    member.leases = {"a.test": 3, "b.test": 1}
    member._note_fence(scheduler)  # slot 8 polls under epoch 3 of a.test
    scheduler.slot = 8
    member.leases = {"a.test": 5, "b.test": 1}  # a.test lost and regained at epoch 5
    member._note_fence(scheduler)
    assert dict(member.fence(8).leases) == {"a.test": 3, "b.test": 1}
    assert dict(member.fence(8).leases) == {"a.test": 3, "b.test": 1}  # a retry: the same
    assert dict(member.fence(9).leases) == {"a.test": 5, "b.test": 1}  # 8 committed
    assert 8 not in member._fences
    assert dict(member.fence(10).leases) == {}  # unknown: nothing lands
    assert dict(member.fence().leases) == {"a.test": 5, "b.test": 1}
