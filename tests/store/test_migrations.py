"""The Alembic migrations build exactly the schema of the models, on both databases."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from crawler.store import Store, head_revision
from crawler.store._migrate import MIGRATIONS
from crawler.store.models import Base


def test_upgrade_empty_database_matches_models(empty_database_url: str) -> None:
    store = Store(empty_database_url)
    try:
        assert store.revision() is None
        store.upgrade()
        assert store.revision() == head_revision()
        store.upgrade()  # idempotent
        with store.engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            diffs = compare_metadata(ctx, Base.metadata)
            tables = set(inspect(conn).get_table_names())
        assert diffs == []
        assert set(Base.metadata.tables) <= tables
    finally:
        store.close()


def test_downgrade_to_base_and_back(empty_database_url: str) -> None:
    from alembic import command

    from crawler.store._migrate import alembic_config

    store = Store(empty_database_url)
    try:
        store.upgrade()
        cfg = alembic_config()
        with store.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "base")
        assert store.revision() is None
        store.upgrade()
        assert store.revision() == head_revision()
    finally:
        store.close()


def test_migrations_ship_inside_the_package() -> None:
    assert (MIGRATIONS / "env.py").is_file()
    assert any(MIGRATIONS.glob("versions/0001_*.py"))
