"""deferred polls per slot and host; truncated pages in the poll log

Two things an operator could only see in the metrics, kept in the database:

- ``deferrals``: polls a slot selected but could not make by its deadline (held back by the
  host's politeness delay or back-off, cut by the deadline, or by shutdown). They are not
  polls (no poll-log row, no feedback to the scheduler, not errors), so one row per
  (slot, host, reason) that had any, written in the slot's own transaction, pruned with the
  poll log.
- ``poll_log.truncated``: the page was judged cut at a parse limit (bytes or open elements),
  so a change past the cut goes unseen. False for the rows written before.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 21:15:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "deferrals",
        sa.Column("id", ID, nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("reason", sa.String(length=16), nullable=False),
        sa.Column("polls", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deferrals")),
    )
    op.create_index(op.f("ix_deferrals_started_at"), "deferrals", ["started_at"], unique=False)
    with op.batch_alter_table("poll_log") as batch:  # SQLite: the table is rebuilt
        batch.add_column(
            sa.Column("truncated", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("poll_log") as batch:
        batch.drop_column("truncated")
    op.drop_index(op.f("ix_deferrals_started_at"), table_name="deferrals")
    op.drop_table("deferrals")
