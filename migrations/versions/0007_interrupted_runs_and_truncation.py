"""Interrupted runs, truncated rollouts, reasoning and the endpoint of a run.

- `eval_runs.status` and `transfer_checks.status` also allow `interrupted`; `rollout_results.status`
  also allows `truncated` (status columns widen to 12 characters).
- `eval_runs` gains `base_url`, `api_key_var`, `item_limit` (what `scaling-book resume` needs) and
  `host`, `pid`, `heartbeat_at` (to tell a live `running` run from a dead one).
- `rollout_results` gains `finish_reason`, `reasoning` (capped) and `reasoning_chars`.
- `transfer_checks` gains `train_truncated` and `heldout_truncated`.
- A new view `run_truncation`: rollouts, truncated and errored rollouts per complete run and split.

Changing a CHECK constraint on SQLite rebuilds the table (batch mode). The views read these tables,
so they are set aside for the rebuild and recreated after it from their stored definitions
(`scaling_book.store.migration_helpers.views_set_aside`). No row is touched: the rebuild copies every
row, and foreign keys are off for the migration connection (migrations/env.py), so dropping the old
`eval_runs` cascades nothing. The downgrade refuses (without `-x allow_data_loss=true`) while runs
are stored: it would drop their reasoning, finish reasons and endpoints.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from scaling_book.store.migration_helpers import refuse_data_loss, views_set_aside

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

OLD_RUN_STATUSES = "status IN ('running', 'complete', 'failed')"
NEW_RUN_STATUSES = "status IN ('running', 'complete', 'failed', 'interrupted')"
OLD_ROLLOUT_STATUSES = "status IN ('ok', 'error')"
NEW_ROLLOUT_STATUSES = "status IN ('ok', 'error', 'truncated')"

RUN_TRUNCATION = """
    SELECT r.id AS run_id, r.model, r.checkpoint, r.step, r.config, r.transfer_check_id, x.split,
           COUNT(*) AS rollouts,
           SUM(CASE WHEN x.status = 'truncated' THEN 1 ELSE 0 END) AS truncated,
           SUM(CASE WHEN x.status = 'error' THEN 1 ELSE 0 END) AS errors
    FROM eval_runs AS r
    LEFT JOIN transfer_checks AS t ON t.id = r.transfer_check_id
    JOIN rollout_results AS x ON x.run_id = r.id
    WHERE r.status = 'complete' AND (r.transfer_check_id IS NULL OR t.status = 'complete')
    GROUP BY r.id, x.split
"""


def _check_foreign_keys_off() -> None:
    """Refuse to rebuild tables that hold rows while SQLite foreign keys are on: dropping the old
    `eval_runs` would cascade-delete every stored rollout."""
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    on = bind.exec_driver_sql("PRAGMA foreign_keys").scalar()
    rows = bind.exec_driver_sql("SELECT COUNT(*) FROM eval_runs").scalar()
    if on and rows:
        raise RuntimeError("migration 0007 rebuilds eval_runs, which would cascade-delete rollouts with "
                           "foreign keys on; run it through `scaling-book db upgrade` (foreign keys off)")


STATUS_TABLES = (("transfer_checks", OLD_RUN_STATUSES, NEW_RUN_STATUSES),
                 ("eval_runs", OLD_RUN_STATUSES, NEW_RUN_STATUSES),
                 ("rollout_results", OLD_ROLLOUT_STATUSES, NEW_ROLLOUT_STATUSES))


def _set_statuses(table: str, allowed: str, length: int, old_length: int) -> None:
    """Replace `table`'s status CHECK by `allowed` and its status column's length `old_length` by `length`."""
    with op.batch_alter_table(table) as batch:  # SQLite: a table copy; PostgreSQL: ALTERs
        batch.drop_constraint(op.f(f"ck_{table}_status_known"), type_="check")
        batch.create_check_constraint(op.f(f"ck_{table}_status_known"), sa.text(allowed))
        batch.alter_column("status", type_=sa.String(length), existing_type=sa.String(old_length),
                           existing_nullable=False)


def upgrade() -> None:
    _check_foreign_keys_off()
    with views_set_aside():
        for table, _, new in STATUS_TABLES:
            _set_statuses(table, new, length=12, old_length=10)
    op.add_column("eval_runs", sa.Column("base_url", sa.Text(), nullable=True))
    op.add_column("eval_runs", sa.Column("api_key_var", sa.String(200), nullable=True))
    op.add_column("eval_runs", sa.Column("item_limit", sa.Integer(), nullable=True))
    op.add_column("eval_runs", sa.Column("host", sa.String(255), nullable=True))
    op.add_column("eval_runs", sa.Column("pid", sa.Integer(), nullable=True))
    op.add_column("eval_runs", sa.Column("heartbeat_at", sa.DateTime(), nullable=True))
    op.add_column("rollout_results", sa.Column("finish_reason", sa.String(20), nullable=True))
    op.add_column("rollout_results", sa.Column("reasoning", sa.Text(), nullable=True))
    op.add_column("rollout_results", sa.Column("reasoning_chars", sa.Integer(), nullable=True))
    op.add_column("transfer_checks", sa.Column("train_truncated", sa.Integer(), nullable=True))
    op.add_column("transfer_checks", sa.Column("heldout_truncated", sa.Integer(), nullable=True))
    op.execute(f"CREATE VIEW run_truncation AS {RUN_TRUNCATION}")


def downgrade() -> None:
    """Back to 0006's schema. Refuses while any row uses a new status value (that would lose it), and,
    without `-x allow_data_loss=true`, while runs are stored (their reasoning and endpoints would go)."""
    bind = op.get_bind()
    for table, value in (("eval_runs", "interrupted"), ("transfer_checks", "interrupted"),
                         ("rollout_results", "truncated")):
        count = bind.exec_driver_sql(f"SELECT COUNT(*) FROM {table} WHERE status = '{value}'").scalar()
        if count:
            raise RuntimeError(f"{count} rows of {table} have status {value!r}; downgrading would lose them")
    refuse_data_loss(revision, ["eval_runs", "rollout_results"])
    _check_foreign_keys_off()
    op.execute("DROP VIEW IF EXISTS run_truncation")
    with views_set_aside():
        _downgrade_tables()


def _downgrade_tables() -> None:
    for table, column in (("transfer_checks", "heldout_truncated"), ("transfer_checks", "train_truncated"),
                          ("rollout_results", "reasoning_chars"), ("rollout_results", "reasoning"),
                          ("rollout_results", "finish_reason"), ("eval_runs", "heartbeat_at"),
                          ("eval_runs", "pid"), ("eval_runs", "host"), ("eval_runs", "item_limit"),
                          ("eval_runs", "api_key_var"), ("eval_runs", "base_url")):
        with op.batch_alter_table(table) as batch:
            batch.drop_column(column)
    for table, old, _ in STATUS_TABLES:
        _set_statuses(table, old, length=10, old_length=12)
