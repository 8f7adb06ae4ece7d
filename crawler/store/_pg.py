"""PostgreSQL fast paths: whole batches as array parameters expanded with ``unnest``.

One statement per table per slot, a handful of parameters each: no per-row round trips and
no statement text that grows with the batch (see ``_sql.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, TextClause, text

POLL_LOG = text(
    "INSERT INTO poll_log (url_id, slot, polled_at, status, outcome, duration_s, bytes, "
    "content_hash, error_kind, error) SELECT * FROM unnest("
    "CAST(:url_id AS bigint[]), CAST(:slot AS bigint[]), CAST(:polled_at AS timestamptz[]), "
    "CAST(:status AS int[]), CAST(:outcome AS text[]), CAST(:duration_s AS float8[]), "
    "CAST(:bytes AS bigint[]), CAST(:content_hash AS text[]), CAST(:error_kind AS text[]), "
    "CAST(:error AS text[]))"
)

CHANGES = text(
    "INSERT INTO changes (url_id, slot, detected_at, old_hash, new_hash, snapshot) "
    "SELECT * FROM unnest(CAST(:url_id AS bigint[]), CAST(:slot AS bigint[]), "
    "CAST(:detected_at AS timestamptz[]), CAST(:old_hash AS text[]), "
    "CAST(:new_hash AS text[]), CAST(:snapshot AS bytea[]))"
)

OK_UPDATE = text(
    "UPDATE urls SET polls = urls.polls + 1, hits = urls.hits + v.hit, "
    "misses = urls.misses + v.miss, not_modified = urls.not_modified + v.nm, "
    "last_polled_at = v.at, last_changed_at = coalesce(v.changed, urls.last_changed_at), "
    "last_status = v.status, etag = v.etag, last_modified = v.lm, "
    "last_hash = coalesce(v.hash, urls.last_hash), "
    "last_raw_hash = coalesce(v.raw, urls.last_raw_hash), "
    "first_seen_hash = coalesce(urls.first_seen_hash, v.hash) "
    "FROM unnest(CAST(:b_id AS bigint[]), CAST(:b_hit AS int[]), CAST(:b_miss AS int[]), "
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


POLL_LOG_COLUMNS = (
    "url_id", "slot", "polled_at", "status", "outcome", "duration_s", "bytes", "content_hash",
    "error_kind", "error",
)  # fmt: skip
CHANGES_COLUMNS = ("url_id", "slot", "detected_at", "old_hash", "new_hash", "snapshot")
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
