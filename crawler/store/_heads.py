"""The head of each delivery queue: which pending delivery a destination may send next for
a URL, kept in ``deliveries.head`` so that a claim reads only the due heads.

Invariant: a delivery has ``head`` true exactly when it is pending and either its event has
no URL, or its event id is the smallest among the pending deliveries of its URL to its
destination. A claim takes due heads through the index ``(destination_id, head,
next_attempt_at, event_id)``: its cost grows with the rows it claims, not with the backlog.

Why a maintained flag: the order per URL used to be a ``NOT EXISTS`` over earlier pending
deliveries of the same URL, evaluated at every claim; with 17,000 deliveries pending,
PostgreSQL planned it as a nested loop over every pending row (about 100 s per claim; the
deliverer stalled). ``DISTINCT ON`` or a window over the pending rows still reads all of
them at every claim; the flag moves the work to the writes that change what is pending,
each an index probe per (destination, URL) they touch:

- fan-out: a new pending delivery is the head when its URL has none pending for its
  destination (``new_heads``; an earlier event fanned out later takes the head over);
- an answer that ends a delivery (delivered, dead) passes the head to the URL's next
  pending delivery (``pass_heads``);
- a replay makes old deliveries pending again: the head of each URL it touched is worked
  out again (``recompute_heads``).

Writers of heads run one at a time: on PostgreSQL they take a transaction-level advisory
lock first (the deliverer's fan-out and answers, an operator's replay from the CLI); on
SQLite they begin with a write, so the database's one writer serializes them.
``repair_heads`` recomputes every flag (a deliverer's start and the migration do it), in
case a flag was ever left wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, and_, bindparam, false, func, select, text, true, update

from crawler.store._lock import NAMESPACE, lock_key
from crawler.store._outbox_types import PENDING
from crawler.store._sql import among, is_postgres
from crawler.store.models import deliveries, destinations, events

#: second key of the transaction-level advisory lock that writers of heads take
HEADS_LOCK = lock_key("", "delivery-heads")


def serialize(conn: Connection) -> None:
    """Make this transaction the only writer of heads until it ends."""
    if is_postgres(conn):
        conn.execute(
            text("SELECT pg_advisory_xact_lock(:a, :b)"), {"a": NAMESPACE, "b": HEADS_LOCK}
        )
    else:  # a write begins the transaction and takes SQLite's one write lock now
        conn.execute(update(destinations).where(destinations.c.id == -1).values(url=""))


def _min_pending(destination_id: Any, url_id: Any) -> Any:
    d = deliveries.alias("d")
    return (
        select(func.min(d.c.event_id))
        .where(d.c.destination_id == destination_id, d.c.url_id == url_id, d.c.status == PENDING)
        .scalar_subquery()
    )


def new_heads(
    conn: Connection, event_ids: Sequence[int], destination_ids: Sequence[int]
) -> dict[tuple[int, int], int]:
    """Before the deliveries of these events are inserted: the smallest pending event id
    of each (destination, URL) of these events that already has one."""
    out: dict[tuple[int, int], int] = {}
    if not event_ids:
        return out
    for dest in destination_ids:
        query = (
            select(events.c.url_id, _min_pending(dest, events.c.url_id))
            .where(among(conn, events.c.id, list(event_ids)), events.c.url_id.is_not(None))
            .distinct()
        )
        for url_id, head in conn.execute(query):
            if head is not None:
                out[(dest, int(url_id))] = int(head)
    return out


def choose_heads(
    rows: list[dict[str, Any]], existing: dict[tuple[int, int], int]
) -> list[tuple[int, int]]:
    """Set ``head`` in the new delivery rows (dicts with event_id, destination_id,
    url_id), given the heads already pending (``new_heads``); returns the (event_id,
    destination_id) of the existing heads that a new, earlier event takes over from."""
    first: dict[tuple[int, int], dict[str, Any]] = {}
    for row in rows:
        row["head"] = row["url_id"] is None
        if row["url_id"] is None:
            continue
        key = (row["destination_id"], row["url_id"])
        if key not in first or row["event_id"] < first[key]["event_id"]:
            first[key] = row
    demoted: list[tuple[int, int]] = []
    for (dest, _), row in first.items():
        held = existing.get((dest, row["url_id"]))
        if held is None or row["event_id"] < held:
            row["head"] = True
            if held is not None:
                demoted.append((held, dest))
    return demoted


_PG_DEMOTE = text(
    "UPDATE deliveries SET head = false "
    "FROM unnest(CAST(:e AS bigint[]), CAST(:d AS bigint[])) AS k(e, d) "
    "WHERE deliveries.event_id = k.e AND deliveries.destination_id = k.d"
)

#: the smallest pending delivery of each (destination, URL) key; a key with none pending
#: gives a NULL event id, which matches nothing
_PG_PASS = text(
    "UPDATE deliveries SET head = true WHERE (destination_id, event_id) IN ("
    "SELECT k.d, (SELECT min(x.event_id) FROM deliveries x WHERE x.destination_id = k.d "
    "AND x.url_id = k.u AND x.status = :pending) "
    "FROM unnest(CAST(:d AS bigint[]), CAST(:u AS bigint[])) AS k(d, u))"
)


def demote(conn: Connection, pairs: Iterable[tuple[int, int]]) -> None:
    """Clear ``head`` of these (event_id, destination_id) deliveries (PostgreSQL: one
    statement, ``_outbox_bulk.py`` says why)."""
    params = [{"e": e, "d": d} for e, d in pairs]
    if params and is_postgres(conn):
        conn.execute(_PG_DEMOTE, {"e": [p["e"] for p in params], "d": [p["d"] for p in params]})
    elif params:
        conn.execute(
            update(deliveries)
            .where(
                deliveries.c.event_id == bindparam("e"),
                deliveries.c.destination_id == bindparam("d"),
            )
            .values(head=False),
            params,
        )


def pass_heads(conn: Connection, keys: Iterable[tuple[int, int | None]]) -> None:
    """Flag the smallest pending delivery of each (destination, URL) as its head (after a
    write that ended the previous head); a URL-less key needs nothing."""
    params = [{"d": d, "u": u} for d, u in dict.fromkeys(keys) if u is not None]
    if not params:
        return
    if is_postgres(conn):
        conn.execute(
            _PG_PASS,
            {"pending": PENDING, "d": [p["d"] for p in params], "u": [p["u"] for p in params]},
        )
        return
    conn.execute(
        update(deliveries)
        .where(
            deliveries.c.destination_id == bindparam("d"),
            deliveries.c.event_id == _min_pending(bindparam("d"), bindparam("u")),
        )
        .values(head=True),
        params,
    )


def recompute_heads(conn: Connection, keys: Iterable[tuple[int, int | None]]) -> None:
    """Work out the head of each (destination, URL) again: flag the smallest pending one
    and clear the others (reads the URL's pending deliveries: for a replay, not a claim)."""
    keys = list(dict.fromkeys(keys))
    if not keys:
        return
    with_url = [{"d": d, "u": u} for d, u in keys if u is not None]
    if with_url:
        conn.execute(
            update(deliveries)
            .where(
                deliveries.c.destination_id == bindparam("d"),
                deliveries.c.url_id == bindparam("u"),
                deliveries.c.status == PENDING,
                deliveries.c.head == true(),
            )
            .values(head=False),
            with_url,
        )
        pass_heads(conn, keys)
    url_less = sorted({d for d, u in keys if u is None})
    if url_less:
        conn.execute(
            update(deliveries)
            .where(
                among(conn, deliveries.c.destination_id, url_less),
                deliveries.c.url_id.is_(None),
                deliveries.c.status == PENDING,
            )
            .values(head=True)
        )


def repair_heads(conn: Connection) -> int:
    """Recompute every flag from the pending rows; returns how many flags changed."""
    right = and_(
        deliveries.c.status == PENDING,
        deliveries.c.url_id.is_(None)
        | (deliveries.c.event_id == _min_pending(deliveries.c.destination_id, deliveries.c.url_id)),
    )
    wrong_off = conn.execute(
        update(deliveries).where(deliveries.c.head == false(), right).values(head=True)
    ).rowcount
    wrong_on = conn.execute(
        update(deliveries).where(deliveries.c.head == true(), ~right).values(head=False)
    ).rowcount
    return int(wrong_off) + int(wrong_on)
