"""Driver-level scans: rows in chunks, driver errors as store errors."""

from __future__ import annotations

import pytest

from crawler.store import Store, StoreError
from crawler.store._scan import scan
from tests.store._helpers import add


def test_rows_come_in_chunks_in_order(store: Store) -> None:
    ids = add(store, 7)
    sql = "SELECT id FROM urls ORDER BY id"
    with store.engine.connect() as conn:
        chunks = list(scan(conn, "reading", sql, sql, chunk=3))
    assert [len(c) for c in chunks] == [3, 3, 1]
    assert [row[0] for c in chunks for row in c] == sorted(ids)


def test_parameters_use_each_drivers_placeholder(store: Store) -> None:
    ids = add(store, 4)
    with store.engine.connect() as conn:
        rows = [
            r
            for c in scan(
                conn,
                "reading",
                "SELECT id FROM urls WHERE id > ? ORDER BY id",
                "SELECT id FROM urls WHERE id > %s ORDER BY id",
                (ids[1],),
            )
            for r in c
        ]
    assert [r[0] for r in rows] == sorted(ids)[2:]


def test_a_driver_error_is_a_store_error_that_says_what(store: Store) -> None:
    sql = "SELECT nothing FROM no_such_table"
    with store.engine.connect() as conn, pytest.raises(StoreError, match="reading the moon"):
        list(scan(conn, "reading the moon", sql, sql))
    # the connection pool is still usable afterwards
    assert store.active_urls()[0].size == 0


def test_empty_result_gives_no_chunks(store: Store) -> None:
    sql = "SELECT id FROM urls"
    with store.engine.connect() as conn:
        assert list(scan(conn, "reading", sql, sql)) == []
