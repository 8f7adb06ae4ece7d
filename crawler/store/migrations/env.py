"""Alembic environment: runs on the connection handed over by crawler.store._migrate, or
on ``sqlalchemy.url`` (any URL the store accepts) when run by the ``alembic`` command."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from crawler.store._engine import make_engine
from crawler.store.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise RuntimeError("set sqlalchemy.url (alembic -x or alembic.ini) to the database URL")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("offline (--sql) migrations are not supported; run against a database")
run_migrations_online()
