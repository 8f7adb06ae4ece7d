"""change diffs: each change's unified diff, made once and stored

A change's diff (its text before to its text after) was made again for every webhook send
and, behind a per-process cache, for every feed and API read. ``changes.diff`` keeps it
(zstd-compressed, whole): the deliverer makes it for the first send of the change's event
and writes it with that send's answer; later sends and the feed read it. NULL: not made yet
(delivery off, or a change committed before this column), or no diff can be made (no text
before): readers make it from the texts then. An index on ``(url_id, slot)`` finds the
change of an event (which names it by URL and slot: the slot commit writes both rows before
either has an id).

Revision ID: change_diffs
Revises: delivery_heads
Create Date: 2026-11-26 21:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "change_diffs"
down_revision: str | None = "delivery_heads"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("changes") as batch:
        batch.add_column(sa.Column("diff", sa.LargeBinary(), nullable=True))
    op.create_index(op.f("ix_changes_url_id_slot"), "changes", ["url_id", "slot"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_changes_url_id_slot"), table_name="changes")
    with op.batch_alter_table("changes") as batch:
        batch.drop_column("diff")
