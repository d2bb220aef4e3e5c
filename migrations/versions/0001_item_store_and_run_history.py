"""Create the item store and the run history.

Items with their mcq choices and answers, numeric targets, formula answers/symbols/equivalents, code
tasks, test cases and knowledge-free baselines; eval runs, per-rollout results and transfer checks.
The CHECK and foreign-key constraints are the static half of the validation gate.

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-29 08:14:38.527268
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from scaling_book.store.migration_helpers import refuse_data_loss

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('items',
    sa.Column('id', sa.String(length=80), nullable=False),
    sa.Column('chapter', sa.Integer(), nullable=False),
    sa.Column('split', sa.String(length=10), nullable=False),
    sa.Column('section', sa.String(length=200), nullable=False),
    sa.Column('provenance', sa.String(length=30), nullable=False),
    sa.Column('grader', sa.String(length=20), nullable=False),
    sa.Column('question', sa.Text(), nullable=False),
    sa.Column('tolerance', sa.Float(), nullable=True),
    sa.Column('notes', sa.Text(), nullable=True),
    sa.Column('book_value', sa.Text(), nullable=True),
    sa.Column('erratum', sa.Text(), nullable=True),
    sa.Column('counterpart_id', sa.String(length=80), nullable=True),
    sa.Column('source_file', sa.String(length=200), nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.CheckConstraint("(grader IN ('numeric', 'numeric_multi') AND tolerance IS NOT NULL) OR grader NOT IN ('numeric', 'numeric_multi')", name=op.f('ck_items_numeric_has_tolerance')),
    sa.CheckConstraint("(split = 'train' AND chapter IN (1, 2, 3, 4, 5, 6, 7, 8)) OR (split = 'heldout' AND chapter IN (12))", name=op.f('ck_items_split_matches_chapter')),
    sa.CheckConstraint("counterpart_id IS NULL OR split = 'heldout'", name=op.f('ck_items_counterpart_only_heldout')),
    sa.CheckConstraint("grader IN ('numeric', 'numeric_multi', 'mcq', 'formula', 'code')", name=op.f('ck_items_grader_known')),
    sa.CheckConstraint("provenance IN ('book_stated_fact', 'book_worked_problem', 'synthesized_from_book')", name=op.f('ck_items_provenance_known')),
    sa.CheckConstraint('chapter IN (1, 2, 3, 4, 5, 6, 7, 8, 12)', name=op.f('ck_items_chapter_known')),
    sa.CheckConstraint('length(question) > 0', name=op.f('ck_items_question_not_empty')),
    sa.CheckConstraint('length(section) > 0', name=op.f('ck_items_section_not_empty')),
    sa.CheckConstraint('tolerance IS NULL OR (tolerance > 0 AND tolerance < 1)', name=op.f('ck_items_tolerance_in_open_unit_interval')),
    sa.ForeignKeyConstraint(['counterpart_id'], ['items.id'], name=op.f('fk_items_counterpart_id_items')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_items'))
    )
    op.create_table('transfer_checks',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('model', sa.String(length=200), nullable=False),
    sa.Column('checkpoint', sa.String(length=200), nullable=True),
    sa.Column('step', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('dataset_hash', sa.String(length=64), nullable=False),
    sa.Column('sampling_json', sa.Text(), nullable=False),
    sa.Column('status', sa.String(length=10), nullable=False),
    sa.Column('seed', sa.Integer(), nullable=False),
    sa.Column('train_accuracy', sa.Float(), nullable=True),
    sa.Column('train_ci_low', sa.Float(), nullable=True),
    sa.Column('train_ci_high', sa.Float(), nullable=True),
    sa.Column('heldout_accuracy', sa.Float(), nullable=True),
    sa.Column('heldout_ci_low', sa.Float(), nullable=True),
    sa.Column('heldout_ci_high', sa.Float(), nullable=True),
    sa.Column('gap_points', sa.Float(), nullable=True),
    sa.Column('gap_ci_low', sa.Float(), nullable=True),
    sa.Column('gap_ci_high', sa.Float(), nullable=True),
    sa.Column('matched_gap_points', sa.Float(), nullable=True),
    sa.Column('matched_gap_ci_low', sa.Float(), nullable=True),
    sa.Column('matched_gap_ci_high', sa.Float(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.CheckConstraint("status IN ('running', 'complete', 'failed')", name=op.f('ck_transfer_checks_status_known')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_transfer_checks'))
    )
    op.create_table('code_tasks',
    sa.Column('item_id', sa.String(length=80), nullable=False),
    sa.Column('function_name', sa.String(length=80), nullable=False),
    sa.Column('signature', sa.Text(), nullable=False),
    sa.Column('docstring', sa.Text(), nullable=False),
    sa.Column('compare', sa.String(length=10), nullable=False),
    sa.Column('tolerance', sa.Float(), nullable=True),
    sa.Column('reference_module', sa.String(length=200), nullable=False),
    sa.Column('reference_function', sa.String(length=80), nullable=False),
    sa.Column('reference_source', sa.Text(), nullable=False),
    sa.CheckConstraint("(compare = 'rel' AND tolerance > 0 AND tolerance < 1) OR (compare != 'rel' AND tolerance IS NULL)", name=op.f('ck_code_tasks_rel_has_tolerance')),
    sa.CheckConstraint("compare IN ('rel', 'exact', 'bool')", name=op.f('ck_code_tasks_compare_known')),
    sa.ForeignKeyConstraint(['item_id'], ['items.id'], name=op.f('fk_code_tasks_item_id_items'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('item_id', name=op.f('pk_code_tasks'))
    )
    op.create_table('eval_runs',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('model', sa.String(length=200), nullable=False),
    sa.Column('checkpoint', sa.String(length=200), nullable=True),
    sa.Column('step', sa.Integer(), nullable=True),
    sa.Column('config', sa.String(length=20), nullable=False),
    sa.Column('rollouts_per_item', sa.Integer(), nullable=False),
    sa.Column('sampling_json', sa.Text(), nullable=False),
    sa.Column('dataset_hash', sa.String(length=64), nullable=False),
    sa.Column('grader_version', sa.String(length=40), nullable=False),
    sa.Column('status', sa.String(length=10), nullable=False),
    sa.Column('started_at', sa.DateTime(), nullable=False),
    sa.Column('finished_at', sa.DateTime(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('rescored_from_run_id', sa.Integer(), nullable=True),
    sa.Column('transfer_check_id', sa.Integer(), nullable=True),
    sa.CheckConstraint("status IN ('running', 'complete', 'failed')", name=op.f('ck_eval_runs_status_known')),
    sa.CheckConstraint('rollouts_per_item >= 1', name=op.f('ck_eval_runs_rollouts_positive')),
    sa.ForeignKeyConstraint(['rescored_from_run_id'], ['eval_runs.id'], name=op.f('fk_eval_runs_rescored_from_run_id_eval_runs')),
    sa.ForeignKeyConstraint(['transfer_check_id'], ['transfer_checks.id'], name=op.f('fk_eval_runs_transfer_check_id_transfer_checks')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_eval_runs'))
    )
    op.create_table('formula_answers',
    sa.Column('item_id', sa.String(length=80), nullable=False),
    sa.Column('expression', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['item_id'], ['items.id'], name=op.f('fk_formula_answers_item_id_items'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('item_id', name=op.f('pk_formula_answers'))
    )
    op.create_table('formula_equivalents',
    sa.Column('item_id', sa.String(length=80), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('expression', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['item_id'], ['items.id'], name=op.f('fk_formula_equivalents_item_id_items'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('item_id', 'position', name=op.f('pk_formula_equivalents'))
    )
    op.create_table('formula_symbols',
    sa.Column('item_id', sa.String(length=80), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=40), nullable=False),
    sa.ForeignKeyConstraint(['item_id'], ['items.id'], name=op.f('fk_formula_symbols_item_id_items'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('item_id', 'position', name=op.f('pk_formula_symbols')),
    sa.UniqueConstraint('item_id', 'name', name='uq_formula_symbols_item_name')
    )
    op.create_table('mcq_choices',
    sa.Column('item_id', sa.String(length=80), nullable=False),
    sa.Column('letter', sa.String(length=1), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.CheckConstraint("letter IN ('A', 'B', 'C', 'D', 'E', 'F')", name=op.f('ck_mcq_choices_letter_known')),
    sa.ForeignKeyConstraint(['item_id'], ['items.id'], name=op.f('fk_mcq_choices_item_id_items'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('item_id', 'letter', name=op.f('pk_mcq_choices'))
    )
    op.create_table('numeric_targets',
    sa.Column('item_id', sa.String(length=80), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('value', sa.Float(), nullable=False),
    sa.Column('unit', sa.String(length=80), nullable=False),
    sa.Column('expression', sa.Text(), nullable=False),
    sa.CheckConstraint('position >= 0', name=op.f('ck_numeric_targets_position_nonnegative')),
    sa.CheckConstraint('value = value AND value <= 1.7976931348623157e308 AND value >= -1.7976931348623157e308', name=op.f('ck_numeric_targets_value_finite')),
    sa.ForeignKeyConstraint(['item_id'], ['items.id'], name=op.f('fk_numeric_targets_item_id_items'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('item_id', 'position', name=op.f('pk_numeric_targets'))
    )
    op.create_table('baselines',
    sa.Column('item_id', sa.String(length=80), nullable=False),
    sa.Column('best_fraction', sa.Float(), nullable=False),
    sa.Column('best_constant', sa.Text(), nullable=False),
    sa.Column('measured_at', sa.DateTime(), nullable=False),
    sa.CheckConstraint('best_fraction >= 0 AND best_fraction < 1', name=op.f('ck_baselines_no_constant_passes_all')),
    sa.ForeignKeyConstraint(['item_id'], ['code_tasks.item_id'], name=op.f('fk_baselines_item_id_code_tasks'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('item_id', name=op.f('pk_baselines'))
    )
    op.create_table('code_test_cases',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('item_id', sa.String(length=80), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('args_json', sa.Text(), nullable=False),
    sa.Column('expected_json', sa.Text(), nullable=False),
    sa.CheckConstraint('position >= 0', name=op.f('ck_code_test_cases_position_nonnegative')),
    sa.ForeignKeyConstraint(['item_id'], ['code_tasks.item_id'], name=op.f('fk_code_test_cases_item_id_code_tasks'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_code_test_cases')),
    sa.UniqueConstraint('item_id', 'position', name='uq_code_test_cases_item_position')
    )
    op.create_table('mcq_answers',
    sa.Column('item_id', sa.String(length=80), nullable=False),
    sa.Column('letter', sa.String(length=1), nullable=False),
    sa.ForeignKeyConstraint(['item_id', 'letter'], ['mcq_choices.item_id', 'mcq_choices.letter'], name='fk_mcq_answers_choice', ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['item_id'], ['items.id'], name=op.f('fk_mcq_answers_item_id_items'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('item_id', name=op.f('pk_mcq_answers'))
    )
    op.create_table('rollout_results',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('item_id', sa.String(length=80), nullable=False),
    sa.Column('item_content_hash', sa.String(length=64), nullable=False),
    sa.Column('grader', sa.String(length=20), nullable=False),
    sa.Column('split', sa.String(length=10), nullable=False),
    sa.Column('rollout_index', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=10), nullable=False),
    sa.Column('correctness', sa.Float(), nullable=False),
    sa.Column('format', sa.Float(), nullable=False),
    sa.Column('exact', sa.Integer(), nullable=False),
    sa.Column('reward', sa.Float(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('response', sa.Text(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.CheckConstraint("status IN ('ok', 'error')", name=op.f('ck_rollout_results_status_known')),
    sa.CheckConstraint('correctness >= 0 AND correctness <= 1', name=op.f('ck_rollout_results_correctness_in_unit_interval')),
    sa.CheckConstraint('exact IN (0, 1)', name=op.f('ck_rollout_results_exact_binary')),
    sa.ForeignKeyConstraint(['run_id'], ['eval_runs.id'], name=op.f('fk_rollout_results_run_id_eval_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_rollout_results')),
    sa.UniqueConstraint('run_id', 'item_id', 'rollout_index', name='uq_rollout_results_run_item_rollout')
    )
    with op.batch_alter_table('rollout_results', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_rollout_results_item_id'), ['item_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_rollout_results_run_id'), ['run_id'], unique=False)



def downgrade() -> None:
    # Items are rebuilt from seed/ by `scaling-book build`; run history exists nowhere else.
    refuse_data_loss(revision, ["transfer_checks", "eval_runs", "rollout_results"])
    with op.batch_alter_table('rollout_results', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_rollout_results_run_id'))
        batch_op.drop_index(batch_op.f('ix_rollout_results_item_id'))

    op.drop_table('rollout_results')
    op.drop_table('mcq_answers')
    op.drop_table('code_test_cases')
    op.drop_table('baselines')
    op.drop_table('numeric_targets')
    op.drop_table('mcq_choices')
    op.drop_table('formula_symbols')
    op.drop_table('formula_equivalents')
    op.drop_table('formula_answers')
    op.drop_table('eval_runs')
    op.drop_table('code_tasks')
    op.drop_table('transfer_checks')
    op.drop_table('items')
