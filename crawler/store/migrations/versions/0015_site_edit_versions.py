"""cluster edits at size: a per-site edit version, the outbox's events by URL

A watch-list edit (a URL added, removed, revived or its importance changed, anywhere)
bumps the one watch-list version, and every cluster worker then re-read every URL of its
own sites: at 4 workers PostgreSQL planned that as a sequential scan of ``urls`` (2M rows
read per bump per worker at 2M URLs). ``sites.edit_version`` is the watch-list version of
the last edit that changed which of the site's URLs are watched, or their importance,
written in the edit's own transaction (``Store``'s edit paths): on a bump a worker reads
the sites edited after the version it last saw (by this column's index) and re-reads the
URLs of those of its sites only. NULL: not edited since this migration (the sites' URLs
were read whole by every worker at its start).

``events (url_id, type)``: a gained site's health state reads the newest alarm event of
each of its URLs; without it that read scanned the outbox's whole history.

Revision ID: site_edit_versions
Revises: change_diffs
Create Date: 2026-11-27 05:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "site_edit_versions"
down_revision: str | None = "change_diffs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sites") as batch:
        batch.add_column(sa.Column("edit_version", sa.BigInteger(), nullable=True))
    op.create_index(op.f("ix_sites_edit_version"), "sites", ["edit_version"], unique=False)
    op.create_index(op.f("ix_events_url_id_type"), "events", ["url_id", "type"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_events_url_id_type"), table_name="events")
    op.drop_index(op.f("ix_sites_edit_version"), table_name="sites")
    with op.batch_alter_table("sites") as batch:
        batch.drop_column("edit_version")
