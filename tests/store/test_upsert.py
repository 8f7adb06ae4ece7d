"""``upsert``: the cached text form and the dialect construct mean the same on both
databases (insert, update of the named columns only, do nothing, typed binds), and a row
that leaves out a column with a Python-side default still gets that default."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import (
    Boolean,
    Column,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    func,
    select,
)

from crawler.store._engine import sync_url
from crawler.store._upsert import upsert
from crawler.store.models import UTCDateTime

META = MetaData()
THINGS = Table(
    "upsert_things",
    META,
    Column("name", String(32), primary_key=True),
    Column("n", Integer),
    Column("seen", UTCDateTime()),
    Column("flag", Boolean),
    Column("kept", Integer, default=7),  # Python-side: only the construct fills it in
)


@pytest.fixture
def engine(empty_database_url: str) -> Iterator[Engine]:
    engine = create_engine(sync_url(empty_database_url))
    META.create_all(engine)
    try:
        yield engine
    finally:
        META.drop_all(engine)
        engine.dispose()


def _rows(engine: Engine) -> dict[str, tuple[object, ...]]:
    with engine.connect() as conn:
        found = conn.execute(select(THINGS).order_by(THINGS.c.name)).all()
    return {r.name: (r.n, r.seen, r.flag, r.kept) for r in found}


def test_insert_update_and_do_nothing(engine: Engine) -> None:
    t1, t2 = datetime(2026, 11, 28, 12, tzinfo=UTC), datetime(2026, 11, 28, 13, tzinfo=UTC)
    with engine.begin() as conn:
        rows = [
            {"name": "a", "n": 1, "seen": t1, "flag": True, "kept": 1},
            {"name": "b", "n": 2, "seen": t1, "flag": False, "kept": 2},
        ]
        upsert(conn, THINGS, rows, ["name"], ["n", "seen"])
    with engine.begin() as conn:  # the conflict updates n and seen only
        upsert(conn, THINGS, [{"name": "a", "n": 10, "seen": t2, "flag": False, "kept": 9}],
               ["name"], ["n", "seen"])  # fmt: skip
        upsert(conn, THINGS, [{"name": "b", "n": 20, "seen": t2, "flag": True, "kept": 9}],
               ["name"])  # fmt: skip
    assert _rows(engine) == {"a": (10, t2, True, 1), "b": (2, t1, False, 2)}


def test_a_left_out_default_is_filled_and_set_expressions_apply(engine: Engine) -> None:
    with engine.begin() as conn:
        upsert(conn, THINGS, [{"name": "a", "n": 1}], ["name"], ["n"])
        upsert(conn, THINGS, [{"name": "a", "n": 5}], ["name"], set_={"n": THINGS.c.n + 1})
        upsert(conn, THINGS, [{"name": "c", "n": 3}], ["name"], set_={"n": func.abs(-4)})
    assert _rows(engine) == {"a": (2, None, None, 7), "c": (3, None, None, 7)}
