"""The outbox in the store: events written in the slot's commit (and discovery's), fenced
with the polls, fanned out by filters, claimed in order per URL; SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from crawler.store import (
    DEAD,
    DELIVERED,
    PENDING,
    DeliveryOutcome,
    DestinationRow,
    DestinationSpec,
    DiscoveryStore,
    EventRow,
    Fence,
    Found,
    OutboxStore,
    SlotDiscovery,
    SourceSpec,
    Store,
)
from crawler.store.models import events
from tests.store._helpers import add, poll, slot_record

HOLD = timedelta(seconds=60)


def every(_: DestinationRow, __: EventRow) -> bool:
    return True


def event_rows(store: Store) -> list[tuple[str, int | None, int | None]]:
    query = select(events.c.type, events.c.url_id, events.c.slot).order_by(events.c.id)
    with store.engine.connect() as conn:
        return [(t, u, s) for t, u, s in conn.execute(query)]


def test_one_event_per_change_in_the_slots_commit(store: Store) -> None:
    ids = add(store, 4)
    polls = [
        poll(ids[0], "hit", old_hash="a", content_hash="b", snapshot="text b"),
        poll(ids[1], "miss", content_hash="c"),
        poll(ids[2], "error", error_kind="dns"),
        poll(ids[3], "hit", old_hash=None, content_hash="d"),
    ]
    store.commit_slot(slot_record(5, polls), polls)
    assert event_rows(store) == [("page.changed", ids[0], 5), ("page.changed", ids[3], 5)]
    outbox = OutboxStore(store)
    assert outbox.event_count("page.changed") == 2
    # a refused commit writes no event
    bad = [poll(ids[0], "hit", old_hash="b", content_hash="e"), poll(ids[0], "weird")]
    with pytest.raises(ValueError):
        store.commit_slot(slot_record(6, bad), bad)
    assert outbox.event_count() == 2


def test_fenced_polls_make_no_events(store: Store) -> None:
    a = store.register_worker(10.0, name="a")
    b = store.register_worker(10.0, name="b")
    xs = add(store, 2, "x.test")
    ys = add(store, 2, "y.test")
    store.claim_coordinator(a)
    store.assign_leases({"x.test": a, "y.test": a}, a)
    fence = Fence(a, store.leases_of(a))
    store.assign_leases({"x.test": b}, a)  # x moved before a commits
    polls = [poll(i, "hit", content_hash=f"h{i}") for i in xs + ys]
    assert store.commit_slot(slot_record(1, polls), polls, fence=fence) == 2
    assert sorted(u for _, u, _ in event_rows(store) if u is not None) == ys


def test_discovered_pages_make_events_with_their_rows(store: Store) -> None:
    ds = DiscoveryStore(store)
    sid, _ = ds.add_source(SourceSpec("https://example.org/news/"))
    now = datetime.now(UTC)
    found = [Found(f"https://example.org/n/{i}", sid, now, 1, 1) for i in range(3)]
    ds.record_slot(SlotDiscovery(polls={sid: 3}, found=found + found[:1]))
    ds.record_slot(SlotDiscovery(polls={sid: 1}, found=found[:1]))  # known: no new event
    assert [t for t, _, _ in event_rows(store)] == ["page.discovered"] * 3
    outbox = OutboxStore(store)
    outbox.add_destination(DestinationSpec("https://hooks.example.org/", "whsec_x"))
    outbox.fan_out(every)
    due = outbox.claim_due(10, HOLD)
    assert sorted(d.event.url or "" for d in due) == [f.url for f in found]


def test_fan_out_filters_and_order_per_url(store: Store) -> None:
    ids = add(store, 2)
    outbox = OutboxStore(store)
    all_id = outbox.add_destination(DestinationSpec("https://a.example/", "whsec_a"))
    none_id = outbox.add_destination(
        DestinationSpec("https://b.example/", "whsec_b", event_types=("page.discovered",))
    )

    def by_types(d: DestinationRow, e: EventRow) -> bool:
        return not d.spec.event_types or e.type in d.spec.event_types

    for slot in (1, 2, 3):  # three changes of each URL
        polls = [poll(i, "hit", old_hash=f"{slot - 1}", content_hash=f"{slot}") for i in ids]
        store.commit_slot(slot_record(slot, polls), polls)
    assert outbox.fan_out(by_types, batch=4) == 4
    assert outbox.fan_out(by_types, batch=4) == 2  # bounded batches
    assert outbox.fan_out(by_types) == 0
    assert outbox.backlog()[0] == 6
    first = outbox.claim_due(10, HOLD)
    # only the head of each URL is due, and only for the destination that wants changes
    assert [(d.event.url_id, d.event.slot, d.destination_id) for d in first] == [
        (ids[0], 1, all_id), (ids[1], 1, all_id),
    ]  # fmt: skip
    assert outbox.claim_due(10, HOLD) == []  # claimed: not due again, nor the next ones
    assert outbox.release_claims() == 2
    # a destination's share: at most share - busy of its sends at once
    assert len(outbox.claim_due(10, HOLD, share=3, busy={all_id: 2})) == 1
    assert len(outbox.claim_due(10, HOLD, share=3, busy={})) == 1  # the other URL's head
    assert outbox.claim_due(10, HOLD) == []
    now = datetime.now(UTC)
    outbox.record(
        [
            DeliveryOutcome(first[0].event.id, all_id, DELIVERED, now, 204),
            DeliveryOutcome(first[1].event.id, all_id, PENDING, now + timedelta(hours=1), 500, "x"),
        ]
    )
    second = outbox.claim_due(10, HOLD)
    assert [(d.event.url_id, d.event.slot) for d in second] == [(ids[0], 2)]  # ids[1] waits
    assert none_id not in {d.destination_id for d in first + second}
    # a deliverer that died: its claims are due again at once
    assert outbox.release_claims() == 1
    assert [d.event.id for d in outbox.claim_due(10, HOLD)] == [second[0].event.id]
    # dead letters are listed, and replay makes them due again
    outbox.record([DeliveryOutcome(second[0].event.id, all_id, DEAD, now, 500, "down")])
    failed = outbox.list_deliveries(failed=True)
    assert [(r.event_id, r.status, r.attempts) for r in failed] == [(second[0].event.id, DEAD, 1)]
    assert failed[0].as_json()["id"] == f"msg_{second[0].event.id}"
    assert outbox.replay() == 1
    assert outbox.list_deliveries(failed=True) == []
    assert [d.event.id for d in outbox.claim_due(10, HOLD)] == [second[0].event.id]


def test_disabled_and_paused_destinations_get_nothing(store: Store) -> None:
    ids = add(store, 1)
    outbox = OutboxStore(store)
    gone = outbox.add_destination(DestinationSpec("https://a.example/", "whsec_a"))
    paused = outbox.add_destination(DestinationSpec("https://b.example/", "whsec_b"))
    polls = [poll(ids[0], "hit", content_hash="h")]
    store.commit_slot(slot_record(1, polls), polls)
    outbox.fan_out(every)
    outbox.disable_destination(gone, "answered 410")
    outbox.pause_destination(paused, datetime.now(UTC) + timedelta(hours=1))
    assert outbox.claim_due(10, HOLD) == []
    assert outbox.destination(gone).disabled_reason == "answered 410"  # type: ignore[union-attr]
    outbox.pause_destination(paused, datetime.now(UTC) - timedelta(seconds=1))
    assert [d.destination_id for d in outbox.claim_due(10, HOLD)] == [paused]
    assert outbox.remove_destination(paused) and not outbox.remove_destination(paused)
    assert [d.id for d in outbox.destinations()] == [gone]


def test_prune_keeps_what_is_not_delivered(store: Store) -> None:
    ids = add(store, 3)
    outbox = OutboxStore(store)
    dest = outbox.add_destination(DestinationSpec("https://a.example/", "whsec_a"))
    polls = [poll(i, "hit", content_hash="h") for i in ids]
    store.commit_slot(slot_record(1, polls), polls)
    outbox.fan_out(every)
    due = outbox.claim_due(10, HOLD)
    now = datetime.now(UTC)
    outbox.record(
        [
            DeliveryOutcome(due[0].event.id, dest, DELIVERED, now, 204),
            DeliveryOutcome(due[1].event.id, dest, DEAD, now, 500, "x"),
        ]
    )  # due[2] stays pending
    assert outbox.prune(now - timedelta(days=1)) == 0  # too young
    assert outbox.prune(now + timedelta(seconds=1)) == 1
    assert outbox.event_count() == 2
    assert {r.status for r in outbox.list_deliveries()} == {DEAD, PENDING}
