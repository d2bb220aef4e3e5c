"""Run-history views: transfer_gap, item_history, grader_accuracy.

Plain SQL over the run tables so that anyone can follow the train/held-out gap across checkpoints with
`sqlite3`. Only complete runs (and complete transfer checks) appear: a run that failed or never
finished, and every run of a failed transfer check, are left out. `item_history` and
`grader_accuracy` carry `transfer_check_id` and `rescored_from_run_id`, so a query can keep to
transfer-check runs, standalone evals or rescored runs. Views hold no data, so dropping
them on downgrade loses nothing.

Portable SQL (SQLite and PostgreSQL): every selected column is grouped on, and averages of integer
columns are taken over doubles. (The first version of this file grouped by fewer columns than it
selected, which PostgreSQL refuses; SQLite stores created with it get the portable views from 0003.)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

COMPLETE_RUNS = """
    SELECT r.* FROM eval_runs AS r
    LEFT JOIN transfer_checks AS t ON t.id = r.transfer_check_id
    WHERE r.status = 'complete' AND (r.transfer_check_id IS NULL OR t.status = 'complete')
"""

VIEWS = {
    "transfer_gap": """
        SELECT t.id AS transfer_check_id, t.model, t.checkpoint, t.step, t.created_at, t.dataset_hash,
               t.train_accuracy, t.train_ci_low, t.train_ci_high,
               t.heldout_accuracy, t.heldout_ci_low, t.heldout_ci_high,
               t.gap_points, t.gap_ci_low, t.gap_ci_high,
               t.matched_gap_points, t.matched_gap_ci_low, t.matched_gap_ci_high
        FROM transfer_checks AS t
        WHERE t.status = 'complete'
    """,
    "item_history": f"""
        SELECT r.id AS run_id, r.model, r.checkpoint, r.step, r.config, r.transfer_check_id,
               r.rescored_from_run_id, x.item_id, x.grader, x.split, x.item_content_hash,
               AVG(CAST(x.exact AS DOUBLE PRECISION)) AS mean_exact, AVG(x.correctness) AS mean_correctness,
               COUNT(*) AS rollouts
        FROM ({COMPLETE_RUNS}) AS r
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


def upgrade() -> None:
    for name, body in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body}")


def downgrade() -> None:
    for name in reversed(list(VIEWS)):
        op.execute(f"DROP VIEW IF EXISTS {name}")
