"""Dialect-aware statement pieces that keep big batches fast.

psycopg 3 parses every statement text; a statement with thousands of placeholders (a long
``IN (...)`` list or a multi-row VALUES) costs tens of milliseconds to parse, each time.
On PostgreSQL, lists are therefore passed as ONE array parameter (``= ANY(:array)``,
``unnest(...)``), on SQLite as one JSON parameter (``json_each``); on PostgreSQL executemany
goes through psycopg's pipelined ``executemany`` with a short statement (the engine has
``use_insertmanyvalues=False``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Text,
    any_,
    bindparam,
    func,
    literal_column,
    select,
)
from sqlalchemy.dialects.postgresql import ARRAY


def is_postgres(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql"


def among(conn: Connection, column: Any, values: Sequence[Any]) -> ColumnElement[bool]:
    """``column IN values``: one array parameter on PostgreSQL."""
    if is_postgres(conn):
        item = BigInteger() if values and isinstance(values[0], int) else Text()
        param = bindparam(None, list(values), type_=ARRAY(item))
        return column == any_(param)  # type: ignore[no-any-return]
    # SQLite: one JSON parameter (compiling thousands of placeholders is slow too)
    rows: Any = select(literal_column("value")).select_from(
        func.json_each(bindparam(None, json.dumps(list(values)), type_=Text()))
    )
    return column.in_(rows)  # type: ignore[no-any-return]
