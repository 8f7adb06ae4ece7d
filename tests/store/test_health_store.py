"""Health events in the slot's commit: written with the slot, dropped with the polls a
cluster fence drops, and the judge's state derived from stored columns (both databases)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from sqlalchemy import select

from crawler.store import Fence, HealthEvent, Store
from crawler.store.models import events
from tests.store._helpers import add, poll, slot_record

STOPPED = "page.stopped_changing"


def _commit(store: Store, no: int, polls: list, health: list[HealthEvent], **kw: object) -> int:
    slot = dataclasses.replace(slot_record(no, polls), health_events=tuple(health))
    return store.commit_slot(slot, polls, **kw)  # type: ignore[arg-type]


def _event(kind: str, uid: int) -> HealthEvent:
    return HealthEvent(kind, uid, datetime.now(UTC), {"detected_at": "x"})


def test_health_events_are_written_and_the_state_is_derived(store: Store) -> None:
    a, b, c = add(store, 3)
    _commit(store, 5, [poll(a, "hit", content_hash="a1"), poll(b, "hit", content_hash="b1")], [])
    _commit(store, 6, [poll(a, "hit", content_hash="a2"), poll(c, "error")], [])
    _commit(store, 9, [poll(a, "miss"), poll(b, "miss")], [_event(STOPPED, a), _event(STOPPED, b)])
    with store.engine.connect() as conn:
        rows = conn.execute(select(events.c.type, events.c.url_id, events.c.slot)).all()
    assert sorted((t, u, s) for t, u, s in rows if t == STOPPED) == [
        (STOPPED, a, 9),
        (STOPPED, b, 9),
    ]
    assert store.health_state(STOPPED) == {a: (6, 2, True), b: (5, 1, True)}
    # b changes again: its alarm is re-armed (the event was before its newest change)
    _commit(store, 12, [poll(b, "hit", content_hash="b2")], [])
    assert store.health_state(STOPPED) == {a: (6, 2, True), b: (12, 2, False)}


def test_a_fence_drops_the_health_events_of_the_polls_it_drops(store: Store) -> None:
    w = store.cluster.register_worker(10.0, name="w")
    v = store.cluster.register_worker(10.0, name="v")
    xs = add(store, 1, "x.test")
    ys = add(store, 1, "y.test")
    store.cluster.claim_coordinator(w)
    store.cluster.assign_leases({"x.test": w, "y.test": w}, w)
    fence = Fence(w, store.cluster.leases_of(w))
    store.cluster.assign_leases({"x.test": v}, w)  # x moved before w commits
    polls = [poll(xs[0], "error"), poll(ys[0], "error")]
    health = [_event("page.failing", xs[0]), _event("page.failing", ys[0])]
    assert _commit(store, 1, polls, health, fence=fence) == 1
    with store.engine.connect() as conn:
        kept = conn.execute(select(events.c.url_id).where(events.c.type == "page.failing")).all()
    assert [u for (u,) in kept] == ys
