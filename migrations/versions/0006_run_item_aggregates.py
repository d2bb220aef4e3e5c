"""Per-run, per-item aggregates; item_history and grader_accuracy read them.

`run_item_aggregates` holds one row per (run, item): the item's content hash, grader and split,
the means of `exact` and correctness over its rollouts, the rollout count and a `truncated` count
(0 until truncation is recorded). `finish_run` writes a run's rows in the transaction that
completes it; they are never updated (on SQLite a trigger refuses an UPDATE; a rescore is a new
run with its own rows). This migration backfills the rows of every complete run already stored.

`item_history` and `grader_accuracy` are recreated on the aggregates instead of grouping every
stored rollout, with indexes on `eval_runs (model, step)` and `transfer_checks (model, step)` for
the README's queries, so they cost the same at 2000 stored runs as at 2. Same columns as before,
plus `truncated` in `item_history`. The SQL is portable: every selected non-aggregate column is in
its GROUP BY. No existing table is rebuilt; downgrade restores the 0002 views and drops the new
table and indexes (the aggregates are derived from `rollout_results`, so no data is lost).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

VIEWS = {
    "item_history": """
        SELECT r.id AS run_id, r.model, r.checkpoint, r.step, r.config, r.transfer_check_id,
               r.rescored_from_run_id, a.item_id, a.grader, a.split, a.item_content_hash,
               a.mean_exact, a.mean_correctness, a.rollouts, a.truncated
        FROM eval_runs AS r
        LEFT JOIN transfer_checks AS t ON t.id = r.transfer_check_id
        JOIN run_item_aggregates AS a ON a.run_id = r.id
        WHERE r.status = 'complete' AND (r.transfer_check_id IS NULL OR t.status = 'complete')
    """,
    "grader_accuracy": """
        SELECT run_id, model, checkpoint, step, config, transfer_check_id, rescored_from_run_id, split, grader,
               COUNT(*) AS items, AVG(mean_exact) AS accuracy
        FROM item_history
        GROUP BY run_id, model, checkpoint, step, config, transfer_check_id, rescored_from_run_id, split, grader
    """,
}

# The runs the views read, with the columns named: on PostgreSQL `r.*` binds a view to every column of
# eval_runs, and an older revision's downgrade could then not drop a column it added (0004: isolation).
COMPLETE_RUN_COLUMNS = """
    SELECT r.id, r.model, r.checkpoint, r.step, r.config, r.transfer_check_id, r.rescored_from_run_id
    FROM eval_runs AS r
    LEFT JOIN transfer_checks AS t ON t.id = r.transfer_check_id
    WHERE r.status = 'complete' AND (r.transfer_check_id IS NULL OR t.status = 'complete')
"""

OLD_VIEWS = {  # as revision 0003 defines them (same rows): what a downgrade to 0005 restores
    "item_history": f"""
        SELECT r.id AS run_id, r.model, r.checkpoint, r.step, r.config, r.transfer_check_id,
               r.rescored_from_run_id, x.item_id, x.grader, x.split, x.item_content_hash,
               AVG(CAST(x.exact AS DOUBLE PRECISION)) AS mean_exact, AVG(x.correctness) AS mean_correctness,
               COUNT(*) AS rollouts
        FROM ({COMPLETE_RUN_COLUMNS}) AS r
        JOIN rollout_results AS x ON x.run_id = r.id
        GROUP BY r.id, r.model, r.checkpoint, r.step, r.config, r.transfer_check_id, r.rescored_from_run_id,
                 x.item_id, x.grader, x.split, x.item_content_hash
    """,
    "grader_accuracy": """
        SELECT run_id, model, checkpoint, step, config, transfer_check_id, rescored_from_run_id, split, grader,
               COUNT(*) AS items, AVG(mean_exact) AS accuracy
        FROM item_history
        GROUP BY run_id, model, checkpoint, step, config, transfer_check_id, rescored_from_run_id, split, grader
    """,
}

BACKFILL = """
    INSERT INTO run_item_aggregates
        (run_id, item_id, item_content_hash, grader, split, mean_exact, mean_correctness, rollouts, truncated)
    SELECT x.run_id, x.item_id, MIN(x.item_content_hash), MIN(x.grader), MIN(x.split),
           AVG(CAST(x.exact AS DOUBLE PRECISION)), AVG(x.correctness), COUNT(*), 0
    FROM rollout_results AS x
    JOIN eval_runs AS r ON r.id = x.run_id
    WHERE r.status = 'complete'
    GROUP BY x.run_id, x.item_id
"""

IMMUTABLE_TRIGGER = """
    CREATE TRIGGER run_item_aggregates_immutable BEFORE UPDATE ON run_item_aggregates
    BEGIN SELECT RAISE(ABORT, 'run_item_aggregates rows are immutable; a rescore writes a new run'); END
"""


def upgrade() -> None:
    for name in reversed(list(VIEWS)):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.create_table(
        "run_item_aggregates",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.String(length=80), nullable=False),
        sa.Column("item_content_hash", sa.String(length=64), nullable=False),
        sa.Column("grader", sa.String(length=20), nullable=False),
        sa.Column("split", sa.String(length=10), nullable=False),
        sa.Column("mean_exact", sa.Float(), nullable=False),
        sa.Column("mean_correctness", sa.Float(), nullable=False),
        sa.Column("rollouts", sa.Integer(), nullable=False),
        sa.Column("truncated", sa.Integer(), server_default="0", nullable=False),
        sa.CheckConstraint("mean_exact >= 0 AND mean_exact <= 1",
                           name=op.f("ck_run_item_aggregates_mean_exact_in_unit_interval")),
        sa.CheckConstraint("mean_correctness >= 0 AND mean_correctness <= 1",
                           name=op.f("ck_run_item_aggregates_mean_correctness_in_unit_interval")),
        sa.CheckConstraint("rollouts >= 1", name=op.f("ck_run_item_aggregates_rollouts_positive")),
        sa.CheckConstraint("truncated >= 0 AND truncated <= rollouts",
                           name=op.f("ck_run_item_aggregates_truncated_within_rollouts")),
        sa.ForeignKeyConstraint(["run_id"], ["eval_runs.id"], ondelete="CASCADE",
                                name=op.f("fk_run_item_aggregates_run_id_eval_runs")),
        sa.PrimaryKeyConstraint("run_id", "item_id", name=op.f("pk_run_item_aggregates")),
    )
    op.create_index("ix_eval_runs_model_step", "eval_runs", ["model", "step"])
    op.create_index("ix_transfer_checks_model_step", "transfer_checks", ["model", "step"])
    op.execute(BACKFILL)
    if op.get_bind().dialect.name == "sqlite":
        op.execute(IMMUTABLE_TRIGGER)
    for name, body in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body}")


def downgrade() -> None:
    for name in reversed(list(VIEWS)):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS run_item_aggregates_immutable")
    op.drop_index("ix_transfer_checks_model_step", table_name="transfer_checks")
    op.drop_index("ix_eval_runs_model_step", table_name="eval_runs")
    op.drop_table("run_item_aggregates")
    for name, body in OLD_VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body}")
