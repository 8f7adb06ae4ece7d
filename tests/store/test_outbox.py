"""The outbox in the store: events written in the slot's commit (and discovery's), fenced
with the polls, fanned out by filters, claimed in order per URL; SQLite and PostgreSQL."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, insert, select, text

from crawler.store import (
    DEAD,
    DELIVERED,
    PENDING,
    DeliveryOutcome,
    DestinationRow,
    DestinationSpec,
    EventRow,
    Fence,
    Found,
    SlotDiscovery,
    SourceSpec,
    Store,
)
from crawler.store.models import deliveries, events
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
    outbox = store.outbox
    assert outbox.event_count("page.changed") == 2
    # a refused commit writes no event
    bad = [poll(ids[0], "hit", old_hash="b", content_hash="e"), poll(ids[0], "weird")]
    with pytest.raises(ValueError):
        store.commit_slot(slot_record(6, bad), bad)
    assert outbox.event_count() == 2


def test_fenced_polls_make_no_events(store: Store) -> None:
    a = store.cluster.register_worker(10.0, name="a")
    b = store.cluster.register_worker(10.0, name="b")
    xs = add(store, 2, "x.test")
    ys = add(store, 2, "y.test")
    store.cluster.claim_coordinator(a)
    store.cluster.assign_leases({"x.test": a, "y.test": a}, a)
    fence = Fence(a, store.cluster.leases_of(a))
    store.cluster.assign_leases({"x.test": b}, a)  # x moved before a commits
    polls = [poll(i, "hit", content_hash=f"h{i}") for i in xs + ys]
    assert store.commit_slot(slot_record(1, polls), polls, fence=fence) == 2
    assert sorted(u for _, u, _ in event_rows(store) if u is not None) == ys


def test_discovered_pages_make_events_with_their_rows(store: Store) -> None:
    ds = store.discovery
    sid, _ = ds.add_source(SourceSpec("https://example.org/news/"))
    now = datetime.now(UTC)
    found = [Found(f"https://example.org/n/{i}", sid, now, 1, 1) for i in range(3)]
    ds.record_slot(SlotDiscovery(polls={sid: 3}, found=found + found[:1]))
    ds.record_slot(SlotDiscovery(polls={sid: 1}, found=found[:1]))  # known: no new event
    assert [t for t, _, _ in event_rows(store)] == ["page.discovered"] * 3
    outbox = store.outbox
    outbox.add_destination(DestinationSpec("https://hooks.example.org/", "whsec_x"))
    outbox.fan_out(every)
    due = outbox.claim_due(10, HOLD)
    assert sorted(d.event.url or "" for d in due) == [f.url for f in found]


def test_fan_out_filters_and_order_per_url(store: Store) -> None:
    ids = add(store, 2)
    outbox = store.outbox
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
    outbox = store.outbox
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
    outbox = store.outbox
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


def heads_are_right(store: Store) -> None:
    """The flag ``head`` is set exactly on each (destination, URL)'s smallest pending
    delivery (and on every pending delivery of an event without a URL)."""
    query = select(
        deliveries.c.event_id,
        deliveries.c.destination_id,
        deliveries.c.url_id,
        deliveries.c.status,
        deliveries.c.head,
    )
    with store.engine.connect() as conn:
        rows = conn.execute(query).all()
    least: dict[tuple[int, int], int] = {}
    for e, d, u, status, _ in rows:
        if status == PENDING and u is not None:
            least[(d, u)] = min(e, least.get((d, u), e))
    for e, d, u, status, head in rows:
        want = status == PENDING and (u is None or least[(d, u)] == e)
        assert bool(head) == want, (e, d, u, status, head)


def test_queue_heads_follow_every_write(store: Store) -> None:
    """Fan-out, answers (delivered, failed, dead), replays and a dead deliverer's claims,
    in a seeded random order: the heads stay right and a URL never has two in flight."""
    rng = random.Random(7)
    ids = add(store, 5)
    outbox = store.outbox
    for name in "ab":
        outbox.add_destination(DestinationSpec(f"https://{name}.example/", f"whsec_{name}"))
    slot = 0
    in_flight: dict[tuple[int, int | None], int] = {}
    for _ in range(60):
        step = rng.random()
        if step < 0.3:
            slot += 1
            polls = [
                poll(i, "hit", old_hash=f"{slot - 1}", content_hash=f"{slot}")
                for i in rng.sample(ids, 3)
            ]
            store.commit_slot(slot_record(slot, polls), polls)
            outbox.fan_out(every, batch=rng.choice([2, 5, 100]))
        elif step < 0.55:
            for d in outbox.claim_due(rng.randint(1, 6), HOLD):
                key = (d.destination_id, d.event.url_id)
                assert key not in in_flight or d.event.url_id is None, "two in flight"
                in_flight[key] = d.event.id
        elif step < 0.85 and in_flight:
            now = datetime.now(UTC)
            done = []
            for key in rng.sample(sorted(in_flight, key=str), rng.randint(1, len(in_flight))):
                status = rng.choice([DELIVERED, DELIVERED, PENDING, DEAD])
                done.append(DeliveryOutcome(in_flight.pop(key), key[0], status, now, 204))
            outbox.record(done)
        elif step < 0.95:
            outbox.replay()
            in_flight.clear()  # a replay may hand the head to an older event
            outbox.release_claims()
        else:
            dead = outbox.list_deliveries(limit=1000)
            if dead:
                outbox.replay(rng.choice(dead).event_id)
                in_flight.clear()
                outbox.release_claims()
        heads_are_right(store)


class Plans:
    """The plans of the claim's head queries, taken by running each one under EXPLAIN
    (PostgreSQL: ANALYZE, so the rows really read) just before it runs for real."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.plans: list[Any] = []
        self.postgres = store.engine.dialect.name == "postgresql"
        event.listen(store.engine, "before_cursor_execute", self.explain)

    def explain(
        self, _c: Any, cursor: Any, statement: str, params: Any, _x: Any, many: bool
    ) -> None:
        if many or not statement.startswith("SELECT") or "FROM deliveries" not in statement:
            return
        if "head" not in statement:
            return
        if self.postgres:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
            self.plans.append(cursor.fetchone()[0][0]["Plan"])
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + statement, params)
            self.plans.append([row[-1] for row in cursor.fetchall()])

    def close(self) -> None:
        event.remove(self.store.engine, "before_cursor_execute", self.explain)


def rows_read(plan: dict[str, Any], table: str) -> tuple[int, list[str]]:
    """(rows a PostgreSQL plan read from ``table``, the scan kinds on it)."""
    read, kinds = 0, []
    if plan.get("Relation Name") == table:
        loops = plan.get("Actual Loops", 1)
        read += (plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)) * loops
        kinds.append(plan["Node Type"])
    for child in plan.get("Plans", []):
        more, more_kinds = rows_read(child, table)
        read, kinds = read + more, kinds + more_kinds
    return read, kinds


@pytest.mark.slow
def test_a_claim_reads_what_it_claims_not_the_backlog(store: Store) -> None:
    """20,000 deliveries pending (2,000 URLs, 10 each): a claim reads the due heads it
    takes through the heads index, never the whole backlog (the ``NOT EXISTS`` it
    replaced was planned by PostgreSQL as a nested loop over every pending row: about
    100 s per claim at 17,000 pending), with statistics taken when the table held only
    delivered rows since pruned (an estimate of one row: the planner then took any index
    on the destination and sorted the backlog it read) as with the backlog's own."""
    n_urls, per_url, limit = 2_000, 10, 32
    ids = add(store, n_urls)
    outbox = store.outbox
    dest = outbox.add_destination(DestinationSpec("https://a.example/", "whsec_a"))
    earlier = datetime.now(UTC) - timedelta(days=2)
    with store.engine.begin() as conn:  # the day before: delivered, then pruned
        conn.execute(insert(events), [event_row(uid, -1, earlier) for uid in ids[:300]])
    while outbox.fan_out(every, batch=5_000):
        pass
    while done := outbox.claim_due(100, HOLD):
        outbox.record([DeliveryOutcome(d.event.id, dest, DELIVERED, earlier, 204) for d in done])
    assert outbox.prune(earlier + timedelta(days=1)) == 300
    if store.engine.dialect.name == "postgresql":
        with store.engine.begin() as conn:  # what autovacuum does after the prune
            conn.execute(text("ANALYZE deliveries"))
    now = datetime.now(UTC)
    rows = [event_row(uid, k, now) for k in range(per_url) for uid in ids]
    with store.engine.begin() as conn:
        conn.execute(insert(events), rows)
    while outbox.fan_out(every, batch=5_000):
        pass
    assert outbox.backlog()[0] == n_urls * per_url
    claims = []
    for analyzed in (False, True):
        if analyzed and store.engine.dialect.name == "postgresql":
            with store.engine.begin() as conn:  # what autovacuum does to a growing table
                conn.execute(text("ANALYZE deliveries"))
        plans = Plans(store)
        try:
            due = outbox.claim_due(limit, HOLD)
        finally:
            plans.close()
        outbox.record([DeliveryOutcome(d.event.id, dest, DELIVERED, now, 204) for d in due])
        claims.append(due)
        (plan,) = plans.plans
        if plans.postgres:
            read, kinds = rows_read(plan, "deliveries")
            assert "Seq Scan" not in kinds, plan
            # the rows it claims, never the 20,000 pending
            assert read <= 2 * limit, json.dumps(plan, indent=1)
        else:
            assert any(
                "SEARCH deliveries USING INDEX ix_deliveries_destination_id_head" in d for d in plan
            ), plan
            assert not any(d.startswith("SCAN deliveries") for d in plan), plan
    assert [len(c) for c in claims] == [limit, limit]
    assert {d.event.slot for d in claims[0]} == {0}  # each URL's first event
    heads_are_right(store)


def event_row(url_id: int, slot: int, at: datetime) -> dict[str, Any]:
    return {
        "type": "page.changed",
        "url_id": url_id,
        "slot": slot,
        "created_at": at,
        "payload": "{}",
    }


def test_a_diff_made_for_a_send_is_stored_with_its_answer(store: Store) -> None:
    (uid,) = add(store, 1)
    for slot, old, new in ((1, "a", "b"), (2, "b", "c")):
        polls = [poll(uid, "hit", old_hash=old, content_hash=new, snapshot=f"text {new}")]
        store.commit_slot(slot_record(slot, polls), polls)
    outbox = store.outbox
    key = (uid, 2, "c")
    found = outbox.change_diffs([key])[key]
    assert found.diff is None and found.change_id is not None  # the texts to make it from
    outbox.record([], {found.change_id: "-text b\n+text c\n"})
    assert outbox.change_diffs([key])[key] == ("-text b\n+text c\n", None, None, found.change_id)
