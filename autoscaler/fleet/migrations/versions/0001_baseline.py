"""Baseline: the ten tables of c53b69e, the last version without schema versions.

Revision ID: 0001_baseline
Revises:
"""

from __future__ import annotations

from alembic import op

from autoscaler.fleet.migrations import baseline

revision = "0001_baseline"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    baseline.metadata().create_all(op.get_bind())


def downgrade() -> None:
    baseline.metadata().drop_all(op.get_bind())
