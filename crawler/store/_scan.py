"""Large reads through the driver's own cursor: rows in chunks, no SQLAlchemy ``Row`` per row.

Start-up reads every watched URL (ids, importances) and every per-URL learning row: a million
rows each. SQLAlchemy's result layer (a ``Row`` object and processors per row) costs about as
much as the driver itself there, so these scans go to the DB-API cursor of the connection
(same transaction) and hand back plain tuples, ``chunk`` at a time. On PostgreSQL the rows
stream from a server-side cursor, so the client never holds the whole result.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection

from crawler.store._driver import driver_errors, unavailable_errors
from crawler.store._sql import is_postgres
from crawler.store._types import StoreError, StoreUnavailable

CHUNK = 50_000
_names = itertools.count()


def scan(
    conn: Connection,
    what: str,
    sqlite_sql: str,
    postgres_sql: str,
    params: Sequence[Any] = (),
    chunk: int = CHUNK,
) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of a query, ``chunk`` rows at a time (``?`` placeholders for SQLite,
    ``%s`` for PostgreSQL). A driver error is raised as StoreUnavailable (the database is
    unreachable or busy: retry later) or StoreError, saying ``what`` was being read."""
    try:
        yield from _scan(conn, sqlite_sql, postgres_sql, params, chunk)
    except unavailable_errors() as exc:
        raise StoreUnavailable(f"{what}: database unavailable: {_first_line(exc)}") from exc
    except driver_errors() as exc:
        raise StoreError(f"{what} failed: {_first_line(exc)}") from exc


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _scan(
    conn: Connection,
    sqlite_sql: str,
    postgres_sql: str,
    params: Sequence[Any],
    chunk: int,
) -> Iterator[list[tuple[Any, ...]]]:
    raw = conn.connection.dbapi_connection
    if is_postgres(conn):
        import psycopg  # loaded with the engine already

        assert isinstance(raw, psycopg.Connection)
        # a named cursor is server-side: psycopg fetches ``itersize`` rows per round trip
        with raw.cursor(name=f"crawler_scan_{next(_names)}", binary=True) as cur:
            cur.itersize = chunk
            cur.execute(postgres_sql, tuple(params))
            while rows := cur.fetchmany(chunk):
                yield rows
        return
    assert isinstance(raw, sqlite3.Connection)
    cur = raw.cursor()
    try:
        cur.execute(sqlite_sql, tuple(params))
        while rows := cur.fetchmany(chunk):
            yield rows
    finally:
        cur.close()
