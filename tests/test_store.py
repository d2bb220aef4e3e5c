"""The store's schema: migrations match the models, and each constraint refuses a bad row."""

from __future__ import annotations

import math

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from scaling_book.store import make_engine, upgrade_to_head
from scaling_book.store.migrate import alembic_config
from scaling_book.store.models import Base, Item, McqAnswer, McqChoice, NumericTarget


def test_migrated_schema_equals_models(store_url: str) -> None:
    upgrade_to_head(store_url)
    engine = make_engine(store_url)
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        diff = compare_metadata(context, Base.metadata)
    engine.dispose()
    assert diff == []


def test_upgrade_then_downgrade_base_leaves_no_tables(store_url: str) -> None:
    url = store_url
    config = alembic_config(url)
    command.upgrade(config, "head")
    engine = make_engine(url)
    assert "items" in inspect(engine).get_table_names()
    assert set(inspect(engine).get_view_names()) == {"transfer_gap", "item_history", "grader_accuracy", "run_truncation"}
    command.downgrade(config, "base")
    engine.dispose()
    engine = make_engine(url)
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    assert inspect(engine).get_view_names() == []
    engine.dispose()


def _item(**overrides) -> Item:
    fields = dict(id="ch01-x", chapter=1, split="train", section="Matrix multiplication",
                  provenance="book_stated_fact", grader="numeric", question="How many?", tolerance=0.01,
                  source_file="ch01_roofline.toml", content_hash="0" * 64)
    fields.update(overrides)
    return Item(**fields)


def _insert(session_factory, *rows) -> None:
    with session_factory() as session, session.begin():
        for row in rows:
            session.add(row)
            session.flush()


def test_valid_item_is_accepted(session_factory) -> None:
    _insert(session_factory, _item(), NumericTarget(item_id="ch01-x", position=0, value=240.0, unit="FLOPs/byte",
                                                    expression="1"))
    with session_factory() as session:
        assert session.get(Item, "ch01-x").targets[0].value == 240.0


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_target_is_refused(session_factory, value: float) -> None:
    _insert(session_factory, _item())
    # SQLite stores NaN as NULL, so NaN meets the NOT NULL constraint; +-inf meets the finite bound.
    with pytest.raises(IntegrityError, match="ck_numeric_targets_value_finite|NOT NULL constraint failed: numeric_targets.value"):
        _insert(session_factory, NumericTarget(item_id="ch01-x", position=0, value=value, unit="s", expression="x"))


@pytest.mark.parametrize("tolerance", [0.0, 1.0, -0.1, 1.5])
def test_tolerance_outside_open_unit_interval_is_refused(session_factory, tolerance: float) -> None:
    with pytest.raises(IntegrityError, match="ck_items_tolerance_in_open_unit_interval"):
        _insert(session_factory, _item(tolerance=tolerance))


def test_unknown_grader_is_refused(session_factory) -> None:
    with pytest.raises(IntegrityError, match="ck_items_grader_known"):
        _insert(session_factory, _item(grader="essay"))


def test_unknown_provenance_is_refused(session_factory) -> None:
    with pytest.raises(IntegrityError, match="ck_items_provenance_known"):
        _insert(session_factory, _item(provenance="from_memory"))


def test_chapter_9_is_refused(session_factory) -> None:
    # Chapter 9 breaks both the chapter set and the split rule; SQLite names the first it checks.
    for split in ("train", "heldout"):
        with pytest.raises(IntegrityError, match="ck_items_chapter_known|ck_items_split_matches_chapter"):
            _insert(session_factory, _item(chapter=9, split=split))


def test_split_must_match_chapter(session_factory) -> None:
    with pytest.raises(IntegrityError, match="ck_items_split_matches_chapter"):
        _insert(session_factory, _item(chapter=12, split="train"))


def test_duplicate_id_is_refused(session_factory) -> None:
    _insert(session_factory, _item())
    with pytest.raises(IntegrityError, match="items.id"):
        _insert(session_factory, _item())


def test_mcq_answer_must_be_one_of_the_items_choices(session_factory) -> None:
    mcq = _item(id="ch01-m", grader="mcq", tolerance=None)
    other = _item(id="ch01-n", grader="mcq", tolerance=None)
    _insert(session_factory, mcq, other, McqChoice(item_id="ch01-m", letter="A", text="yes"),
            McqChoice(item_id="ch01-m", letter="B", text="no"), McqChoice(item_id="ch01-n", letter="C", text="maybe"))
    # C exists, but as a choice of another item: the composite key refuses it.
    with pytest.raises(IntegrityError, match="FOREIGN KEY"):
        _insert(session_factory, McqAnswer(item_id="ch01-m", letter="C"))
    _insert(session_factory, McqAnswer(item_id="ch01-m", letter="B"))


def test_baseline_of_one_is_refused(session_factory) -> None:
    _insert(session_factory, _item(id="ch01-c", grader="code", tolerance=None))
    with session_factory() as session, session.begin():
        session.execute(text(
            "INSERT INTO code_tasks (item_id, function_name, signature, docstring, compare, tolerance, "
            "reference_module, reference_function, reference_source) "
            "VALUES ('ch01-c', 'f', 'def f()', 'doc', 'exact', NULL, 'm', 'f', 'def f(): return 2')"))
    with pytest.raises(IntegrityError, match="ck_baselines_no_constant_passes_all"):
        with session_factory() as session, session.begin():
            session.execute(text("INSERT INTO baselines (item_id, best_fraction, best_constant, measured_at) "
                                 "VALUES ('ch01-c', 1.0, '0', '2026-01-01')"))


def test_migration_0007_keeps_every_row_and_view(tmp_path) -> None:
    """Rows written under 0002's schema survive every later migration, 0007's table rebuilds included,
    unchanged; the views still read them (item_history through the aggregates 0006 backfills), and the
    new status values are accepted afterwards."""
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    config = alembic_config(url)
    command.upgrade(config, "0002")
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO transfer_checks (model, created_at, dataset_hash, sampling_json, status, seed) "
            "VALUES ('m', '2026-01-01', 'h', '{}', 'complete', 0)"))
        connection.execute(text(
            "INSERT INTO eval_runs (model, config, rollouts_per_item, sampling_json, dataset_hash, grader_version, "
            "status, started_at, transfer_check_id) VALUES ('m', 'train', 2, '{}', 'h', '1', 'complete', "
            "'2026-01-01', 1)"))
        for index, exact in ((0, 1), (1, 0)):
            connection.execute(text(
                "INSERT INTO rollout_results (run_id, item_id, item_content_hash, grader, split, rollout_index, "
                "status, correctness, format, exact, reward, reason) VALUES (1, 'ch01-a', 'h', 'mcq', 'train', "
                ":i, 'ok', :e, 1, :e, 1, 'r')"), {"i": index, "e": exact})
    engine.dispose()
    command.upgrade(config, "head")
    engine = make_engine(url)
    with engine.begin() as connection:
        assert connection.execute(text("SELECT COUNT(*) FROM rollout_results")).scalar() == 2
        assert connection.execute(text("SELECT mean_exact, rollouts FROM item_history")).one() == (0.5, 2)
        assert connection.execute(text("SELECT rollouts, truncated FROM run_truncation")).one() == (2, 0)
        connection.execute(text("UPDATE eval_runs SET status = 'interrupted'"))
        connection.execute(text("UPDATE rollout_results SET status = 'truncated' WHERE rollout_index = 1"))
        assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
    engine.dispose()
