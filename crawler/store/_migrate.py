"""Alembic, configured programmatically: the migration scripts ship inside the package
(``crawler/store/migrations``), so ``upgrade`` works from a non-editable install too.

Several processes started at once on one database (the replicas of a cluster) would each
run the migrations: on an empty schema two of them create ``alembic_version`` or the first
tables together and one fails. On PostgreSQL ``upgrade`` therefore takes a transaction
advisory lock of its schema first (``pg_advisory_xact_lock``, released when the
migration's transaction ends): the others wait, then find the schema at head and do
nothing. The migration runs in that one transaction (PostgreSQL's DDL is transactional).

A process whose database is at head (every start after the first, every CLI command)
never imports Alembic: it reads the database's revision with plain SQL, as Alembic reads
it, and compares it with ``HEAD_REVISION``. Alembic and what it loads (Mako, Pygments)
took 0.15 s of a CLI command's 1.7 s on a slow 2-core machine (2026-11-28).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text

from crawler.store._lock import NAMESPACE, lock_key

if TYPE_CHECKING:
    from alembic.config import Config

#: the role of the migrations' advisory lock (``crawler.store._lock.lock_key``)
MIGRATE_ROLE = "migrate"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
#: The newest revision of the packaged migrations. A new migration sets this to its own
#: ``revision`` (a test compares the two and says so).
HEAD_REVISION = "site_edit_versions"
#: Alembic's table of the database's revision (its default name)
VERSION_TABLE = "alembic_version"


def alembic_config(database_url: str | None = None) -> Config:
    """An Alembic Config pointing at the packaged migrations."""
    from alembic.config import Config

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
    from alembic import command

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


def head_revision() -> str:
    """The newest revision of the packaged migrations (``HEAD_REVISION``)."""
    return HEAD_REVISION


def scripts_head() -> str | None:
    """The newest revision as Alembic reads it from the migration scripts: what
    ``HEAD_REVISION`` must say."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The database's revision: the row of Alembic's version table (None: no table or no
    row). The migrations are one line of revisions, so the table holds one row at most."""
    with engine.connect() as conn:
        if not inspect(conn).has_table(VERSION_TABLE):
            return None
        rows = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    if len(rows) > 1:
        raise RuntimeError(
            f"{VERSION_TABLE} holds {len(rows)} revisions ({', '.join(map(str, rows))}), "
            "where the crawler's migrations are one line: keep the row of the newest and "
            f"delete the others (the newest is {HEAD_REVISION})"
        )
    return str(rows[0]) if rows else None
