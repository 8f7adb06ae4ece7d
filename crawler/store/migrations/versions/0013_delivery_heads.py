"""delivery heads: each (destination, URL) queue's next pending delivery, flagged

A claim used to find the deliveries it may send with a ``NOT EXISTS`` over the earlier
pending deliveries of the same URL; PostgreSQL planned it as a nested loop over every
pending row (about 100 s per claim with 17,000 deliveries pending). ``deliveries.head``
flags the one pending delivery of each (destination, URL) with the smallest event id
(every pending delivery of an event without a URL), kept by the writes that change what is
pending, and ``(destination_id, head, next_attempt_at, event_id)`` lets a claim read the due heads
alone. The upgrade computes the flag of the rows already there.

Revision ID: delivery_heads
Revises: site_counts
Create Date: 2026-11-26 17:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "delivery_heads"
down_revision: str | None = "site_counts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MARK_HEADS = """
UPDATE deliveries SET head = true
WHERE status = 'pending' AND (
    url_id IS NULL OR event_id = (
        SELECT min(d.event_id) FROM deliveries d
        WHERE d.destination_id = deliveries.destination_id
          AND d.url_id = deliveries.url_id AND d.status = 'pending'
    )
)
"""


def upgrade() -> None:
    with op.batch_alter_table("deliveries") as batch:
        batch.add_column(sa.Column("head", sa.Boolean(), server_default=sa.false(), nullable=False))
    op.execute(MARK_HEADS)
    op.create_index(
        op.f("ix_deliveries_destination_id_head_next_attempt_at_event_id"),
        "deliveries",
        ["destination_id", "head", "next_attempt_at", "event_id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(
        op.f("ix_deliveries_destination_id_head_next_attempt_at_event_id"), table_name="deliveries"
    )
    with op.batch_alter_table("deliveries") as batch:
        batch.drop_column("head")
