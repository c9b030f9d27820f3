"""The job history's first schema: the ``job_history`` table and its indexes.

Written out, not generated from ``schema.py`` at run time: a revision is what the schema was when it was written,
whatever the models say later.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the table and the indexes the listings and retention use."""
    op.create_table(
        "job_history",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("uid", sa.String(64), nullable=False, unique=True),
        sa.Column("namespace", sa.String(253), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("queue", sa.String(253), nullable=False),
        sa.Column("job_type", sa.String(253), nullable=False),
        sa.Column("phase", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("submitted_at", sa.DateTime(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("ended_at", sa.DateTime(), nullable=False),
        sa.Column("queueing_seconds", sa.Float(), nullable=True),
        sa.Column("run_seconds", sa.Float(), nullable=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("status", sa.JSON(), nullable=False),
        sa.Column("placements", sa.JSON(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_job_history_ended", "job_history", ["ended_at", "id"])
    op.create_index("ix_job_history_namespace_ended", "job_history", ["namespace", "ended_at"])
    op.create_index("ix_job_history_queue_ended", "job_history", ["queue", "ended_at"])
    op.create_index("ix_job_history_phase_ended", "job_history", ["phase", "ended_at"])


def downgrade() -> None:
    """Drop the table (its indexes go with it)."""
    op.drop_table("job_history")
