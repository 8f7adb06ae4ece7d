"""the poll log without a foreign key to urls

The poll log is the one table written for every poll. On PostgreSQL its foreign key made every
logged poll run a referential-integrity query on ``urls`` (a row lock included): half of what
the server spent on the log (10 of 20 µs per poll). The key guarded nothing that can happen:
URL rows are never deleted (removal sets ``removed_at``), and the log's rows are written only by
the crawl loop, for URLs it loaded from ``urls``. The changes table keeps its key (a change is
rare, and it is the user-facing history).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 07:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEY = "fk_poll_log_url_id_urls"


def upgrade() -> None:
    with op.batch_alter_table("poll_log") as batch:  # SQLite: the table is rebuilt
        batch.drop_constraint(_KEY, type_="foreignkey")


def downgrade() -> None:
    with op.batch_alter_table("poll_log") as batch:
        batch.create_foreign_key(_KEY, "urls", ["url_id"], ["id"])
