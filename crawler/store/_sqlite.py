"""SQLite fast paths: a slot's rows as prebuilt tuples, straight to the driver's executemany.

SQLAlchemy's executemany builds and type-processes a parameter dict per row (about two thirds
of a slot commit's CPU, in a thread that competes with the crawl loop for the GIL); the
sqlite3 driver binds tuples in C. The statements below mean exactly what the SQLAlchemy
statements of ``_store.py`` mean (same columns, same coalesce rules), and times are stored
in the same text form (through the column type's own bind processor).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from crawler.store.models import UTCDateTime

POLL_LOG = (
    "INSERT INTO poll_log (url_id, slot, polled_at, status, outcome, duration_s, bytes, "
    "content_hash, error_kind, error, truncated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

CHANGES = (
    "INSERT INTO changes (url_id, slot, detected_at, old_hash, new_hash, snapshot, "
    "snapshot_format) VALUES (?, ?, ?, ?, ?, ?, ?)"
)

#: parameters: (id, hit, miss, not_modified, at, changed_at, status, etag, last_modified,
#: hash, raw_hash), the order of the PostgreSQL ``OK_UPDATE`` arrays
OK_UPDATE = (
    "UPDATE urls SET polls = polls + 1, hits = hits + ?2, misses = misses + ?3, "
    "not_modified = not_modified + ?4, last_polled_at = ?5, "
    "last_changed_at = coalesce(?6, last_changed_at), last_status = ?7, etag = ?8, "
    "last_modified = ?9, last_hash = coalesce(?10, last_hash), "
    "last_raw_hash = coalesce(?11, last_raw_hash), "
    "first_seen_hash = coalesce(first_seen_hash, ?10) WHERE id = ?1"
)

#: parameters: (id, at, status)
ERROR_UPDATE = (
    "UPDATE urls SET polls = polls + 1, errors = errors + 1, last_polled_at = ?2, "
    "last_status = ?3 WHERE id = ?1"
)

URL_STATE = (
    "INSERT INTO url_state (scheduler, url_id, data) VALUES (?, ?, ?) "
    "ON CONFLICT (scheduler, url_id) DO UPDATE SET data = excluded.data"
)


def time_binder(conn: Connection) -> Callable[[datetime | None], Any]:
    """datetime -> the value SQLAlchemy would bind for a ``UTCDateTime`` column, memoized
    (a slot's polls share one time)."""
    # the dialect's own processor: the text SQLAlchemy stores (not sqlite3's deprecated
    # default adapter, which would run per row and drop a zero microsecond part)
    process = UTCDateTime().dialect_impl(conn.dialect).bind_processor(conn.dialect)
    cache: dict[datetime, Any] = {}

    def bind(value: datetime | None) -> Any:
        if value is None:
            return None
        out = cache.get(value)
        if out is None:
            out = cache[value] = process(value) if process is not None else value
        return out

    return bind


def execute_rows(conn: Connection, sql: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """One executemany of ``rows`` (nothing when empty)."""
    if rows:
        conn.exec_driver_sql(sql, list(rows))
