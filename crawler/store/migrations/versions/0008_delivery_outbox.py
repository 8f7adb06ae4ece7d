"""delivery: the outbox of events, the webhook destinations and the per-destination state

- ``events``: one row per event (``page.changed``, ``page.discovered``, ...) written in the
  transaction that commits what it reports; ``fanned_out`` once its deliveries exist;
- ``destinations``: webhook URL, secret, filters, disabled (410) and paused (Retry-After);
- ``deliveries``: one row per (event, destination): status, attempts, next attempt, the
  last answer.

Revision ID: delivery_outbox
Revises: history
Create Date: 2026-11-26 14:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "delivery_outbox"
down_revision: str | None = "history"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("url_id", sa.BigInteger(), nullable=True),
        sa.Column("slot", sa.BigInteger(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("fanned_out", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    op.create_index(op.f("ix_events_fanned_out_id"), "events", ["fanned_out", "id"], unique=False)
    op.create_table(
        "destinations",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("tags", sa.Text(), nullable=False),
        sa.Column("event_types", sa.Text(), nullable=False),
        sa.Column("url_pattern", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("disabled_at", TS, nullable=True),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.Column("paused_until", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_destinations")),
    )
    op.create_table(
        "deliveries",
        sa.Column("event_id", BIG_ID, nullable=False),
        sa.Column("destination_id", BIG_ID, nullable=False),
        sa.Column("url_id", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", TS, nullable=False),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("claimed_at", TS, nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.ForeignKeyConstraint(
            ["destination_id"],
            ["destinations.id"],
            name=op.f("fk_deliveries_destination_id_destinations"),
        ),
        sa.ForeignKeyConstraint(
            ["event_id"], ["events.id"], name=op.f("fk_deliveries_event_id_events")
        ),
        sa.PrimaryKeyConstraint("event_id", "destination_id", name=op.f("pk_deliveries")),
    )
    op.create_index(
        op.f("ix_deliveries_status_next_attempt_at"),
        "deliveries",
        ["status", "next_attempt_at"],
        unique=False,
    )
    op.create_index(
        op.f("ix_deliveries_destination_id_url_id_status_event_id"),
        "deliveries",
        ["destination_id", "url_id", "status", "event_id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(
        op.f("ix_deliveries_destination_id_url_id_status_event_id"), table_name="deliveries"
    )
    op.drop_index(op.f("ix_deliveries_status_next_attempt_at"), table_name="deliveries")
    op.drop_table("deliveries")
    op.drop_table("destinations")
    op.drop_index(op.f("ix_events_fanned_out_id"), table_name="events")
    op.drop_table("events")
