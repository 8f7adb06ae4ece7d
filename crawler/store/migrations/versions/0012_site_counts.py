"""cluster at size: a per-site count of watched URLs, revivals indexed, host caps per worker

What a cluster reads per slot, per change and per coordination round must not grow with
the whole watch list:

- ``sites.url_count``: the watched URLs of each site (``removed_at`` NULL), kept by
  PostgreSQL triggers on ``urls`` (a statement trigger for bulk inserts, a row trigger
  for the rare change of ``removed_at`` or ``site_id``, a statement trigger for deletes).
  The coordinator reads it (one row per site) instead of grouping every URL each round.
  SQLite has no cluster mode: there the column is not kept and the store groups URLs.
- partial indexes of ``urls``: ``revive_version`` (only revived URLs have one), and
  ``site_id`` of the URLs with a rule of their own (bounds, pause) and of the failing
  ones, so a worker finds those of its own sites after a change without scanning
  ``urls`` (and a single service reads them without scanning every URL).
- ``host_caps.worker_id``: the cluster worker that wrote a host's row (NULL: a single
  service), so that each worker replaces only its own hosts' rows.

Revision ID: site_counts
Revises: lease_revoked_at
Create Date: 2026-11-26 18:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "site_counts"
down_revision: str | None = "lease_revoked_at"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: (the same text as the models': a migration keeps its own copy)
RULES_WHERE = (
    "removed_at IS NULL AND (min_interval_s IS NOT NULL OR max_interval_s IS NOT NULL OR paused)"
)
FAILING_WHERE = "removed_at IS NULL AND (fail_streak > 0 OR retired)"
_FUNCTIONS = (
    """
CREATE OR REPLACE FUNCTION crawler_url_count_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sites s SET url_count = s.url_count + d.n
  FROM (SELECT site_id, count(*) AS n FROM crawler_new_urls
        WHERE removed_at IS NULL GROUP BY site_id) d
  WHERE s.id = d.site_id;
  RETURN NULL;
END $$
""",
    """
CREATE OR REPLACE FUNCTION crawler_url_count_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE sites s SET url_count = s.url_count - d.n
  FROM (SELECT site_id, count(*) AS n FROM crawler_old_urls
        WHERE removed_at IS NULL GROUP BY site_id) d
  WHERE s.id = d.site_id;
  RETURN NULL;
END $$
""",
    """
CREATE OR REPLACE FUNCTION crawler_url_count_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.removed_at IS NULL THEN
    UPDATE sites SET url_count = url_count - 1 WHERE id = OLD.site_id;
  END IF;
  IF NEW.removed_at IS NULL THEN
    UPDATE sites SET url_count = url_count + 1 WHERE id = NEW.site_id;
  END IF;
  RETURN NULL;
END $$
""",
)
_TRIGGERS = (
    "CREATE TRIGGER crawler_url_count_insert AFTER INSERT ON urls "
    "REFERENCING NEW TABLE AS crawler_new_urls FOR EACH STATEMENT "
    "EXECUTE FUNCTION crawler_url_count_insert()",
    "CREATE TRIGGER crawler_url_count_delete AFTER DELETE ON urls "
    "REFERENCING OLD TABLE AS crawler_old_urls FOR EACH STATEMENT "
    "EXECUTE FUNCTION crawler_url_count_delete()",
    # a column list keeps the trigger off the per-poll updates of urls
    "CREATE TRIGGER crawler_url_count_update AFTER UPDATE OF removed_at, site_id ON urls "
    "FOR EACH ROW WHEN (OLD.removed_at IS DISTINCT FROM NEW.removed_at "
    "OR OLD.site_id IS DISTINCT FROM NEW.site_id) "
    "EXECUTE FUNCTION crawler_url_count_update()",
)


def upgrade() -> None:
    with op.batch_alter_table("sites") as batch:
        batch.add_column(sa.Column("url_count", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("host_caps") as batch:
        batch.add_column(sa.Column("worker_id", sa.String(length=32), nullable=True))
        batch.create_index(batch.f("ix_host_caps_worker_id"), ["worker_id"])
    op.create_index(
        op.f("ix_urls_revive_version"),
        "urls",
        ["revive_version"],
        postgresql_where=sa.text("revive_version IS NOT NULL"),
        sqlite_where=sa.text("revive_version IS NOT NULL"),
    )
    for name, where in (("rules", RULES_WHERE), ("failing", FAILING_WHERE)):
        op.create_index(
            op.f(f"ix_urls_{name}"),
            "urls",
            ["site_id"],
            postgresql_where=sa.text(where),
            sqlite_where=sa.text(where),
        )
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        "UPDATE sites s SET url_count = c.n FROM (SELECT site_id, count(*) AS n FROM urls "
        "WHERE removed_at IS NULL GROUP BY site_id) c WHERE s.id = c.site_id"
    )
    for sql in (*_FUNCTIONS, *_TRIGGERS):
        op.execute(sql)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS crawler_url_count_{name} ON urls")
            op.execute(f"DROP FUNCTION IF EXISTS crawler_url_count_{name}()")
    for name in ("revive_version", "rules", "failing"):
        op.drop_index(op.f(f"ix_urls_{name}"), table_name="urls")
    with op.batch_alter_table("host_caps") as batch:
        batch.drop_index(batch.f("ix_host_caps_worker_id"))
        batch.drop_column("worker_id")
    with op.batch_alter_table("sites") as batch:
        batch.drop_column("url_count")
