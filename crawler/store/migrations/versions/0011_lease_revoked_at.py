"""lease revoked at: a move between live workers asks the old owner to release

A site moving between two live workers is first *revoked*: its lease keeps its owner and
epoch, and ``revoked_at`` says since when its owner is asked to give it up. The owner stops
polling it at its next slot start and releases it (owner NULL, epoch bumped) in the
transaction of a later slot's commit, after every slot that polled it has committed, so
the polls, changes and learning of its slot in flight land instead of being fenced.

Revision ID: lease_revoked_at
Revises: notify_destinations
Create Date: 2026-11-26 18:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "lease_revoked_at"
down_revision: str | None = "notify_destinations"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("cluster_leases") as batch:
        batch.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cluster_leases") as batch:
        batch.drop_column("revoked_at")
