"""transfer_checks.seed becomes optional: transfer-check intervals are no longer bootstrapped.

The seed fed the percentile bootstrap of the transfer check's intervals; they are now Wilson and
Newcombe score intervals (scaling_book/runs/gap_statistics.py), which use no random numbers. New
checks store NULL; the seeds of earlier checks are kept (their stored intervals came from them).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from scaling_book.store.migration_helpers import rebuild_table

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with rebuild_table("transfer_checks") as batch_op:
        batch_op.alter_column("seed", existing_type=sa.Integer(), nullable=True)


def downgrade() -> None:
    # NOT NULL again: checks made since have no seed; 0 stands for "no seed" in the old schema.
    op.execute("UPDATE transfer_checks SET seed = 0 WHERE seed IS NULL")
    with rebuild_table("transfer_checks") as batch_op:
        batch_op.alter_column("seed", existing_type=sa.Integer(), nullable=False)
