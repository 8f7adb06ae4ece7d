"""discovery: sources to follow links from, and the pages found new

- ``sources``: a watched-or-not URL an operator asked the service to discover from, with its
  scope (same host or allowed domains, include/exclude patterns as JSON lists), optional
  topic keywords, a maximum depth, a page budget per slot and per run, whether what it finds
  is added to the watch list, its learned state (JSON: the foragers' weblogs) and its
  running counts (discovery polls made, new pages found). ``removed_at`` marks a removed
  source (its discovered rows are kept).
- ``discovered``: one row per URL found new (first finder wins: unique ``url``), with its
  source, when found, its depth and path length, the page's own date when it had one
  (``lastmod``), a topical score (None without a topic), whether it was added to the watch
  list (``url_id`` then), when a source page last linked it, and when and why it expired.

Revision ID: 0005
Revises: 0003
Create Date: 2026-11-23 22:20:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "sources",
        sa.Column("id", ID, nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("allowed_domains", sa.Text(), nullable=False),
        sa.Column("include", sa.Text(), nullable=False),
        sa.Column("exclude", sa.Text(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=True),
        sa.Column("max_depth", sa.Integer(), nullable=False),
        sa.Column("budget_per_slot", sa.Integer(), nullable=False),
        sa.Column("budget_per_run", sa.Integer(), nullable=True),
        sa.Column("auto_watch", sa.Boolean(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("removed_at", TS, nullable=True),
        sa.Column("state", sa.Text(), nullable=True),
        sa.Column("polls", sa.BigInteger(), nullable=False),
        sa.Column("found", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sources")),
        sa.UniqueConstraint("url", name=op.f("uq_sources_url")),
    )
    op.create_table(
        "discovered",
        sa.Column("id", ID, nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("source_id", ID, nullable=False),
        sa.Column("found_at", TS, nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("path_length", sa.Integer(), nullable=False),
        sa.Column("lastmod", TS, nullable=True),
        sa.Column("on_topic", sa.Float(), nullable=True),
        sa.Column("watched", sa.Boolean(), nullable=False),
        sa.Column("url_id", sa.BigInteger(), nullable=True),
        sa.Column("last_linked_at", TS, nullable=False),
        sa.Column("expired_at", TS, nullable=True),
        sa.Column("expire_reason", sa.String(length=16), nullable=True),
        sa.ForeignKeyConstraint(
            ["source_id"], ["sources.id"], name=op.f("fk_discovered_source_id_sources")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_discovered")),
        sa.UniqueConstraint("url", name=op.f("uq_discovered_url")),
    )
    op.create_index(op.f("ix_discovered_found_at"), "discovered", ["found_at"], unique=False)
    op.create_index(op.f("ix_discovered_source_id"), "discovered", ["source_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_discovered_source_id"), table_name="discovered")
    op.drop_index(op.f("ix_discovered_found_at"), table_name="discovered")
    op.drop_table("discovered")
    op.drop_table("sources")
