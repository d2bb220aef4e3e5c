"""Isolation of each eval run; hidden (randomised) code test cases.

- `eval_runs.isolation`: how code submissions ran in the run ("bwrap 0.11.0 (bundled)",
  "rlimit (UNISOLATED, opted in)", "none: ..."); NULL for runs stored before this revision.
- `code_test_cases.hidden`: 1 for a case the gate drew from the item's input domains (never shown in
  a prompt nor exported in a public config's `info`), 0 for a visible seed case.
- `code_tasks.hidden_seed`: the random seed those cases were drawn with (NULL: none drawn).

Columns are only added (no table rebuild, no data touched); downgrade drops them again, after
deleting the hidden cases, and refuses (without `-x allow_data_loss=true`) when runs are stored.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from scaling_book.store.migration_helpers import refuse_data_loss

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("eval_runs", sa.Column("isolation", sa.String(80), nullable=True))
    op.add_column("code_test_cases", sa.Column("hidden", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.add_column("code_tasks", sa.Column("hidden_seed", sa.Integer(), nullable=True))


def downgrade() -> None:
    # The isolation each stored run was graded under is run history: refuse to drop it silently.
    refuse_data_loss(revision, ["eval_runs"])
    # Hidden cases must not turn into visible ones once the flag is gone (`build` draws them again).
    op.execute("DELETE FROM code_test_cases WHERE hidden")
    # plain DROP COLUMN (SQLite 3.35+): a batch rebuild would break the views of 0002
    op.drop_column("code_tasks", "hidden_seed")
    op.drop_column("code_test_cases", "hidden")
    op.drop_column("eval_runs", "isolation")
