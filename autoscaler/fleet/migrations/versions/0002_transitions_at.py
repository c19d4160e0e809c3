"""An index on transitions.at: each tick reads the launch outcomes of the last 6 hours
(service/control/backoff.py), and without it that read scans every transition ever kept
(benchmarks/bench_surfaces.py: +42 ms a tick per 200,000 older rows; flat with it).

Revision ID: 0002_transitions_at
Revises: 0001_baseline
"""

from __future__ import annotations

from alembic import op

revision = "0002_transitions_at"
down_revision: str | None = "0001_baseline"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_index("ix_transitions_at", "transitions", ["at"])


def downgrade() -> None:
    op.drop_index("ix_transitions_at", table_name="transitions")
