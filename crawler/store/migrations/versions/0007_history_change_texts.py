"""change history: the before of each change, and the readable form of the kept texts

- ``changes.snapshot_format``: 0 for the snapshots written before (the text as extracted, read
  with its whitespace collapsed: one line), 1 for a line per block element.
- ``change_baselines``: per URL, the text of its version just before its oldest kept change
  (written by its baseline poll; moved forward by the retention of ``changes``), so that every
  kept change has a before without storing each text twice.
- ``ix_changes_detected_at``: the export and feed of changes read them by time.

Revision ID: history
Revises: 0006
Create Date: 2026-11-26 14:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "history"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)
ZERO = sa.text("0")


def upgrade() -> None:
    # a constant default: SQLite and PostgreSQL add the column without rewriting the table
    op.add_column(
        "changes",
        sa.Column(
            "snapshot_format", sa.SmallInteger(), nullable=False, server_default=sa.text("0")
        ),
    )
    op.create_index(op.f("ix_changes_detected_at"), "changes", ["detected_at"], unique=False)
    op.create_table(
        "change_baselines",
        sa.Column("url_id", sa.BigInteger(), nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.Column("recorded_at", TS, nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=True),
        sa.Column("snapshot", sa.LargeBinary(), nullable=True),
        sa.Column(
            "snapshot_format", sa.SmallInteger(), nullable=False, server_default=sa.text("0")
        ),
        sa.PrimaryKeyConstraint("url_id", name=op.f("pk_change_baselines")),
    )


def downgrade() -> None:
    op.drop_table("change_baselines")
    op.drop_index(op.f("ix_changes_detected_at"), table_name="changes")
    with op.batch_alter_table("changes") as batch:  # SQLite before 3.35 cannot drop a column
        batch.drop_column("snapshot_format")
