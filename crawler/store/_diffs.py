"""Stored diffs: each change's unified diff, made once (by the deliverer, for the first
send of the change's event, and written with that send's answer: ``OutboxStore.record``)
and kept in ``changes.diff``, so that no later send, feed load or API read makes it again.

The store does not make diffs (that is ``crawler.detect``'s, a layer beside it): it is
handed them made (``record``). A diff is kept whole, zstd-compressed like the snapshots;
each reader cuts it to its own cap. A change row's texts never change once committed
(retention hands a deleted change's text to the baseline, the same text), so a stored diff
never goes stale.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import zstandard
from sqlalchemy import Connection, bindparam, select, text, update

from crawler.store._sql import is_postgres
from crawler.store.models import changes

#: (url_id, slot, new_hash): how an event names its change (the slot commit writes the
#: event beside the change row, before the row has an id)
ChangeKey = tuple[int, int | None, str | None]
_LEVEL = 1


class StoredDiff(NamedTuple):
    """A change's diff as stored, or (not stored yet) its texts to make it from."""

    diff: str | None
    before: str | None
    after: str | None
    #: the change's row (None: no change row found)
    change_id: int | None = None


_CHUNK = 400  # (url_id, slot) pairs per IN list: two parameters each


def compress_diff(diff: str) -> bytes:
    return zstandard.compress(diff.encode("utf-8"), _LEVEL)


def decompress_diff(blob: bytes | None) -> str | None:
    if blob is None:
        return None
    try:
        return zstandard.decompress(blob).decode("utf-8", "replace")
    except zstandard.ZstdError:
        return None


def changes_of(conn: Connection, keys: Sequence[ChangeKey]) -> dict[ChangeKey, tuple[int, Any]]:
    """The change row of each key that has one: (change id, stored diff blob or None); the
    newest row when a key matches several (a URL polled twice in a slot cannot, but a key
    without a slot can)."""
    wanted = set(keys)
    out: dict[ChangeKey, tuple[int, Any]] = {}
    pairs = sorted({(u, s) for u, s, _ in wanted if s is not None})
    loose = sorted({u for u, s, _ in wanted if s is None})
    cols = (changes.c.id, changes.c.url_id, changes.c.slot, changes.c.new_hash, changes.c.diff)
    rows: list[Any] = []
    for i in range(0, len(pairs), _CHUNK):  # the (url_id, slot) index, both IN lists
        chunk = pairs[i : i + _CHUNK]
        rows += conn.execute(
            select(*cols).where(
                changes.c.url_id.in_(sorted({u for u, _ in chunk})),
                changes.c.slot.in_(sorted({s for _, s in chunk})),
            )
        ).all()
    for i in range(0, len(loose), _CHUNK):
        rows += conn.execute(select(*cols).where(changes.c.url_id.in_(loose[i : i + _CHUNK]))).all()
    for r in sorted(rows, key=lambda r: int(r.id)):
        for key in ((int(r.url_id), int(r.slot), r.new_hash), (int(r.url_id), None, r.new_hash)):
            if key in wanted:
                out[key] = (int(r.id), r.diff)
    return out


_PG_STORE = text(
    "UPDATE changes SET diff = v.d FROM unnest(CAST(:i AS bigint[]), CAST(:b AS bytea[])) "
    "AS v(i, d) WHERE changes.id = v.i"
)


def store_diffs(conn: Connection, diffs: dict[int, bytes]) -> None:
    """Store compressed diffs (change id -> blob); on PostgreSQL in one statement (as
    ``executemany``, one statement per row at the server: ``_outbox_bulk.py``)."""
    if not diffs:
        return
    if is_postgres(conn):
        conn.execute(_PG_STORE, {"i": list(diffs), "b": list(diffs.values())})
        return
    conn.execute(
        update(changes).where(changes.c.id == bindparam("i")).values(diff=bindparam("d")),
        [{"i": i, "d": d} for i, d in diffs.items()],
    )
