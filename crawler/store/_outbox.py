"""The outbox in the database: events written with what they report, destinations, and each
destination's delivery state.

>>> outbox = store.outbox
>>> outbox.add_destination(DestinationSpec("https://example.org/hook", secret))

Decisions (crawler/delivery's docstring has the whole design):

- **Events are written in the transaction that commits what they report**: a change's
  ``page.changed`` row in ``Store.commit_slot`` (beside the change row, by the same
  executemany on SQLite and the same binary COPY on PostgreSQL: ``change_event``), a new
  page's ``page.discovered`` in ``DiscoveryStore.record_slot``, where the ``discovered`` row
  is inserted. A kill -9 keeps both or neither; the events of polls a cluster fence drops are
  never made (they are built from the polls the fence kept).
- **Fan-out, not a cursor**: events carry a ``fanned_out`` flag; the deliverer turns a batch
  of unfanned events into ``deliveries`` rows (one per matching destination) and sets the
  flag in one transaction. A per-destination id cursor would skip an event whose id was
  allocated before, but committed after, a larger one (two committers on PostgreSQL); a flag
  cannot skip. A destination receives the events fanned out after it was added.
- **Order per URL**: a delivery is due only when no earlier (smaller event id) pending
  delivery of the same URL to the same destination exists. That delivery is flagged as its
  queue's ``head`` by the writes that change what is pending (``_heads.py`` says why and
  how), so ``claim_due`` reads only due heads through an index: its cost grows with what
  it claims, not with the backlog. A URL's events get growing ids in commit order (one
  committer per URL at a time: the service, or the site's lease holder in a cluster).
- **Claiming**: a claimed delivery gets ``claimed_at`` and its ``next_attempt_at`` moves
  past the send's timeout. Only one deliverer runs per database (the service's, or in a
  cluster the holder of the delivery lock), so when one starts, every claim left is a dead
  deliverer's: ``release_claims`` makes them due at once (at least once, same ids).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, func, insert, select, true, update

from crawler.store._diffs import ChangeKey, compress_diff, store_diffs
from crawler.store._engine import translate_errors
from crawler.store._heads import (
    choose_heads,
    demote,
    new_heads,
    pass_heads,
    repair_heads,
    serialize,
)
from crawler.store._outbox_admin import OutboxAdmin, destination_row
from crawler.store._outbox_bulk import mark_claimed, write_answers
from crawler.store._outbox_types import (
    PENDING,
    DeliveryOutcome,
    DestinationRow,
    DueDelivery,
    EventRow,
)
from crawler.store._sql import among, is_postgres
from crawler.store._types import HealthEvent
from crawler.store.models import changes, deliveries, destinations, events, url_tags, urls

if TYPE_CHECKING:
    from crawler.store._store import Store

log = logging.getLogger(__name__)

PAGE_CHANGED = "page.changed"
PAGE_DISCOVERED = "page.discovered"

#: the columns of an event row as the slot commit writes them (SQLite and PostgreSQL COPY)
SQLITE_INSERT = (
    "INSERT INTO events (type, url_id, slot, created_at, payload, fanned_out) "
    "VALUES (?, ?, ?, ?, ?, 0)"
)
PG_COPY = "COPY events (type, url_id, slot, created_at, payload) FROM STDIN (FORMAT BINARY)"
PG_TYPES = ("varchar", "int8", "int8", "timestamptz", "text")


def change_event(
    url_id: int, slot: int, when: Any, detected_at: datetime, old: str | None, new: str | None
) -> tuple[Any, ...]:
    """The ``page.changed`` row of one change (``when``: the time as the driver binds it)."""
    payload = {"detected_at": detected_at.isoformat(), "old_hash": old, "new_hash": new}
    return (PAGE_CHANGED, url_id, slot, when, json.dumps(payload, separators=(",", ":")))


def write_health_events(conn: Connection, slot: int, rows: Iterable[HealthEvent]) -> None:
    """The slot's health events (page.failing, ...), in the slot's transaction."""
    values = [
        {
            "type": e.type,
            "url_id": e.url_id,
            "slot": slot,
            "created_at": e.created_at,
            "payload": json.dumps(e.payload, separators=(",", ":")),
        }
        for e in rows
    ]
    if values:
        conn.execute(insert(events), values)


def health_state(
    conn: Connection, stopped_type: str, url_ids: Sequence[int] | None = None
) -> dict[int, tuple[int, int, bool]]:
    """(newest change's slot, changes counted, alarm raised since) of each URL with a
    stored change: the health judge's state, derived from stored columns; the alarm flag is
    "a ``stopped_type`` event was written in or after that slot" (one service's slots)."""
    return {
        uid: (slot, hits, alarm is not None and alarm >= slot)
        for uid, (slot, _, hits, alarm, _) in _health_rows(conn, stopped_type, url_ids).items()
    }


def health_state_at(
    conn: Connection, stopped_type: str, url_ids: Sequence[int] | None = None
) -> dict[int, tuple[datetime, int, bool]]:
    """``health_state`` with the newest change's time instead of its slot, and the alarm
    flag by time ("a ``stopped_type`` event was written at or after that change"): what
    cluster workers share (each numbers its own slots)."""
    return {
        uid: (at, hits, alarm_at is not None and alarm_at >= at)
        for uid, (_, at, hits, _, alarm_at) in _health_rows(conn, stopped_type, url_ids).items()
    }


def _health_rows(
    conn: Connection, stopped_type: str, url_ids: Sequence[int] | None
) -> dict[int, tuple[int, datetime, int, int | None, datetime | None]]:
    """url -> (newest change's slot and time, hits, newest alarm's slot and time)."""
    out: dict[int, tuple[int, datetime, int, int | None, datetime | None]] = {}
    chunks: list[list[int] | None] = [None]
    if url_ids is not None:
        wanted = sorted(set(url_ids))
        chunks = [wanted[i : i + 900] for i in range(0, len(wanted), 900)]
    for chunk in chunks:
        newest = select(
            changes.c.url_id,
            func.max(changes.c.slot).label("slot"),
            func.max(changes.c.detected_at).label("at"),
        )
        raised = select(
            events.c.url_id,
            func.max(events.c.slot).label("slot"),
            func.max(events.c.created_at).label("at"),
        ).where(events.c.type == stopped_type)
        if chunk is not None:
            newest = newest.where(changes.c.url_id.in_(chunk))
            raised = raised.where(events.c.url_id.in_(chunk))
        last = newest.group_by(changes.c.url_id).subquery()
        alarm = raised.group_by(events.c.url_id).subquery()
        query = (
            select(last.c.url_id, last.c.slot, last.c.at, urls.c.hits, alarm.c.slot, alarm.c.at)
            .join(urls, urls.c.id == last.c.url_id)
            .outerjoin(alarm, alarm.c.url_id == last.c.url_id)
        )
        if chunk is not None:  # the URLs too: else the planner hash-joins every URL's row
            query = query.where(urls.c.id.in_(chunk))
        rows = conn.execute(query)
        for uid, slot, at, hits, alarm_slot, alarm_at in rows:
            out[int(uid)] = (
                int(slot),
                _aware(at),
                int(hits or 0),
                None if alarm_slot is None else int(alarm_slot),
                None if alarm_at is None else _aware(alarm_at),
            )
    return out


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def write_discovered_events(conn: Connection, rows: Iterable[dict[str, Any]]) -> None:
    """``page.discovered`` rows for new ``discovered`` rows, in their transaction."""
    values = [
        {
            "type": PAGE_DISCOVERED,
            "url_id": None,
            "slot": None,
            "created_at": r["found_at"],
            "payload": json.dumps(
                {
                    "url": r["url"],
                    "source_id": r["source_id"],
                    "found_at": r["found_at"].isoformat(),
                    "depth": r["depth"],
                },
                separators=(",", ":"),
            ),
        }
        for r in rows
    ]
    if values:
        conn.execute(insert(events), values)


def _now() -> datetime:
    return datetime.now(UTC)


class OutboxStore(OutboxAdmin):
    """The outbox's reads and writes on a ``Store``'s engine (sync; run it in a thread)."""

    def __init__(self, store: Store) -> None:
        self.engine = store.engine

    # ----- the deliverer -------------------------------------------------------------------

    def fan_out(
        self,
        matches: Callable[[DestinationRow, EventRow], bool],
        batch: int = 500,
        first_delay_s: float = 0.0,
    ) -> int:
        """Make the deliveries of up to ``batch`` unfanned events (oldest first), due in
        ``first_delay_s``, and mark the events; returns how many events."""
        now = _now()
        due = now + timedelta(seconds=first_delay_s)
        with translate_errors("fanning events out"), self.engine.begin() as conn:
            # read first (on SQLite outside the write lock: the crawl's slot commits wait
            # for it), then write with the heads' lock held
            found = _event_rows(
                conn,
                select(events)
                .where(events.c.fanned_out.is_(False))
                .order_by(events.c.id)
                .limit(batch),
            )
            if not found:
                return 0
            active = [
                destination_row(r)
                for r in conn.execute(
                    select(destinations).where(destinations.c.disabled_at.is_(None))
                )
            ]
            rows: list[dict[str, Any]] = [
                {
                    "event_id": e.id,
                    "destination_id": d.id,
                    "url_id": e.url_id,
                    "status": PENDING,
                    "attempts": 0,
                    "next_attempt_at": due,
                    "last_status": None,
                    "last_error": None,
                    "claimed_at": None,
                    "updated_at": now,
                }
                for e in found
                for d in active
                if matches(d, e)
            ]
            serialize(conn)  # heads are written one transaction at a time
            if rows:
                existing = new_heads(
                    conn,
                    sorted({r["event_id"] for r in rows if r["url_id"] is not None}),
                    sorted({r["destination_id"] for r in rows}),
                )
                demote(conn, choose_heads(rows, existing))
                conn.execute(insert(deliveries), rows)
            ids = [e.id for e in found]
            conn.execute(
                update(events)
                .where(among(conn, events.c.id, ids), events.c.fanned_out.is_(False))
                .values(fanned_out=True)
            )
            return len(found)

    def claim_due(
        self,
        limit: int,
        hold: timedelta,
        share: int | None = None,
        busy: Mapping[int, int] | None = None,
        *,
        parts: int | None = None,
    ) -> list[DueDelivery]:
        """Up to ``limit`` due deliveries, each the oldest pending one of its URL for its
        destination, of destinations neither disabled nor paused; with ``share``, at most
        ``share - busy[d]`` of destination ``d`` (``busy``: its sends in flight); with
        ``parts``, ``share`` is the places in all (``limit`` and those busy) over the
        smaller of ``parts`` and the destinations ready (one destination alone may use
        every place: there is no other to keep them for). Claimed for ``hold``."""
        now = _now()
        # the due heads of a destination, oldest due first: an index range scan of
        # (destination_id, head, next_attempt_at, event_id) that stops after ``room`` rows
        # (no other condition: a head is pending, and with ``status`` in the query an
        # unanalyzed PostgreSQL table was read through another index, every pending row).
        # Only that index gives this order without a sort, so on PostgreSQL the loop runs
        # with sorts disabled: statistics taken while the table was empty (its deliveries
        # pruned, then a burst of changes) estimate one row, and with them the planner took
        # any index on destination_id and sorted what it read, the whole backlog (20,000
        # rows per claim of 32), until autovacuum analysed the table again.
        heads = (
            select(deliveries.c.event_id, deliveries.c.destination_id, deliveries.c.attempts)
            .where(deliveries.c.head == true(), deliveries.c.next_attempt_at <= now)
            .order_by(deliveries.c.next_attempt_at, deliveries.c.event_id)
        )
        ready = select(
            destinations.c.id,
            destinations.c.url,
            destinations.c.secret,
            destinations.c.body_format,
            destinations.c.template,
        ).where(
            destinations.c.disabled_at.is_(None),
            (destinations.c.paused_until.is_(None)) | (destinations.c.paused_until <= now),
        )
        due: list[tuple[int, int, int, str, str]] = []
        notify: dict[int, tuple[str | None, str | None]] = {}
        with translate_errors("claiming deliveries"), self.engine.begin() as conn:
            found_ready = conn.execute(ready.order_by(destinations.c.id)).all()
            postgres = is_postgres(conn)
            if postgres:
                conn.exec_driver_sql("SET LOCAL enable_sort = off")
            if parts is not None and found_ready:
                places = limit + sum((busy or {}).values())
                share = max(1, places // min(parts, len(found_ready)))
            for dest_id, url, secret, fmt, template in found_ready:
                notify[int(dest_id)] = (fmt, template)
                room = limit - len(due)
                if share is not None:
                    room = min(room, share - (busy or {}).get(int(dest_id), 0))
                if room <= 0:
                    continue
                query = heads.where(deliveries.c.destination_id == dest_id).limit(room)
                if postgres:  # a second deliverer would skip these, not wait
                    query = query.with_for_update(skip_locked=True)
                due += [(int(e), int(d), int(a), url, secret) for e, d, a in conn.execute(query)]
            if postgres:
                conn.exec_driver_sql("SET LOCAL enable_sort = on")
            if not due:
                return []
            found = {
                e.id: e
                for e in _event_rows(
                    conn, select(events).where(among(conn, events.c.id, [r[0] for r in due]))
                )
            }
            mark_claimed(conn, [(row[0], row[1]) for row in due], now + hold, now)
        return [
            DueDelivery(found[e], d, url, secret, n, *notify[d]) for e, d, n, url, secret in due
        ]

    def release_claims(self) -> int:
        """Make the deliveries claimed by a deliverer that died due now; call it only as
        the database's one deliverer (its lock held). Returns how many."""
        now = _now()
        with translate_errors("releasing claims"), self.engine.begin() as conn:
            serialize(conn)
            done = conn.execute(
                update(deliveries)
                .where(deliveries.c.status == PENDING, deliveries.c.claimed_at.is_not(None))
                .values(next_attempt_at=now, claimed_at=None, updated_at=now)
            )
            repaired = repair_heads(conn)
            if repaired:
                log.warning("delivery: %d queue head flag(s) were wrong, repaired", repaired)
            return int(done.rowcount)

    def record(
        self, outcomes: Sequence[DeliveryOutcome], diffs: Mapping[int, str] | None = None
    ) -> None:
        """Write what the attempts did (one transaction), and ``diffs`` (change id ->
        diff, made for these sends: stored once, ``_diffs.py``)."""
        if not outcomes and not diffs:
            return
        now = _now()
        ended = [o for o in outcomes if o.status != PENDING]
        blobs = {cid: compress_diff(d) for cid, d in (diffs or {}).items()}
        with translate_errors("recording deliveries"), self.engine.begin() as conn:
            # read first (on SQLite before the write lock: the crawl's commits wait for it)
            url_of: dict[int, int | None] = {}
            if ended:
                url_of = {
                    int(e): u
                    for e, u in conn.execute(
                        select(events.c.id, events.c.url_id).where(
                            among(conn, events.c.id, sorted({o.event_id for o in ended}))
                        )
                    )
                }
                serialize(conn)
            store_diffs(conn, blobs)
            # an ended delivery's head flag is cleared here; the URL's next pending
            # delivery becomes its head
            write_answers(conn, outcomes, now)
            if ended:
                pass_heads(conn, [(o.destination_id, url_of.get(o.event_id)) for o in ended])

    def backlog(self) -> tuple[int, datetime | None]:
        """(events not delivered yet: pending deliveries and unfanned events, the time of
        the oldest of them)."""
        with translate_errors("measuring the outbox"), self.engine.connect() as conn:
            n_pending, oldest_pending = conn.execute(
                select(func.count(), func.min(events.c.created_at))
                .select_from(deliveries)
                .join(events, events.c.id == deliveries.c.event_id)
                .where(deliveries.c.status == PENDING)
            ).one()
            n_unfanned, oldest_unfanned = conn.execute(
                select(func.count(), func.min(events.c.created_at)).where(
                    events.c.fanned_out.is_(False)
                )
            ).one()
        times = [t for t in (oldest_pending, oldest_unfanned) if t is not None]
        return int(n_pending) + int(n_unfanned), min(times) if times else None


def change_key(event: EventRow) -> ChangeKey | None:
    """How a page.changed event names its change row (None: another type of event)."""
    if event.type != PAGE_CHANGED or event.url_id is None:
        return None
    return (event.url_id, event.slot, event.payload.get("new_hash"))


def _event_rows(conn: Connection, query: Any) -> list[EventRow]:
    """Events with their URL and its tags."""
    rows = conn.execute(query).all()
    ids = sorted({int(r.url_id) for r in rows if r.url_id is not None})
    url_of: dict[int, str] = {}
    tags: dict[int, list[str]] = {}
    if ids:
        for uid, url in conn.execute(
            select(urls.c.id, urls.c.url).where(among(conn, urls.c.id, ids))
        ):
            url_of[int(uid)] = url
        for uid, tag in conn.execute(
            select(url_tags.c.url_id, url_tags.c.tag).where(among(conn, url_tags.c.url_id, ids))
        ):
            tags.setdefault(int(uid), []).append(tag)
    out = []
    for r in rows:
        payload = json.loads(r.payload)
        uid = None if r.url_id is None else int(r.url_id)
        out.append(
            EventRow(
                id=int(r.id),
                type=r.type,
                url_id=uid,
                slot=None if r.slot is None else int(r.slot),
                created_at=r.created_at,
                payload=payload,
                url=url_of.get(uid) if uid is not None else payload.get("url"),
                tags=tuple(sorted(tags.get(uid, []))) if uid is not None else (),
            )
        )
    return out
