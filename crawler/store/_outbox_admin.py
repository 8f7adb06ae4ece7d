"""The outbox's operator side: destinations, what was delivered, replays, retention, and
the change texts a diff is made of (``OutboxStore`` inherits it; ``_outbox.py``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, and_, delete, func, insert, select, update

from crawler.store._diffs import ChangeKey, StoredDiff, changes_of, decompress_diff
from crawler.store._engine import translate_errors
from crawler.store._heads import recompute_heads, serialize
from crawler.store._outbox_types import (
    DEAD,
    DELIVERED,
    PENDING,
    DeliveryRow,
    DestinationRow,
    DestinationSpec,
)
from crawler.store.models import changes, deliveries, destinations, events, urls


def _now() -> datetime:
    return datetime.now(UTC)


def destination_row(r: Any) -> DestinationRow:
    return DestinationRow(
        id=int(r.id),
        spec=DestinationSpec(
            url=r.url,
            secret=r.secret,
            tags=tuple(json.loads(r.tags)),
            event_types=tuple(json.loads(r.event_types)),
            url_pattern=r.url_pattern,
            body_format=r.body_format,
            template=r.template,
        ),
        created_at=r.created_at,
        disabled_at=r.disabled_at,
        disabled_reason=r.disabled_reason,
        paused_until=r.paused_until,
    )


class OutboxAdmin:
    """The operator's reads and writes of the outbox (needs ``self.engine``)."""

    engine: Engine

    # ----- destinations ------------------------------------------------------------------

    def add_destination(self, spec: DestinationSpec) -> int:
        with translate_errors("adding a destination"), self.engine.begin() as conn:
            new = conn.execute(
                insert(destinations)
                .values(
                    url=spec.url,
                    secret=spec.secret,
                    tags=json.dumps(list(spec.tags)),
                    event_types=json.dumps(list(spec.event_types)),
                    url_pattern=spec.url_pattern,
                    body_format=spec.body_format,
                    template=spec.template,
                    created_at=_now(),
                )
                .returning(destinations.c.id)
            ).scalar_one()
        return int(new)

    def destinations(self) -> list[DestinationRow]:
        with translate_errors("listing destinations"), self.engine.connect() as conn:
            rows = conn.execute(select(destinations).order_by(destinations.c.id))
            return [destination_row(r) for r in rows]

    def destination(self, destination_id: int) -> DestinationRow | None:
        return next((d for d in self.destinations() if d.id == destination_id), None)

    def remove_destination(self, destination_id: int) -> bool:
        """Delete a destination and its delivery state; False if there is none."""
        with translate_errors("removing a destination"), self.engine.begin() as conn:
            conn.execute(delete(deliveries).where(deliveries.c.destination_id == destination_id))
            gone = conn.execute(delete(destinations).where(destinations.c.id == destination_id))
            return bool(gone.rowcount)

    def disable_destination(self, destination_id: int, reason: str) -> None:
        with translate_errors("disabling a destination"), self.engine.begin() as conn:
            conn.execute(
                update(destinations)
                .where(destinations.c.id == destination_id)
                .values(disabled_at=_now(), disabled_reason=reason)
            )

    def pause_destination(self, destination_id: int, until: datetime) -> None:
        with translate_errors("pausing a destination"), self.engine.begin() as conn:
            conn.execute(
                update(destinations)
                .where(destinations.c.id == destination_id)
                .values(paused_until=until)
            )

    def prune(self, older_than: datetime) -> int:
        """Delete what is done with, created before ``older_than``: delivered deliveries,
        then fanned-out events left with no delivery (pending and dead ones stay). Returns
        how many events."""
        old = select(events.c.id).where(events.c.created_at < older_than).scalar_subquery()
        with translate_errors("pruning the outbox"), self.engine.begin() as conn:
            conn.execute(
                delete(deliveries).where(
                    deliveries.c.status == DELIVERED, deliveries.c.event_id.in_(old)
                )
            )
            left = select(deliveries.c.event_id).where(deliveries.c.event_id == events.c.id)
            done = conn.execute(
                delete(events).where(
                    events.c.created_at < older_than,
                    events.c.fanned_out.is_(True),
                    ~left.exists(),
                )
            )
            return int(done.rowcount)

    # ----- the operator --------------------------------------------------------------------

    def list_deliveries(self, *, failed: bool = False, limit: int = 100) -> list[DeliveryRow]:
        """The latest deliveries (newest first); ``failed``: only the dead-lettered ones."""
        query = (
            select(
                deliveries.c.event_id,
                events.c.type,
                urls.c.url,
                events.c.payload,
                events.c.created_at,
                deliveries.c.destination_id,
                deliveries.c.status,
                deliveries.c.attempts,
                deliveries.c.next_attempt_at,
                deliveries.c.last_status,
                deliveries.c.last_error,
            )
            .join(events, events.c.id == deliveries.c.event_id)
            .outerjoin(urls, urls.c.id == events.c.url_id)
            .order_by(deliveries.c.event_id.desc(), deliveries.c.destination_id)
            .limit(limit)
        )
        if failed:
            query = query.where(deliveries.c.status == DEAD)
        with translate_errors("listing events"), self.engine.connect() as conn:
            return [
                DeliveryRow(
                    int(r[0]),
                    r[1],
                    r[2] or json.loads(r[3]).get("url"),
                    r[4],
                    int(r[5]),
                    r[6],
                    int(r[7]),
                    r[8],
                    r[9],
                    r[10],
                )
                for r in conn.execute(query)
            ]

    def replay(self, event_id: int | None = None) -> int:
        """Send again: event ``event_id`` to every destination that had it (any status), or
        (None) every dead-lettered delivery. Returns how many deliveries were reset."""
        cond = (
            deliveries.c.event_id == event_id
            if event_id is not None
            else and_(deliveries.c.status == DEAD)
        )
        now = _now()
        with translate_errors("replaying events"), self.engine.begin() as conn:
            serialize(conn)  # heads are written one transaction at a time
            keys = [
                (int(d), None if u is None else int(u))
                for d, u in conn.execute(
                    select(deliveries.c.destination_id, deliveries.c.url_id).where(cond).distinct()
                )
            ]
            done = conn.execute(
                update(deliveries)
                .where(cond)
                .values(status=PENDING, attempts=0, next_attempt_at=now, updated_at=now)
            )
            recompute_heads(conn, keys)  # an older event made pending again leads its URL
            return int(done.rowcount)

    def change_texts(
        self, url_id: int, slot: int | None, old_hash: str | None, new_hash: str | None
    ) -> tuple[str | None, str | None]:
        """(text before, text after) of a URL's change (its row: ``url_id``, ``slot``,
        ``new_hash``), read through the change history (docs/history.md): after is its
        snapshot; before is the previous change's after, or the URL's baseline text, when
        its hash is ``old_hash``; else None."""
        from crawler.store._store import change_texts_in

        query = select(changes.c.id).where(
            changes.c.url_id == url_id, changes.c.new_hash == new_hash
        )
        if slot is not None:
            query = query.where(changes.c.slot == slot)
        with translate_errors("reading change texts"), self.engine.connect() as conn:
            change_id = conn.execute(query.order_by(changes.c.id.desc()).limit(1)).scalar()
            if change_id is None:
                return None, None
            text = change_texts_in(conn, [int(change_id)]).get(int(change_id))
        if text is None:
            return None, None
        return text.before, text.after

    def url_states(self, url_ids: Sequence[int]) -> dict[int, dict[str, dict[str, Any]]]:
        """Each scheduler's saved fields for these URLs (what ``crawler show`` prints), in
        one query."""
        from crawler.store._admin import url_state_fields_many

        with translate_errors("reading URL states"), self.engine.connect() as conn:
            return url_state_fields_many(conn, url_ids)

    def change_diffs(self, keys: Sequence[ChangeKey]) -> dict[ChangeKey, StoredDiff]:
        """The diff of each change (``(url_id, slot, new_hash)`` keys), as stored when
        its event was fanned out; for a change without a stored diff, its texts instead
        (the caller makes the diff). Batched: a query for the rows, one for the texts."""
        from crawler.store._store import change_texts_in

        out: dict[ChangeKey, StoredDiff] = {}
        with translate_errors("reading change diffs"), self.engine.connect() as conn:
            rows = changes_of(conn, keys)
            missing = sorted({cid for cid, blob in rows.values() if blob is None})
            texts = change_texts_in(conn, missing) if missing else {}
        for key in keys:
            if key not in rows:
                out[key] = StoredDiff(None, None, None)
                continue
            cid, blob = rows[key]
            if blob is not None:
                out[key] = StoredDiff(decompress_diff(blob), None, None, cid)
            else:
                text = texts.get(cid)
                out[key] = StoredDiff(
                    None, *((None, None) if text is None else (text.before, text.after)), cid
                )
        return out

    def event_count(self, event_type: str | None = None) -> int:
        query = select(func.count()).select_from(events)
        if event_type is not None:
            query = query.where(events.c.type == event_type)
        with translate_errors("counting events"), self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())
