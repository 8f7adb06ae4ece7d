"""PostgreSQL fast paths: a slot's rows by COPY, scheduler rows as ``unnest`` arrays.

One statement per table per slot: no per-row round trips and no statement text that grows
with the batch (see ``_sql.py``). The poll log, the changes and the URL updates go through
binary COPY (psycopg formats the rows in C; array parameters are dumped element by element in
Python, holding the GIL that the crawl loop needs): the URL updates are copied into a
temporary table emptied at every commit, then applied with one ``UPDATE ... FROM``.

psycopg is imported where a raw connection is taken, and its errors are caught through
``_driver``: these functions run on PostgreSQL alone, whose engine has loaded psycopg
already, and a process on SQLite never loads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, TextClause, text

from crawler.store._driver import driver_errors, unavailable_errors
from crawler.store._types import StoreError, StoreUnavailable

if TYPE_CHECKING:
    import psycopg

#: a successful poll's effect on its URL row, from a row ``v`` of the slot's values
_OK_SET = (
    "UPDATE urls SET polls = urls.polls + 1, hits = urls.hits + v.hit, "
    "misses = urls.misses + v.miss, not_modified = urls.not_modified + v.nm, "
    "last_polled_at = v.at, last_changed_at = coalesce(v.changed, urls.last_changed_at), "
    "last_status = v.status, etag = v.etag, last_modified = v.lm, "
    "last_hash = coalesce(v.hash, urls.last_hash), "
    "last_raw_hash = coalesce(v.raw, urls.last_raw_hash), "
    "first_seen_hash = coalesce(urls.first_seen_hash, v.hash) "
)
OK_UPDATE = text(
    _OK_SET + "FROM unnest(CAST(:b_id AS bigint[]), CAST(:b_hit AS int[]), CAST(:b_miss AS int[]), "
    "CAST(:b_nm AS int[]), CAST(:b_at AS timestamptz[]), CAST(:b_changed AS timestamptz[]), "
    "CAST(:b_status AS int[]), CAST(:b_etag AS text[]), CAST(:b_lm AS text[]), "
    "CAST(:b_hash AS text[]), CAST(:b_raw AS text[])) "
    "AS v(id, hit, miss, nm, at, changed, status, etag, lm, hash, raw) WHERE urls.id = v.id"
)

ERROR_UPDATE = text(
    "UPDATE urls SET polls = urls.polls + 1, errors = urls.errors + 1, "
    "last_polled_at = v.at, last_status = v.status "
    "FROM unnest(CAST(:b_id AS bigint[]), CAST(:b_at AS timestamptz[]), "
    "CAST(:b_status AS int[])) AS v(id, at, status) WHERE urls.id = v.id"
)

URL_STATE = text(
    "INSERT INTO url_state (scheduler, url_id, data) SELECT :name, u, d FROM unnest("
    "CAST(:ids AS bigint[]), CAST(:data AS bytea[])) AS t(u, d) "
    "ON CONFLICT (scheduler, url_id) DO UPDATE SET data = EXCLUDED.data"
)


OK_COLUMNS = (
    "b_id", "b_hit", "b_miss", "b_nm", "b_at", "b_changed", "b_status", "b_etag", "b_lm",
    "b_hash", "b_raw",
)  # fmt: skip
ERROR_COLUMNS = ("b_id", "b_at", "b_status")


def execute_columns(
    conn: Connection, stmt: TextClause, names: Sequence[str], rows: Sequence[tuple[Any, ...]]
) -> None:
    """Run ``stmt`` once with the columns of ``rows`` (tuples in the order of ``names``) as
    array parameters (nothing when ``rows`` is empty)."""
    if rows:
        conn.execute(stmt, dict(zip(names, map(list, zip(*rows, strict=True)), strict=True)))


def upsert_url_state(conn: Connection, name: str, ids: list[int], blobs: list[bytes]) -> None:
    if ids:
        conn.execute(URL_STATE, {"name": name, "ids": ids, "data": blobs})


# COPY in binary: the server neither parses numbers and times from text nor decodes the
# snapshots' hex (half of what it spent on a change row); the types are the columns' own.
POLL_LOG_COPY = (
    "COPY poll_log (url_id, slot, polled_at, status, outcome, duration_s, bytes, content_hash, "
    "error_kind, error, truncated) FROM STDIN (FORMAT BINARY)"
)
POLL_LOG_TYPES = (
    "int8", "int8", "timestamptz", "int4", "varchar", "float8", "int8", "varchar", "varchar",
    "text", "bool",
)  # fmt: skip
CHANGES_COPY = (
    "COPY changes (url_id, slot, detected_at, old_hash, new_hash, snapshot, snapshot_format) "
    "FROM STDIN (FORMAT BINARY)"
)
CHANGES_TYPES = ("int8", "int8", "timestamptz", "varchar", "varchar", "bytea", "int2")

#: the slot's successful polls, in the order of ``OK_COLUMNS``; emptied at every commit
_OK_TABLE = (
    "CREATE TEMP TABLE IF NOT EXISTS crawler_slot_ok (id bigint, hit int, miss int, nm int, "
    "at timestamptz, changed timestamptz, status int, etag text, lm text, hash text, raw text) "
    "ON COMMIT DELETE ROWS"
)
_OK_COPY = "COPY crawler_slot_ok FROM STDIN (FORMAT BINARY)"
_OK_TYPES = (
    "int8", "int4", "int4", "int4", "timestamptz", "timestamptz", "int4", "text", "text", "text",
    "text",
)  # fmt: skip
_OK_APPLY = _OK_SET + "FROM crawler_slot_ok AS v WHERE urls.id = v.id"


def _cursor(conn: Connection) -> psycopg.Cursor[Any]:
    """A cursor of the connection's own psycopg connection (same transaction)."""
    import psycopg  # loaded with the engine already; a process on SQLite never comes here

    raw = conn.connection.dbapi_connection
    assert isinstance(raw, psycopg.Connection)
    return raw.cursor()


def _translate(exc: Exception) -> StoreError:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, unavailable_errors()):
        return StoreUnavailable(f"committing the slot: database unavailable: {message}")
    return StoreError(f"committing the slot failed: {message}")


def _copy(
    cur: psycopg.Cursor[Any], copy_sql: str, types: Sequence[str], rows: Sequence[tuple[Any, ...]]
) -> None:
    with cur.copy(copy_sql) as copy:
        copy.set_types(types)
        for row in rows:
            copy.write_row(row)


def copy_rows(
    conn: Connection, copy_sql: str, types: Sequence[str], rows: Sequence[tuple[Any, ...]]
) -> None:
    """COPY ``rows`` in binary, with the columns' ``types`` (nothing when ``rows`` is empty)."""
    if not rows:
        return
    try:
        with _cursor(conn) as cur:
            _copy(cur, copy_sql, types, rows)
    except driver_errors() as exc:
        raise _translate(exc) from exc


def update_ok(conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    """Apply the successful polls' rows (``OK_COLUMNS`` order) to ``urls``; one row per URL."""
    if not rows:
        return
    try:
        with _cursor(conn) as cur:
            cur.execute(_OK_TABLE)
            _copy(cur, _OK_COPY, _OK_TYPES, rows)
            cur.execute(_OK_APPLY)
    except driver_errors() as exc:
        raise _translate(exc) from exc
