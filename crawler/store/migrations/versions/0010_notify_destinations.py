"""notify destinations: a destination's notification format and body template

Destinations that are apprise URLs (email, Slack, ntfy, ...) rather than webhooks carry
the format of their body (``text``, ``markdown``, ``html``) and an optional template
(``string.Template`` fields); both are null for a webhook.

Revision ID: notify_destinations
Revises: service_fence
Create Date: 2026-11-26 15:50:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "notify_destinations"
down_revision: str | None = "service_fence"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("destinations") as batch:
        batch.add_column(sa.Column("body_format", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("template", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("destinations") as batch:
        batch.drop_column("template")
        batch.drop_column("body_format")
