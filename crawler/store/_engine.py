"""Database URLs and engines: SQLite (WAL) and PostgreSQL through psycopg 3, both sync."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError

from crawler.store._types import StoreError, StoreUnavailable

SQLITE_BUSY_TIMEOUT_MS = 10_000
#: WAL pages after which a commit checkpoints them into the database file (SQLite's default
#: is 1,000, about 4 MB). A slot of a few hundred polls dirties 700-800 pages (the URL rows,
#: the scheduler rows, the poll log's URL index), so at 1,000 nearly every other commit
#: copied them all back to the file, and a page rewritten by the next slots was copied again
#: each time: a third of a slot commit's CPU (48 against 31 us per poll, 300-poll slots of
#: 10,000 URLs). At 10,000 pages (a WAL of up to ~40 MB) the pages the slots rewrite are
#: copied once per checkpoint. Durability is the WAL's either way (synchronous=NORMAL).
SQLITE_WAL_AUTOCHECKPOINT = 10_000


def sync_url(database_url: str) -> str:
    """The SQLAlchemy URL for the sync engine: ``postgresql://`` and
    ``postgresql+asyncpg://`` map to ``postgresql+psycopg://`` (the store is sync and
    uses psycopg 3); ``sqlite:///path`` stays."""
    url = make_url(database_url)
    backend = url.get_backend_name()
    if backend == "postgresql":
        return url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    if backend == "sqlite":
        if url.drivername not in ("sqlite", "sqlite+pysqlite"):
            raise ValueError(f"unsupported SQLite driver in {database_url!r}: use sqlite:///PATH")
        return database_url
    raise ValueError(
        f"unsupported database URL {database_url!r}: use sqlite:///PATH or postgresql://..."
    )


def make_engine(database_url: str) -> Engine:
    """A sync engine; SQLite gets WAL (checkpointed every ``SQLITE_WAL_AUTOCHECKPOINT``
    pages), synchronous=NORMAL, foreign keys and a busy timeout."""
    url = make_url(sync_url(database_url))
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            with contextlib.suppress(OSError):  # else connecting reports it (StoreUnavailable)
                Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # psycopg's pipelined executemany beats multi-row VALUES statements (see _sql.py)
    return create_engine(
        url, pool_pre_ping=True, pool_size=2, max_overflow=2, use_insertmanyvalues=False
    )


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    try:
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute(f"PRAGMA wal_autocheckpoint={SQLITE_WAL_AUTOCHECKPOINT}")
    finally:
        cur.close()


@contextlib.contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Turn SQLAlchemy errors into StoreUnavailable (retry later) or StoreError."""
    try:
        yield
    except OperationalError as exc:
        raise StoreUnavailable(f"{what}: database unavailable: {_short(exc)}") from exc
    except DBAPIError as exc:
        if exc.connection_invalidated:
            raise StoreUnavailable(f"{what}: connection lost: {_short(exc)}") from exc
        raise StoreError(f"{what} failed: {_short(exc)}") from exc
    except SQLAlchemyError as exc:
        raise StoreError(f"{what} failed: {exc}") from exc


def _short(exc: DBAPIError) -> str:
    return str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)


@contextlib.contextmanager
def reading(engine: Engine) -> Iterator[Connection]:
    """A connection for a large read outside any transaction (PostgreSQL: autocommit).

    A cluster worker's sessions end once idle in a transaction for a worker timeout (a
    paused worker must not keep its lease rows locked), and reading a large share (2M
    URLs, their saved rows, their hosts) spends longer than that in Python between the
    statements or after the last one: measured, the first load of 2M URLs was cut there.
    Outside a transaction the session is merely idle. SQLite: a plain connection."""
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn.execution_options(isolation_level="AUTOCOMMIT")
        yield conn
