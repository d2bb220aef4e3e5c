"""Run history integrity: a run is complete only when every rollout is written, unfinished and failed
runs stay out of the views, two writers on one SQLite file both land, and rescore/compare refuse to
mix item versions silently. Every test runs on SQLite and on a throwaway PostgreSQL server."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
from sqlalchemy import text

from scaling_book.runs.compare import compare_runs
from scaling_book.runs.recording import RolloutOutcome, finish_run, start_run
from scaling_book.store import make_engine, make_session_factory, upgrade_to_head

VERSIONS = {f"ch01-item-{i}": (f"hash-{i}", "train") for i in range(40)}


def _row(item_id: str, exact: float, status: str = "ok", index: int = 0) -> RolloutOutcome:
    return RolloutOutcome(item_id, index, status, f"<answer>{exact}</answer>", exact, 1.0, exact, 0.0,
                          exact + 0.2, "scripted", None if status == "ok" else "boom", "numeric")


def _start(factory, **overrides) -> int:
    fields = dict(model="m", config="train", rollouts_per_item=1, sampling={}, dataset_hash="d",
                  grader_version="test")
    fields.update(overrides)
    return start_run(factory, **fields)


@pytest.fixture
def db_url(store_url: str) -> str:
    """A fresh store migrated to head, on SQLite and on PostgreSQL."""
    upgrade_to_head(store_url)
    return store_url


def _sql(db_url: str, statement: str, **params) -> list[tuple]:
    """Rows of one SQL statement, run and committed on its own connection."""
    engine = make_engine(db_url)
    with engine.begin() as connection:
        result = connection.execute(text(statement), params)
        rows = [tuple(r) for r in result] if result.returns_rows else []
    engine.dispose()
    return rows


def _views(db_url: str) -> dict[str, int]:
    return {view: _sql(db_url, f"SELECT count(*) FROM {view}")[0][0]
            for view in ("item_history", "grader_accuracy", "transfer_gap")}


def test_complete_run_appears_in_item_history(db_url, session_factory) -> None:
    run_id = _start(session_factory)
    status = finish_run(session_factory, run_id, [_row(i, 1.0) for i in list(VERSIONS)[:3]], VERSIONS)
    assert status == "complete"
    assert _views(db_url)["item_history"] == 3


def test_unfinished_run_is_never_complete_and_stays_out_of_views(db_url, session_factory) -> None:
    run_id = _start(session_factory)   # the process "dies" here: finish_run never runs
    assert _sql(db_url, "SELECT status FROM eval_runs WHERE id = :id", id=run_id) == [("running",)]
    assert _views(db_url)["item_history"] == 0


def test_one_errored_rollout_fails_the_run(db_url, session_factory) -> None:
    run_id = _start(session_factory)
    rows = [_row("ch01-item-0", 1.0), _row("ch01-item-1", 0.0, status="error")]
    assert finish_run(session_factory, run_id, rows, VERSIONS) == "failed"
    assert _views(db_url)["item_history"] == 0


def test_rollouts_are_written_all_or_nothing(db_url, session_factory) -> None:
    run_id = _start(session_factory)
    rows = [_row("ch01-item-0", 1.0), _row("ch01-item-0", 1.0)]   # same (item, rollout index) twice
    with pytest.raises(Exception, match="UNIQUE|uq_rollout_results_run_item_rollout"):
        finish_run(session_factory, run_id, rows, VERSIONS)
    assert _sql(db_url, "SELECT count(*) FROM rollout_results") == [(0,)]
    assert _sql(db_url, "SELECT status FROM eval_runs") == [("running",)]


def _write_one_run(db_url: str, model: str, barrier) -> None:
    engine = make_engine(db_url)
    factory = make_session_factory(engine)
    barrier.wait()
    run_id = start_run(factory, model=model, config="train", rollouts_per_item=1, sampling={}, dataset_hash="d",
                       grader_version="test")
    finish_run(factory, run_id, [_row(i, 1.0, index=k) for i in VERSIONS for k in range(5)], VERSIONS)
    engine.dispose()


def test_two_writers_in_two_processes_both_land(db_url) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    workers = [context.Process(target=_write_one_run, args=(db_url, model, barrier)) for model in ("a", "b")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    assert sorted(_sql(db_url, "SELECT model, status FROM eval_runs")) == [("a", "complete"), ("b", "complete")]
    assert _sql(db_url, "SELECT count(*) FROM rollout_results") == [(2 * 40 * 5,)]


def test_compare_sets_aside_items_whose_content_changed(session_factory) -> None:
    run_a = _start(session_factory)
    finish_run(session_factory, run_a, [_row("ch01-item-0", 1.0), _row("ch01-item-1", 1.0), _row("ch01-item-2", 0.0)],
               VERSIONS)
    changed = dict(VERSIONS, **{"ch01-item-1": ("hash-1-edited", "train")})
    run_b = _start(session_factory)
    finish_run(session_factory, run_b, [_row("ch01-item-0", 0.0), _row("ch01-item-1", 0.0), _row("ch01-item-2", 1.0)],
               changed)
    comparison = compare_runs(session_factory, run_a, run_b)
    assert comparison.changed_items == ["ch01-item-1"]
    assert comparison.common_items == 2
    assert comparison.lost == ["ch01-item-0"] and comparison.gained == ["ch01-item-2"]
    assert comparison.difference_points == pytest.approx(0.0)


def test_migrations_keep_history_rows_across_a_rerun(db_url, session_factory) -> None:
    run_id = _start(session_factory)
    finish_run(session_factory, run_id, [_row("ch01-item-0", 1.0)], VERSIONS)
    upgrade_to_head(db_url)   # a later `build` migrates again: nothing is dropped
    assert _views(db_url)["item_history"] == 1


def test_rescore_regrades_stored_responses_into_a_new_run(built, db_url: str) -> None:
    from scaling_book.content.export import load_config
    from scaling_book.grading import GRADER_VERSION
    from scaling_book.runs.rescore import RescoreError, rescore_run
    from scaling_book.runs.runner import item_versions

    engine = make_engine(db_url)
    factory = make_session_factory(engine)
    rows = [r for r in load_config(built["export_dir"], "qa") if r["info"]["grader"] == "numeric"][:3]
    right = rows[0]["info"]["targets"][0]
    stored = [
        # Scored 0 at the time (say, by a grader bug) but right: the rescore must pay it.
        RolloutOutcome(rows[0]["id"], 0, "ok", f"<answer>{right!r}</answer>", 0.0, 1.0, 0.0, 0.0, 0.2, "old", None,
                       "numeric"),
        # Wrong by a factor of 10, and so still worth 0 after rescoring.
        RolloutOutcome(rows[1]["id"], 0, "ok", f"<answer>{rows[1]['info']['targets'][0] * 10!r}</answer>", 0.0, 1.0,
                       0.0, 0.0, 0.2, "old", None, "numeric"),
    ]
    run_id = start_run(factory, model="m", config="qa", rollouts_per_item=1, sampling={}, dataset_hash="d",
                       grader_version="0.0.1")
    finish_run(factory, run_id, stored, item_versions(built["export_dir"], "qa"))
    result = rescore_run(run_id, built["export_dir"], db_url=db_url)
    assert result.status == "complete" and result.changed_exact == 1
    assert _sql(db_url, "SELECT rescored_from_run_id, grader_version FROM eval_runs WHERE id = :id",
                id=result.new_run_id) == [(run_id, GRADER_VERSION)]
    assert _sql(db_url, "SELECT item_id, exact, correctness FROM rollout_results WHERE run_id = :id ORDER BY item_id",
                id=result.new_run_id) == sorted([(rows[0]["id"], 1, 1.0), (rows[1]["id"], 0, 0.0)])
    # An item edited since the run: the rescore refuses and names it.
    _sql(db_url, "UPDATE rollout_results SET item_content_hash = 'old-version' WHERE run_id = :id AND item_id = :item",
         id=run_id, item=rows[1]["id"])
    with pytest.raises(RescoreError, match=rows[1]["id"]):
        rescore_run(run_id, built["export_dir"], db_url=db_url)
    engine.dispose()


def test_rescore_without_an_export_exits_4_with_a_message(db_url, session_factory, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from scaling_book.cli import app

    run_id = _start(session_factory, config="qa")
    finish_run(session_factory, run_id, [_row("ch01-item-0", 1.0)], VERSIONS)
    result = CliRunner(env={"COLUMNS": "300"}).invoke(
        app, ["rescore", str(run_id), "--db", db_url, "--export-dir", str(tmp_path / "no-export")])
    assert result.exit_code == 4, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"no export of config 'qa' at {tmp_path / 'no-export'}" in result.output
