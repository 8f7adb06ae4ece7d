"""Dialect-specific INSERT ... ON CONFLICT for SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table
from sqlalchemy.dialects import postgresql, sqlite


def upsert(
    conn: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    keys: Sequence[str],
    update: Sequence[str] | None = None,
    set_: Mapping[str, Any] | None = None,
) -> None:
    """Insert ``rows``; on a key conflict update the columns ``update`` from the new row
    (or apply ``set_``), or do nothing when neither is given."""
    if not rows:
        return
    dialect = conn.dialect.name
    if dialect == "postgresql":
        pg = postgresql.insert(table)
        values = dict(set_ or {}) | {c: pg.excluded[c] for c in update or ()}
        stmt: Any = (
            pg.on_conflict_do_update(index_elements=list(keys), set_=values)
            if values
            else pg.on_conflict_do_nothing(index_elements=list(keys))
        )
    elif dialect == "sqlite":
        lite = sqlite.insert(table)
        values = dict(set_ or {}) | {c: lite.excluded[c] for c in update or ()}
        stmt = (
            lite.on_conflict_do_update(index_elements=list(keys), set_=values)
            if values
            else lite.on_conflict_do_nothing(index_elements=list(keys))
        )
    else:  # pragma: no cover - guarded by sync_url
        raise ValueError(f"unsupported database {dialect}")
    conn.execute(stmt, list(rows))
