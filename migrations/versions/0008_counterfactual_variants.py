"""Counterfactual variants: variant definitions, variant fields on rollouts, the memorisation gap.

Adds three tables (`variant_definitions`, `variant_inputs`, `variant_placeholders`: an item's
parametric declaration, with constraints that ranges are finite and ordered and that every template
placeholder is bound to a declared input), three nullable columns on `rollout_results` (parent item,
variant seed, drawn inputs) and six nullable columns on `transfer_checks` (variants per item, variant
train accuracy, memorisation gap with its interval). Existing rows are untouched (new columns are
NULL); `transfer_gap`, a view holding no data, is recreated with the new columns. The downgrade
refuses (without `-x allow_data_loss=true`) while runs or checks are stored.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from scaling_book.store.migration_helpers import refuse_data_loss

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

FINITE = "{c} = {c} AND {c} <= 1e308 AND {c} >= -1e308"

TRANSFER_GAP_COLUMNS = """
        SELECT t.id AS transfer_check_id, t.model, t.checkpoint, t.step, t.created_at, t.dataset_hash,
               t.train_accuracy, t.train_ci_low, t.train_ci_high,
               t.heldout_accuracy, t.heldout_ci_low, t.heldout_ci_high,
               t.gap_points, t.gap_ci_low, t.gap_ci_high,
               t.matched_gap_points, t.matched_gap_ci_low, t.matched_gap_ci_high{extra}
        FROM transfer_checks AS t
        WHERE t.status = 'complete'
"""
MEMORISATION_COLUMNS = """,
               t.variants_per_item, t.variant_train_accuracy,
               t.memorisation_gap_points, t.memorisation_gap_ci_low, t.memorisation_gap_ci_high"""


def upgrade() -> None:
    op.create_table(
        "variant_definitions",
        sa.Column("item_id", sa.String(80), sa.ForeignKey("items.id", ondelete="CASCADE",
                                                          name="fk_variant_definitions_item_id_items"),
                  primary_key=True),
        sa.Column("source_file", sa.String(40), nullable=False),
        sa.Column("template", sa.Text, nullable=False),
        sa.Column("constraints_json", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("item_id", name="pk_variant_definitions"),
    )
    op.create_table(
        "variant_inputs",
        sa.Column("item_id", sa.String(80), nullable=False),
        sa.Column("name", sa.String(80), nullable=False),
        sa.Column("distribution", sa.String(12), nullable=False),
        sa.Column("low", sa.Float), sa.Column("high", sa.Float),
        sa.Column("choices_json", sa.Text), sa.Column("expression", sa.Text),
        sa.Column("sig", sa.Integer, nullable=False), sa.Column("style", sa.String(8), nullable=False),
        sa.Column("scale", sa.Float, nullable=False), sa.Column("hidden", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("item_id", "name", name="pk_variant_inputs"),
        sa.ForeignKeyConstraint(["item_id"], ["variant_definitions.item_id"], ondelete="CASCADE",
                                name="fk_variant_inputs_item_id_variant_definitions"),
        sa.CheckConstraint("distribution IN ('log_uniform', 'uniform', 'int', 'choices', 'derived')",
                           name="ck_variant_inputs_distribution_known"),
        sa.CheckConstraint("style IN ('sci', 'plain', 'int', 'comma')", name="ck_variant_inputs_style_known"),
        sa.CheckConstraint("distribution IN ('choices', 'derived') OR (low IS NOT NULL AND high IS NOT NULL AND "
                           f"{FINITE.format(c='low')} AND {FINITE.format(c='high')} AND low < high)",
                           name="ck_variant_inputs_range_finite_and_ordered"),
        sa.CheckConstraint("distribution != 'log_uniform' OR low > 0", name="ck_variant_inputs_log_range_positive"),
        sa.CheckConstraint("distribution != 'choices' OR choices_json IS NOT NULL",
                           name="ck_variant_inputs_choices_given"),
        sa.CheckConstraint("distribution != 'derived' OR expression IS NOT NULL",
                           name="ck_variant_inputs_derived_has_expression"),
        sa.CheckConstraint(f"{FINITE.format(c='scale')} AND scale > 0", name="ck_variant_inputs_scale_positive"),
    )
    op.create_table(
        "variant_placeholders",
        sa.Column("item_id", sa.String(80), nullable=False),
        sa.Column("name", sa.String(80), nullable=False),
        sa.PrimaryKeyConstraint("item_id", "name", name="pk_variant_placeholders"),
        sa.ForeignKeyConstraint(["item_id"], ["variant_definitions.item_id"], ondelete="CASCADE",
                                name="fk_variant_placeholders_item_id_variant_definitions"),
        sa.ForeignKeyConstraint(["item_id", "name"], ["variant_inputs.item_id", "variant_inputs.name"],
                                ondelete="CASCADE", name="fk_variant_placeholders_item_id_variant_inputs"),
    )
    op.add_column("rollout_results", sa.Column("parent_item_id", sa.String(80)))
    op.add_column("rollout_results", sa.Column("variant_seed", sa.Integer))
    op.add_column("rollout_results", sa.Column("variant_inputs_json", sa.Text))
    for name, kind in (("variants_per_item", sa.Integer), ("variant_train_accuracy", sa.Float),
                       ("memorisation_gap_points", sa.Float), ("memorisation_gap_ci_low", sa.Float),
                       ("memorisation_gap_ci_high", sa.Float)):
        op.add_column("transfer_checks", sa.Column(name, kind))
    op.execute("DROP VIEW transfer_gap")
    op.execute("CREATE VIEW transfer_gap AS " + TRANSFER_GAP_COLUMNS.format(extra=MEMORISATION_COLUMNS))


def downgrade() -> None:
    # The variant fields of stored rollouts and the memorisation gaps of checks are run history.
    refuse_data_loss(revision, ["rollout_results", "transfer_checks"])
    op.execute("DROP VIEW transfer_gap")
    op.execute("CREATE VIEW transfer_gap AS " + TRANSFER_GAP_COLUMNS.format(extra=""))
    # SQLite >= 3.35 drops a column in place; the views over these tables stay valid.
    for name in ("memorisation_gap_ci_high", "memorisation_gap_ci_low", "memorisation_gap_points",
                 "variant_train_accuracy", "variants_per_item"):
        op.execute(f"ALTER TABLE transfer_checks DROP COLUMN {name}")
    for name in ("variant_inputs_json", "variant_seed", "parent_item_id"):
        op.execute(f"ALTER TABLE rollout_results DROP COLUMN {name}")
    op.drop_table("variant_placeholders")
    op.drop_table("variant_inputs")
    op.drop_table("variant_definitions")
