"""The Alembic migrations build exactly the schema of the models, on both databases."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from crawler.store import Store, head_revision
from crawler.store._migrate import HEAD_REVISION, MIGRATIONS, current_revision, scripts_head
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


def _url_as_first_written(store: Store) -> int:
    """A watched URL as the first schema held it (the store's ``add_urls`` writes the
    columns of the newest one); returns its id."""
    from datetime import UTC, datetime

    from sqlalchemy import text

    now = datetime.now(UTC)
    if store.engine.dialect.name == "sqlite":
        now = now.replace(tzinfo=None)
    with store.engine.begin() as conn:
        conn.execute(
            text("INSERT INTO sites (host, created_at) VALUES ('example.com', :now)"), {"now": now}
        )
        conn.execute(
            text(
                "INSERT INTO urls (url, site_id, importance, added_at, polls, hits, misses, "
                "not_modified, errors) SELECT 'http://example.com/a', id, 1.0, :now, 0, 0, 0, "
                "0, 0 FROM sites"
            ),
            {"now": now},
        )
        return int(conn.execute(text("SELECT id FROM urls")).scalar_one())


def test_0002_keeps_the_poll_log_and_drops_its_foreign_key(empty_database_url: str) -> None:
    from datetime import UTC, datetime

    from sqlalchemy import insert, select

    from crawler.store._migrate import upgrade
    from crawler.store.models import poll_log

    store = Store(empty_database_url)
    try:
        upgrade(store.engine, "0001")
        url_id = _url_as_first_written(store)
        row = {
            "url_id": url_id, "slot": 1, "polled_at": datetime.now(UTC), "status": 200,
            "outcome": "miss", "duration_s": 0.1, "bytes": 10,
        }  # fmt: skip
        with store.engine.begin() as conn:
            conn.execute(insert(poll_log), [row])
        upgrade(store.engine, "0002")
        assert store.revision() == "0002"
        with store.engine.begin() as conn:
            conn.execute(insert(poll_log), [{**row, "url_id": 999_999}])  # no key to refuse it
            logged = conn.execute(select(poll_log.c.url_id).order_by(poll_log.c.id)).all()
        assert [r[0] for r in logged] == [url_id, 999_999]
        fks = inspect(store.engine).get_foreign_keys("poll_log")
        assert fks == [] and inspect(store.engine).get_foreign_keys("changes") != []
    finally:
        store.close()


def test_0003_keeps_the_poll_log_and_adds_deferrals_and_truncated(
    empty_database_url: str,
) -> None:
    """From 0002 with data: the logged polls stay (read as not truncated), the slot's
    deferral rows can be written and pruned with the poll log."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import select, text

    from crawler.store import PollRecord, SlotRecord
    from crawler.store._migrate import upgrade
    from crawler.store.models import deferrals, poll_log

    store = Store(empty_database_url)
    try:
        upgrade(store.engine, "0002")
        url_id = _url_as_first_written(store)
        old = datetime.now(UTC) - timedelta(days=30)
        with store.engine.begin() as conn:  # the 0002 columns only, as 0002 wrote them
            conn.execute(
                text(
                    "INSERT INTO poll_log (url_id, slot, polled_at, status, outcome, "
                    "duration_s, bytes) VALUES (:u, 1, :at, 200, 'miss', 0.1, 10)"
                ).bindparams(
                    at=old.replace(tzinfo=None) if "sqlite" in empty_database_url else old
                ),
                {"u": url_id},
            )
        upgrade(store.engine, "0003")  # later revisions add tables of their own
        assert store.revision() == "0003"
        with store.engine.connect() as conn:
            rows = conn.execute(select(poll_log.c.url_id, poll_log.c.truncated)).all()
        assert [(r[0], r[1]) for r in rows] == [(url_id, False)]
        now = datetime.now(UTC)
        slot = SlotRecord(
            2, "lakg", now, 0.5, 1, 0, 1, 0, 0,
            deferrals=(("a.example", "timeout", 3), ("b.example", "politeness", 1)),
        )  # fmt: skip
        store.commit_slot(slot, [PollRecord(url_id, "miss", now, 200, truncated=True)])
        with store.engine.connect() as conn:
            kept = conn.execute(
                select(
                    deferrals.c.slot, deferrals.c.host, deferrals.c.reason, deferrals.c.polls
                ).order_by(deferrals.c.host)
            ).all()
            flags = (
                conn.execute(select(poll_log.c.truncated).order_by(poll_log.c.id)).scalars().all()
            )
        assert [tuple(r) for r in kept] == [
            (2, "a.example", "timeout", 3),
            (2, "b.example", "politeness", 1),
        ]
        assert list(flags) == [False, True]
        # pruned with the poll log: the old poll goes, the recent slot's rows stay
        assert store.prune_poll_log(timedelta(days=7)) == 1
        assert store.stats().deferred == {"politeness": 1, "timeout": 3}
        assert store.prune_poll_log(now + timedelta(seconds=1)) == 1
        assert store.stats().deferred == {}
    finally:
        store.close()


def test_the_head_revision_is_the_newest_migration() -> None:
    assert scripts_head() == HEAD_REVISION, (
        "a migration was added: set HEAD_REVISION in crawler/store/_migrate.py to its revision"
    )


def test_the_revision_is_read_as_alembic_reads_it(empty_database_url: str) -> None:
    store = Store(empty_database_url)

    def alembics_reading() -> str | None:
        with store.engine.connect() as conn:
            revision: str | None = MigrationContext.configure(conn).get_current_revision()
            return revision

    try:
        assert store.revision() is None and alembics_reading() is None
        store.upgrade("change_diffs")  # the revision before the head
        assert store.revision() == alembics_reading() == "change_diffs"
        store.upgrade()
        assert store.revision() == alembics_reading() == HEAD_REVISION
        with store.engine.begin() as conn:
            conn.execute(text("INSERT INTO alembic_version (version_num) VALUES ('stray')"))
        with pytest.raises(RuntimeError, match="holds 2 revisions"):
            current_revision(store.engine)
    finally:
        store.close()
