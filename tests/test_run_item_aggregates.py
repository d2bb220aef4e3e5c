"""Per-item aggregates of finished runs: written once when a run completes, immutable, backfilled by
migration 0006 for runs stored before it, and what item_history and grader_accuracy report."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic import command

from scaling_book.runs.recording import RolloutOutcome, finish_run, start_run
from scaling_book.store.migrate import alembic_config

VERSIONS = {"ch01-a": ("hash-a", "train"), "ch01-b": ("hash-b", "train"), "ch12-c": ("hash-c", "heldout")}


def _row(item_id: str, index: int, exact: float, correctness: float, grader: str = "numeric") -> RolloutOutcome:
    return RolloutOutcome(item_id, index, "ok", "<answer>1</answer>", correctness, 1.0, exact,
                          1.0 if item_id.startswith("ch12") else 0.0, correctness + 0.2, "scripted", None, grader)


# Three rollouts of a (right, right, wrong), two of b (wrong, half credit), one of c (right).
ROWS = [_row("ch01-a", 0, 1.0, 1.0), _row("ch01-a", 1, 1.0, 1.0), _row("ch01-a", 2, 0.0, 0.25),
        _row("ch01-b", 0, 0.0, 0.0), _row("ch01-b", 1, 0.0, 0.5), _row("ch12-c", 0, 1.0, 1.0, "mcq")]
# By hand: a: exact 2/3, correctness 2.25/3 = 0.75; b: exact 0, correctness 0.25; c: 1, 1.
EXPECTED = {"ch01-a": (2 / 3, 0.75, 3), "ch01-b": (0.0, 0.25, 2), "ch12-c": (1.0, 1.0, 1)}


def _start(factory) -> int:
    return start_run(factory, model="m", config="train", rollouts_per_item=3, sampling={}, dataset_hash="d",
                     grader_version="test")


def _connect(db_url: str) -> sqlite3.Connection:
    return sqlite3.connect(db_url.removeprefix("sqlite:///"))


def _aggregates(database: sqlite3.Connection, run_id: int) -> dict[str, tuple[float, float, int]]:
    return {item: (exact, correctness, n) for item, exact, correctness, n in database.execute(
        "SELECT item_id, mean_exact, mean_correctness, rollouts FROM run_item_aggregates WHERE run_id = ?",
        (run_id,))}


def test_a_complete_run_writes_its_per_item_means(db_url, session_factory) -> None:
    run_id = _start(session_factory)
    assert finish_run(session_factory, run_id, ROWS, VERSIONS) == "complete"
    database = _connect(db_url)
    found = _aggregates(database, run_id)
    assert set(found) == set(EXPECTED)
    for item, (exact, correctness, n) in EXPECTED.items():
        assert found[item][0] == pytest.approx(exact) and found[item][1] == pytest.approx(correctness)
        assert found[item][2] == n
    assert database.execute("SELECT item_content_hash, grader, split, truncated FROM run_item_aggregates "
                            "WHERE item_id = 'ch12-c'").fetchone() == ("hash-c", "mcq", "heldout", 0)
    history = {item: (exact, n) for item, exact, n in database.execute(
        "SELECT item_id, mean_exact, rollouts FROM item_history WHERE run_id = ?", (run_id,))}
    assert history == {item: (pytest.approx(e), n) for item, (e, _, n) in EXPECTED.items()}
    accuracy = {(split, grader): (items, acc) for split, grader, items, acc in database.execute(
        "SELECT split, grader, items, accuracy FROM grader_accuracy WHERE run_id = ?", (run_id,))}
    # train numeric: a (2/3) and b (0) -> mean 1/3 over 2 items; heldout mcq: c alone -> 1
    assert accuracy == {("train", "numeric"): (2, pytest.approx(1 / 3)), ("heldout", "mcq"): (1, 1.0)}
    database.close()


def test_a_failed_run_writes_none(db_url, session_factory) -> None:
    run_id = _start(session_factory)
    failed = [*ROWS[:-1], RolloutOutcome("ch12-c", 0, "error", None, 0.0, 0.0, 0.0, 1.0, 0.0, "", "boom", "mcq")]
    assert finish_run(session_factory, run_id, failed, VERSIONS) == "failed"
    database = _connect(db_url)
    assert _aggregates(database, run_id) == {}
    database.close()


def test_aggregates_are_immutable(db_url, session_factory) -> None:
    run_id = _start(session_factory)
    finish_run(session_factory, run_id, ROWS, VERSIONS)
    database = _connect(db_url)
    with pytest.raises(sqlite3.DatabaseError, match="immutable"):
        database.execute("UPDATE run_item_aggregates SET mean_exact = 1.0 WHERE run_id = ?", (run_id,))
    database.close()


def test_migration_backfills_complete_runs_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    config = alembic_config(url)
    command.upgrade(config, "0005")                       # a store from before the aggregates
    database = _connect(url)
    complete, running = (database.execute(
        "INSERT INTO eval_runs (model, config, rollouts_per_item, sampling_json, dataset_hash, grader_version,"
        " status, started_at) VALUES ('m', 'train', 3, '{}', 'd', 'test', 'running', '2026-11-30')").lastrowid
        for _ in range(2))
    for row in ROWS:
        content_hash, split = VERSIONS[row.item_id]
        database.execute(
            "INSERT INTO rollout_results (run_id, item_id, item_content_hash, grader, split, rollout_index, status,"
            " correctness, format, exact, reward, reason) VALUES (?, ?, ?, ?, ?, ?, 'ok', ?, 1.0, ?, 0.0, '')",
            (complete, row.item_id, content_hash, row.grader, split, row.rollout_index, row.correctness,
             int(row.exact)))
    database.execute("UPDATE eval_runs SET status = 'complete' WHERE id = ?", (complete,))
    database.execute("INSERT INTO rollout_results (run_id, item_id, item_content_hash, grader, split,"
                     " rollout_index, status, correctness, format, exact, reward, reason)"
                     " VALUES (?, 'ch01-a', 'hash-a', 'numeric', 'train', 0, 'ok', 1.0, 1.0, 1, 1.2, '')", (running,))
    database.commit()
    database.close()

    command.upgrade(config, "head")
    database = _connect(url)
    found = _aggregates(database, complete)
    assert {item: (pytest.approx(e), pytest.approx(c), n) for item, (e, c, n) in EXPECTED.items()} == found
    assert _aggregates(database, running) == {}
    database.close()

    allowed = alembic_config(url)                         # 0007's downgrade drops run columns: allowed here
    allowed.cmd_opts = type("Options", (), {"x": ["allow_data_loss=true"]})()
    command.downgrade(allowed, "0006")
    command.downgrade(config, "0005")                     # the old views come back, over the rollouts
    database = _connect(url)
    assert database.execute("SELECT count(*) FROM item_history WHERE run_id = ?", (complete,)).fetchone() == (3,)
    assert "run_item_aggregates" not in {name for (name,) in database.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    database.close()


def test_the_immutability_trigger_survives_the_later_table_rebuilds(tmp_path: Path) -> None:
    # 0007 rebuilds eval_runs, transfer_checks and rollout_results (SQLite batch copies); the trigger
    # 0006 puts on run_item_aggregates must still be there at head (test_aggregates_are_immutable: it refuses)
    url = f"sqlite:///{tmp_path / 'rebuilt.sqlite'}"
    command.upgrade(alembic_config(url), "0006")
    command.upgrade(alembic_config(url), "head")
    database = _connect(url)
    assert database.execute("SELECT tbl_name FROM sqlite_master WHERE type = 'trigger' AND name = "
                            "'run_item_aggregates_immutable'").fetchall() == [("run_item_aggregates",)]
    database.close()


def test_aggregates_are_immutable_on_every_back_end(store_url: str) -> None:
    # SQLite (trigger of 0006) and PostgreSQL (trigger of 0009): an UPDATE is refused, a DELETE of
    # the run cascades to its aggregates.
    import sqlalchemy as sa

    from scaling_book.store.engine import make_engine, make_session_factory
    from scaling_book.store.migrate import upgrade_to_head

    upgrade_to_head(store_url)
    engine = make_engine(store_url)
    try:
        factory = make_session_factory(engine)
        run_id = _start(factory)
        finish_run(factory, run_id, ROWS, VERSIONS)
        with pytest.raises(sa.exc.DBAPIError, match="immutable"), engine.begin() as connection:
            connection.execute(sa.text("UPDATE run_item_aggregates SET mean_exact = 1.0 WHERE run_id = :r"),
                               {"r": run_id})
        with engine.begin() as connection:
            count = sa.text("SELECT COUNT(*) FROM run_item_aggregates WHERE run_id = :r")
            assert connection.execute(count, {"r": run_id}).scalar_one() == len(EXPECTED)
            connection.execute(sa.text("DELETE FROM eval_runs WHERE id = :r"), {"r": run_id})
            assert connection.execute(count, {"r": run_id}).scalar_one() == 0
    finally:
        engine.dispose()


def test_migration_0009_goes_down_and_up_again_on_a_populated_store(store_url: str) -> None:
    # On each back-end: a store with aggregates, down to 0008 and up again keeps every row, and the
    # refusal of an UPDATE holds after the round trip (on PostgreSQL: the trigger is dropped and made
    # again; on SQLite 0009 changes nothing).
    import sqlalchemy as sa

    from scaling_book.store.engine import make_engine, make_session_factory
    from scaling_book.store.migrate import upgrade_to_head

    upgrade_to_head(store_url)
    engine = make_engine(store_url)
    try:
        factory = make_session_factory(engine)
        run_id = _start(factory)
        finish_run(factory, run_id, ROWS, VERSIONS)
        config = alembic_config(store_url)
        command.downgrade(config, "0008")
        command.upgrade(config, "head")
        with engine.connect() as connection:
            rows = connection.execute(sa.text(
                "SELECT item_id, mean_exact, mean_correctness, rollouts FROM run_item_aggregates WHERE run_id = :r"),
                {"r": run_id}).all()
        found = {item: (exact, correctness, n) for item, exact, correctness, n in rows}
        assert found == {item: pytest.approx(values) for item, values in EXPECTED.items()}
        with pytest.raises(sa.exc.DBAPIError, match="immutable"), engine.begin() as connection:
            connection.execute(sa.text("UPDATE run_item_aggregates SET rollouts = 9 WHERE run_id = :r"),
                               {"r": run_id})
    finally:
        engine.dispose()
