"""initial schema: sites, urls, url_state, scheduler_state, slots, poll_log, changes, meta

Revision ID: 0001
Revises:
Create Date: 2026-11-22 17:00:42.694663
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: BIGINT ids, the rowid alias on SQLite (autoincrement)
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "meta",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("int_value", sa.BigInteger(), nullable=True),
        sa.Column("text_value", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_meta")),
    )
    op.create_table(
        "scheduler_state",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("scalars", sa.Text(), nullable=False),
        sa.Column("url_dtype", sa.Text(), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_scheduler_state")),
    )
    op.create_table(
        "sites",
        sa.Column("id", ID, nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sites")),
        sa.UniqueConstraint("host", name=op.f("uq_sites_host")),
    )
    op.create_table(
        "slots",
        sa.Column("id", ID, nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.Column("scheduler", sa.String(length=64), nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("polls", sa.Integer(), nullable=False),
        sa.Column("hits", sa.Integer(), nullable=False),
        sa.Column("misses", sa.Integer(), nullable=False),
        sa.Column("not_modified", sa.Integer(), nullable=False),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("overrun", sa.Boolean(), nullable=False),
        sa.Column("lag_s", sa.Float(), nullable=False),
        sa.Column("capacity", sa.Float(), nullable=False),
        sa.Column("knapsack_fill", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_slots")),
    )
    op.create_index(op.f("ix_slots_started_at"), "slots", ["started_at"], unique=False)

    op.create_table(
        "urls",
        sa.Column("id", ID, nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("site_id", ID, nullable=False),
        sa.Column("importance", sa.Float(), nullable=False),
        sa.Column("selector", sa.Text(), nullable=True),
        sa.Column("ignore_patterns", sa.Text(), nullable=True),
        sa.Column("added_at", TS, nullable=False),
        sa.Column("removed_at", TS, nullable=True),
        sa.Column("etag", sa.Text(), nullable=True),
        sa.Column("last_modified", sa.Text(), nullable=True),
        sa.Column("first_seen_hash", sa.String(length=64), nullable=True),
        sa.Column("last_hash", sa.String(length=64), nullable=True),
        sa.Column("last_raw_hash", sa.String(length=160), nullable=True),
        sa.Column("last_polled_at", TS, nullable=True),
        sa.Column("last_changed_at", TS, nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("polls", sa.BigInteger(), nullable=False),
        sa.Column("hits", sa.BigInteger(), nullable=False),
        sa.Column("misses", sa.BigInteger(), nullable=False),
        sa.Column("not_modified", sa.BigInteger(), nullable=False),
        sa.Column("errors", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["site_id"], ["sites.id"], name=op.f("fk_urls_site_id_sites")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_urls")),
        sa.UniqueConstraint("url", name=op.f("uq_urls_url")),
    )
    op.create_index(op.f("ix_urls_site_id"), "urls", ["site_id"], unique=False)

    op.create_table(
        "changes",
        sa.Column("id", ID, nullable=False),
        sa.Column("url_id", ID, nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.Column("detected_at", TS, nullable=False),
        sa.Column("old_hash", sa.String(length=64), nullable=True),
        sa.Column("new_hash", sa.String(length=64), nullable=True),
        sa.Column("snapshot", sa.LargeBinary(), nullable=True),
        sa.ForeignKeyConstraint(["url_id"], ["urls.id"], name=op.f("fk_changes_url_id_urls")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_changes")),
    )
    op.create_index(
        op.f("ix_changes_url_id_detected_at"), "changes", ["url_id", "detected_at"], unique=False
    )

    op.create_table(
        "poll_log",
        sa.Column("id", ID, nullable=False),
        sa.Column("url_id", ID, nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.Column("polled_at", TS, nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=True),
        sa.Column("error_kind", sa.String(length=64), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["url_id"], ["urls.id"], name=op.f("fk_poll_log_url_id_urls")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_poll_log")),
    )
    op.create_index(op.f("ix_poll_log_polled_at"), "poll_log", ["polled_at"], unique=False)
    op.create_index(
        op.f("ix_poll_log_url_id_polled_at"), "poll_log", ["url_id", "polled_at"], unique=False
    )

    op.create_table(
        "url_state",
        sa.Column("scheduler", sa.String(length=64), nullable=False),
        sa.Column("url_id", ID, nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["url_id"], ["urls.id"], name=op.f("fk_url_state_url_id_urls")),
        sa.PrimaryKeyConstraint("scheduler", "url_id", name=op.f("pk_url_state")),
    )


def downgrade() -> None:
    op.drop_table("url_state")
    op.drop_index(op.f("ix_poll_log_url_id_polled_at"), table_name="poll_log")
    op.drop_index(op.f("ix_poll_log_polled_at"), table_name="poll_log")

    op.drop_table("poll_log")
    op.drop_index(op.f("ix_changes_url_id_detected_at"), table_name="changes")

    op.drop_table("changes")
    op.drop_index(op.f("ix_urls_site_id"), table_name="urls")

    op.drop_table("urls")
    op.drop_index(op.f("ix_slots_started_at"), table_name="slots")

    op.drop_table("slots")
    op.drop_table("sites")
    op.drop_table("scheduler_state")
    op.drop_table("meta")
