"""the service's politeness cap per host

``host_caps``: one row per host that has a cap (polls per slot), what sets it, the polls per
slot the scheduler plans for the host and whether the cap binds. Written by the running
service (``crawler.service._caps``) when a cap or its binding changes, so that ``crawler
list`` and ``crawler stats`` (other processes) can say where politeness limits the polling.

Revision ID: 0004b
Revises: 0004
Create Date: 2026-11-23 22:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004b"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "host_caps",
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("cap", sa.Float(), nullable=False),
        sa.Column("planned", sa.Float(), nullable=False),
        sa.Column("binding", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.String(length=16), nullable=False),
        sa.Column("until", TS, nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("host", name=op.f("pk_host_caps")),
    )


def downgrade() -> None:
    op.drop_table("host_caps")
