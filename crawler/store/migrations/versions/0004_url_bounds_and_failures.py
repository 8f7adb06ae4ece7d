"""operator bounds, pause, tags and the failure record of each URL

- ``urls.min_interval_s`` / ``urls.max_interval_s``: the operator's bounds in seconds
  (NULL: the setting's default; 0: explicitly none, whatever the default);
- ``urls.paused``: not polled, nothing forgotten;
- the failure record the service keeps in each slot's own transaction (so a kill -9
  keeps it): ``fail_streak`` (consecutive failed polls), ``fail_permanent`` (the trailing
  run of permanent ones: 404, unknown host), ``retired``, ``fail_kind`` and ``fail_error``
  (the last failure), ``failing_since`` (the streak's first failure);
- ``urls.revive_version``: the watch-list version at which an operator asked to revive
  the URL (the running service revives it when it sees a newer one);
- ``url_tags``: any number of tags per URL, indexed by tag (``--tag`` selections).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 22:15:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("urls") as batch:  # SQLite: the table is rebuilt
        batch.add_column(sa.Column("min_interval_s", sa.Float(), nullable=True))
        batch.add_column(sa.Column("max_interval_s", sa.Float(), nullable=True))
        batch.add_column(
            sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("fail_streak", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("fail_permanent", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("retired", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("fail_kind", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("fail_error", sa.Text(), nullable=True))
        batch.add_column(sa.Column("failing_since", TS, nullable=True))
        batch.add_column(sa.Column("revive_version", sa.BigInteger(), nullable=True))
    op.create_table(
        "url_tags",
        sa.Column("url_id", ID, nullable=False),
        sa.Column("tag", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["url_id"], ["urls.id"], name=op.f("fk_url_tags_url_id_urls")),
        sa.PrimaryKeyConstraint("url_id", "tag", name=op.f("pk_url_tags")),
    )
    op.create_index(op.f("ix_url_tags_tag"), "url_tags", ["tag"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_url_tags_tag"), table_name="url_tags")
    op.drop_table("url_tags")
    with op.batch_alter_table("urls") as batch:
        for name in (
            "revive_version",
            "failing_since",
            "fail_error",
            "fail_kind",
            "retired",
            "fail_permanent",
            "fail_streak",
            "paused",
            "max_interval_s",
            "min_interval_s",
        ):
            batch.drop_column(name)
