"""run_item_aggregates rows are immutable on PostgreSQL too.

Migration 0006 made the per-item aggregates of finished runs immutable with a SQLite trigger only, so a
PostgreSQL store accepted an UPDATE of them (a rescore writes a run of its own instead). This adds the
same refusal there: a BEFORE UPDATE trigger whose function raises. DELETE stays allowed: deleting a run
cascades to its aggregates. Nothing changes on SQLite, where 0006's trigger is in place.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

FUNCTION = """
    CREATE FUNCTION run_item_aggregates_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'run_item_aggregates rows are immutable; a rescore writes a new run';
    END
    $$
"""
TRIGGER = """
    CREATE TRIGGER run_item_aggregates_immutable BEFORE UPDATE ON run_item_aggregates
    FOR EACH ROW EXECUTE FUNCTION run_item_aggregates_immutable()
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(FUNCTION)
        op.execute(TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS run_item_aggregates_immutable ON run_item_aggregates")
        op.execute("DROP FUNCTION IF EXISTS run_item_aggregates_immutable()")
