"""service fence: the fencing token of the one-service-per-database lock

``service_fence`` holds, per lock role, a ``generation`` that a service bumps when it takes
the lock; every slot commit checks in its own transaction that the generation is still the
one it took, so a service whose lock session died and was replaced commits nothing
(``crawler/store/_fence.py``).

Revision ID: service_fence
Revises: delivery_outbox
Create Date: 2026-11-26 14:10:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "service_fence"
down_revision: str | None = "delivery_outbox"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "service_fence",
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column("holder", sa.Text(), nullable=True),
        sa.Column("taken_at", TS, nullable=True),
        sa.Column("checked_at", TS, nullable=True),
        sa.Column("released_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("role", name=op.f("pk_service_fence")),
    )


def downgrade() -> None:
    op.drop_table("service_fence")
