"""cluster: workers, site leases with fencing epochs, the coordinator's state

For several ``crawler run --cluster`` workers on one PostgreSQL:

- ``cluster_workers``: one row per live worker (capacity, heartbeat by the database's
  clock, what it reports: sites, weight, multiplier, slot);
- ``cluster_leases``: the owner of each site (``sites.host``) and its fencing token
  ``epoch`` (only grows; bumped on every change of owner) and ``released_epoch``, the
  revoked epoch its old owner acknowledged (it has stopped polling the site: hand it over);
- ``cluster_state``: one row: the coordinator, the assignment version and the last
  packing's figures (shortfall, overloads, moves, the automaton's Th and N).

The site of a URL is already ``sites.host`` through ``urls.site_id`` (indexed): no new
column on ``urls``.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 22:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "cluster_workers",
        sa.Column("worker_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("capacity", sa.Float(), nullable=False),
        sa.Column("metrics_url", sa.Text(), nullable=True),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("heartbeat_at", TS, nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("sites", sa.Integer(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("multiplier", sa.Float(), nullable=True),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("worker_id", name=op.f("pk_cluster_workers")),
    )
    op.create_table(
        "cluster_leases",
        sa.Column("site", sa.String(length=255), nullable=False),
        sa.Column("worker_id", sa.String(length=32), nullable=True),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("assigned_at", TS, nullable=True),
        sa.Column("released_epoch", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("site", name=op.f("pk_cluster_leases")),
    )
    op.create_index(
        op.f("ix_cluster_leases_worker_id"), "cluster_leases", ["worker_id"], unique=False
    )
    op.create_table(
        "cluster_state",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("coordinator", sa.String(length=32), nullable=True),
        sa.Column("coordinator_since", TS, nullable=True),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("live_workers", sa.Integer(), nullable=False),
        sa.Column("total_weight", sa.Float(), nullable=False),
        sa.Column("total_capacity", sa.Float(), nullable=False),
        sa.Column("shortfall_workers", sa.Integer(), nullable=False),
        sa.Column("shortfall_capacity", sa.Float(), nullable=False),
        sa.Column("overloads_total", sa.BigInteger(), nullable=False),
        sa.Column("moves_total", sa.BigInteger(), nullable=False),
        sa.Column("threshold", sa.Integer(), nullable=True),
        sa.Column("states", sa.Integer(), nullable=True),
        sa.Column("updated_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cluster_state")),
    )


def downgrade() -> None:
    op.drop_table("cluster_state")
    op.drop_index(op.f("ix_cluster_leases_worker_id"), table_name="cluster_leases")
    op.drop_table("cluster_leases")
    op.drop_table("cluster_workers")
