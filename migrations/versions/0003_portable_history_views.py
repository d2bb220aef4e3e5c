"""Portable history views: recreate item_history and grader_accuracy in SQL that PostgreSQL accepts.

Stores migrated with the first version of 0002 have views that group by fewer columns than they
select (SQLite accepts that, PostgreSQL refuses it). This revision replaces all three views with
the portable definitions that 0002 now creates too: every selected column is grouped on, and the
average of the integer `exact` is taken over doubles (PostgreSQL's AVG of an integer is a NUMERIC).
For well-formed history (one grader, split and content hash per item within a run) the rows are the
same as before. Views hold no data: nothing is lost either way.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
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
    for name in reversed(list(VIEWS)):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for name, body in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body}")


def downgrade() -> None:
    # 0002 now creates these same portable views, so the state at 0002 is what is already here.
    pass
