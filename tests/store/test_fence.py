"""The service lock's fencing token: a holder whose generation is stale commits nothing."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import func, select, text

from crawler.store import (
    FencedOut,
    Found,
    ServiceLockHeld,
    SlotDiscovery,
    SourceSpec,
    Store,
)
from crawler.store._lock import lock_path
from crawler.store.models import discovered, poll_log, service_fence, slots, url_state, urls
from tests.store._helpers import add, custom_state, poll, slot_record


def _count(store: Store, table: object) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())  # type: ignore[arg-type]


def _url_rows(store: Store) -> list[tuple[object, ...]]:
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(urls).order_by(urls.c.id))]


def _state_rows(store: Store) -> list[tuple[object, ...]]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(url_state).order_by(url_state.c.url_id))
        return [(r.url_id, bytes(r.data)) for r in rows]


def test_a_commit_under_a_stale_generation_lands_nothing(database_url: str) -> None:
    """A holds the lock and commits; its lock goes (here: released, as a dead session
    releases it) while A carries on; B takes the lock and its fence. A's next commit, whole
    slot with polls, a change, an error and scheduler rows, writes nothing at all."""
    with Store(database_url) as a, Store(database_url) as b:
        ids = add(a, 3)
        lock_a = a.acquire_service_lock()
        generation = a.claim_service_fence(lock_a)
        first = [poll(ids[0], "baseline", content_hash="h0"), poll(ids[1], "miss")]
        a.commit_slot(slot_record(1, first), first, custom_state(ids, level=np.ones(3)))
        before = (_count(a, poll_log), _count(a, slots), _url_rows(a), _state_rows(a))
        lock_a.release()
        with b.acquire_service_lock() as lock_b:
            assert b.claim_service_fence(lock_b) == generation + 1
            assert not lock_b.took_over  # A's release was clean: B need not wait for it
            stale = [
                poll(ids[0], "hit", content_hash="h1", old_hash="h0", snapshot="new"),
                poll(ids[1], "miss"),
                poll(ids[2], "error", error_kind="timeout", error="timed out"),
            ]
            with pytest.raises(FencedOut, match="another process took this database"):
                a.commit_slot(
                    slot_record(2, stale), stale, custom_state(ids, slot=2, level=np.zeros(3))
                )
            assert (_count(a, poll_log), _count(a, slots), _url_rows(a), _state_rows(a)) == before
            # the new holder commits as usual, and its check is recorded
            b.commit_slot(
                slot_record(2, stale), stale, custom_state(ids, slot=2, level=np.zeros(3))
            )
            assert _count(b, poll_log) == 5
            with b.engine.connect() as conn:
                row = conn.execute(select(service_fence)).one()
            assert row.generation == generation + 1 and row.checked_at is not None
            assert f"pid={os.getpid()}" in (row.holder or "")


def test_discovery_records_of_a_stale_holder_land_nothing(database_url: str) -> None:
    with Store(database_url) as a, Store(database_url) as b:
        lock_a = a.acquire_service_lock()
        a.claim_service_fence(lock_a)
        ds = a.discovery
        news, _ = ds.add_source(SourceSpec("https://example.org/news/", auto_watch=True))
        found = Found("https://example.org/news/a", news, datetime.now(UTC), 1, 1)
        lock_a.release()
        with b.acquire_service_lock() as lock_b:
            b.claim_service_fence(lock_b)
            with pytest.raises(FencedOut):
                ds.record_slot(SlotDiscovery(polls={news: 1}, found=[found]))
        assert _count(a, discovered) == 0 and _count(a, urls) == 0
        assert ds.sources()[0].polls == 0


def test_shared_holders_bump_the_generation_but_are_fenced_by_leases(
    database_url: str,
) -> None:
    """Cluster workers take the lock shared: their start fences out a single service that
    lost its lock, and their own commits are not checked against the generation."""
    with Store(database_url) as single, Store(database_url) as w1, Store(database_url) as w2:
        (uid,) = add(single, 1)
        lock = single.acquire_service_lock()
        single.claim_service_fence(lock)
        lock.release()
        with w1.acquire_service_lock(shared=True) as s1, w2.acquire_service_lock(shared=True) as s2:
            w1.claim_service_fence(s1)
            w2.claim_service_fence(s2)
            assert w1.service_fence is None and w2.service_fence is None
            polls = [poll(uid, "miss")]
            with pytest.raises(FencedOut):
                single.commit_slot(slot_record(1, polls), polls)
            w1.commit_slot(slot_record(1, polls), polls)  # not checked: generation moved on
        assert _count(single, poll_log) == 1


def test_a_holder_whose_fence_moved_does_not_take_the_lock_back(
    database_url: str, db_backend: str
) -> None:
    """A's lock went; B came, claimed the fence and left. A finds the lock free, but what B
    committed meanwhile is not in A's memory: ``ensure`` says lost, and A does not keep
    the lock. (SQLite: B got in because A's lock file was deleted.)"""
    with Store(database_url) as a, Store(database_url) as b, Store(database_url) as c:
        lock_a = a.acquire_service_lock()
        a.claim_service_fence(lock_a)
        assert lock_a.ensure()
        if db_backend == "postgresql":
            assert lock_a._conn is not None
            backend = lock_a._conn.execute(text("SELECT pg_backend_pid()")).scalar()
            with c.engine.connect() as conn:
                conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": backend})
        else:
            path = lock_path(a.engine)
            assert isinstance(path, Path)
            path.unlink()
        deadline = time.monotonic() + 10
        while True:
            try:
                lock_b = b.acquire_service_lock()
                break
            except ServiceLockHeld:  # the termination is asynchronous
                assert time.monotonic() < deadline
                time.sleep(0.02)
        b.claim_service_fence(lock_b)
        assert lock_b.took_over  # A did not let go: it may still be finishing a slot
        assert not lock_a.ensure()  # B still holds it
        lock_b.release()  # B is gone
        assert not lock_a.ensure()  # free, but fenced out
        if db_backend == "postgresql":  # and A did not keep it
            c.acquire_service_lock().release()


def test_a_new_holder_waits_for_a_commit_in_flight(database_url: str) -> None:
    """The check's row lock orders a commit in flight before the next holder's claim: the
    commit lands before the new holder starts (and reads the saved state), or not at all."""
    with Store(database_url) as a, Store(database_url) as b:
        (uid,) = add(a, 1)
        lock_a = a.acquire_service_lock()
        generation = a.claim_service_fence(lock_a)
        assert a.service_fence is not None
        lock_a.release()
        lock_b = b.acquire_service_lock()
        with a.engine.connect() as conn:  # A's commit, checked and not yet committed
            a.check_service_fence(conn)
            started = time.monotonic()
            claimed: list[int] = []
            claimer = threading.Thread(target=lambda: claimed.append(b.claim_service_fence(lock_b)))
            claimer.start()
            time.sleep(0.5)
            assert not claimed  # waits for A's transaction (SQLite: for its write lock)
            conn.commit()
            claimer.join(10)
            assert claimed == [generation + 1]
            assert time.monotonic() - started >= 0.5
        with pytest.raises(FencedOut):
            polls = [poll(uid, "miss")]
            a.commit_slot(slot_record(1, polls), polls)
        lock_b.release()
