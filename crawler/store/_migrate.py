"""Alembic, configured programmatically: the migration scripts ship inside the package
(``crawler/store/migrations``), so ``upgrade`` works from a non-editable install too.

Several processes started at once on one database (the replicas of a cluster) would each
run the migrations: on an empty schema two of them create ``alembic_version`` or the first
tables together and one fails. On PostgreSQL ``upgrade`` therefore takes a transaction
advisory lock of its schema first (``pg_advisory_xact_lock``, released when the
migration's transaction ends): the others wait, then find the schema at head and do
nothing. The migration runs in that one transaction (PostgreSQL's DDL is transactional).
"""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

from crawler.store._lock import NAMESPACE, lock_key

#: the role of the migrations' advisory lock (``crawler.store._lock.lock_key``)
MIGRATE_ROLE = "migrate"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config(database_url: str | None = None) -> Config:
    """An Alembic Config pointing at the packaged migrations."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if database_url is not None:
        cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the database of ``engine`` to ``revision``.

    A database already at head (every start of the service, every CLI command after the
    first) is left at once, after one read of its revision: Alembic's own no-op upgrade
    loads its environment and every migration script first, 4-8 ms of CPU a call, a third
    of what the CLI's tests spent (2026-11-27). A migration commits its revision with its
    last change (one transaction), so a database read at head has nothing left to apply."""
    if revision == "head" and current_revision(engine) == head_revision():
        return
    cfg = alembic_config()
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":  # one migrating process per schema at a time
            schema = str(conn.execute(text("SELECT current_schema()")).scalar())
            conn.execute(
                text("SELECT pg_advisory_xact_lock(:ns, :key)"),
                {"ns": NAMESPACE, "key": lock_key(schema, MIGRATE_ROLE)},
            )
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


@functools.cache
def head_revision() -> str | None:
    """The newest revision of the packaged migrations (read once: they ship with the code)."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
