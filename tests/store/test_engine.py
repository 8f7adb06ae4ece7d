"""Database URLs and SQLite pragmas."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from crawler.store import Store, sync_url


def test_sync_url_mapping() -> None:
    assert sync_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert sync_url("postgresql+asyncpg://u:p@h:5/db") == "postgresql+psycopg://u:p@h:5/db"
    assert sync_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    assert sync_url("sqlite:///x.db") == "sqlite:///x.db"
    with pytest.raises(ValueError, match="unsupported"):
        sync_url("mysql://u@h/db")


def test_sqlite_pragmas_and_parent_directory(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'sub' / 'dir' / 'c.db'}")
    try:
        store.upgrade()
        with store.engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
            assert conn.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL
            assert int(conn.execute(text("PRAGMA busy_timeout")).scalar() or 0) > 0
            # a slot's pages are copied back every 10,000 WAL pages, not SQLite's 1,000
            assert conn.execute(text("PRAGMA wal_autocheckpoint")).scalar() == 10_000
    finally:
        store.close()
