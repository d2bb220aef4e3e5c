"""Migrations keep data: a throwaway revision rebuilds every table of a populated store (items, runs,
rollouts, transfer checks) and every row survives; a failed rebuild rolls back whole; a rebuild that
would break a foreign key aborts; a downgrade that would drop run history refuses."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError

from scaling_book.paths import REPO_ROOT
from scaling_book.runs.recording import RolloutOutcome, finish_run, start_run
from scaling_book.store import make_engine, make_session_factory, upgrade_to_head
from scaling_book.store.migrate import alembic_config
from scaling_book.store.models import Base
from scaling_book.store.tracking import TransferCheck

VIEWS = ("transfer_gap", "item_history", "grader_accuracy")


def _copy_items(source_url: str, target_url: str) -> None:
    """Copy every item-catalogue row of the built store into `target_url` (parents first)."""
    source, target = make_engine(source_url), make_engine(target_url)
    with source.connect() as read, target.begin() as write:
        for table in Base.metadata.sorted_tables:
            if table.name in ("eval_runs", "rollout_results", "transfer_checks"):
                continue
            rows = [dict(r._mapping) for r in read.execute(sa.select(table))]
            if table.name == "items":   # counterparts point at other items: insert them after
                counterparts = {r["id"]: r["counterpart_id"] for r in rows}
                rows = [dict(r, counterpart_id=None) for r in rows]
            if rows:
                write.execute(table.insert(), rows)
            if table.name == "items":
                for item_id, counterpart in counterparts.items():
                    if counterpart:
                        write.execute(table.update().where(table.c.id == item_id).values(counterpart_id=counterpart))
    source.dispose()
    target.dispose()


def _populate_history(url: str) -> None:
    """Two transfer checks (one complete, one failed), their runs, a standalone run and a rescore of it."""
    engine = make_engine(url)
    factory = make_session_factory(engine)
    versions = {f"ch01-item-{i}": (f"hash-{i}", "train") for i in range(6)}
    versions |= {f"ch12-item-{i}": (f"hash-h{i}", "heldout") for i in range(4)}

    def rollouts(exact: float, split: str) -> list[RolloutOutcome]:
        return [RolloutOutcome(item_id, index, "ok", f"<answer>{item_id}</answer>", exact, 1.0, exact, 0.0,
                               exact + 0.2, "scripted reason", None, "numeric")
                for item_id, (_, s) in versions.items() if s == split for index in range(2)]

    for status, step in (("complete", 100), ("failed", 200)):
        with factory() as session, session.begin():
            check = TransferCheck(model="m", checkpoint=f"ckpt-{step}", step=step, created_at=datetime.now(UTC),
                                  dataset_hash="d", sampling_json="{}", status=status, seed=0,
                                  train_accuracy=1.0, train_ci_low=0.9, train_ci_high=1.0,
                                  heldout_accuracy=0.0, heldout_ci_low=0.0, heldout_ci_high=0.1,
                                  gap_points=100.0, gap_ci_low=90.0, gap_ci_high=100.0)
            session.add(check)
            session.flush()
            check_id = check.id
        for split, exact in (("train", 1.0), ("heldout", 0.0)):
            run_id = start_run(factory, model="m", config=split, rollouts_per_item=2, sampling={}, dataset_hash="d",
                               grader_version="test", step=step, transfer_check_id=check_id)
            finish_run(factory, run_id, rollouts(exact, split), versions)
    standalone = start_run(factory, model="other", config="train", rollouts_per_item=2, sampling={},
                           dataset_hash="d", grader_version="test")
    finish_run(factory, standalone, rollouts(1.0, "train"), versions)
    rescored = start_run(factory, model="other", config="train", rollouts_per_item=2, sampling={},
                         dataset_hash="d", grader_version="test2", rescored_from_run_id=standalone)
    finish_run(factory, rescored, rollouts(0.0, "train"), versions)
    engine.dispose()


def _populate(url: str, built) -> str:
    upgrade_to_head(url)
    _copy_items(built["db_url"], url)
    _populate_history(url)
    return url


@pytest.fixture
def populated_url(built, store_url: str) -> str:
    """A store on each back-end with the built item catalogue and run history (see `_populate_history`)."""
    return _populate(store_url, built)


@pytest.fixture
def populated_sqlite_url(built, tmp_path: Path) -> str:
    return _populate(f"sqlite:///{tmp_path / 'populated.sqlite'}", built)


def _snapshot(url: str) -> dict[str, object]:
    """Every row of every table (ordered by primary key) and every view."""
    engine = make_engine(url)
    with engine.connect() as connection:
        snapshot: dict[str, object] = {
            table.name: connection.execute(sa.select(table).order_by(*table.primary_key.columns)).all()
            for table in Base.metadata.sorted_tables
        }
        for view in VIEWS:
            snapshot[view] = sorted(connection.execute(sa.text(f"SELECT * FROM {view}")).all(), key=repr)
        snapshot["tables"] = sorted(sa.inspect(connection).get_table_names())
    engine.dispose()
    return snapshot


def _widen(column: sa.Column) -> sa.types.TypeEngine:
    length = getattr(column.type, "length", None)
    return sa.String(length + 1) if length else sa.String(100_000)


def _rebuild_target(table: sa.Table) -> sa.Column | None:
    """The column the throwaway revision retypes: a string column, not a key if the table has one; None
    when every string column is part of the primary key (the table is then rebuilt as it is)."""
    keys = set(table.primary_key.columns) | {c for fk in table.foreign_key_constraints for c in fk.columns}
    strings = [c for c in table.columns if isinstance(c.type, sa.String) and not c.primary_key]
    return next((c for c in strings if c not in keys), strings[0] if strings else None)


def _throwaway_revision(tmp_path: Path, body_upgrade: str, body_downgrade: str = "pass") -> Path:
    """A copy of migrations/ with one more revision on top of head; returns the copy's folder."""
    scripts = tmp_path / "migrations"
    shutil.copytree(REPO_ROOT / "migrations", scripts)
    head = ScriptDirectory(str(scripts)).get_current_head()
    header = ("import sqlalchemy as sa\nfrom alembic import op\n"
              "from scaling_book.store.migration_helpers import rebuild_table\n\n"
              f"revision = '9999'\ndown_revision = {head!r}\nbranch_labels = None\ndepends_on = None\n\n")
    body = (f"def upgrade():\n{textwrap.indent(body_upgrade, '    ')}\n\n\n"
            f"def downgrade():\n{textwrap.indent(body_downgrade, '    ')}\n")
    (scripts / "versions" / "9999_throwaway.py").write_text(header + body)
    return scripts


def _config(url: str, scripts: Path):
    config = alembic_config(url)
    config.set_main_option("script_location", str(scripts))
    return config


def _rebuild_every_table(widen: bool) -> str:
    lines = []
    for table in Base.metadata.sorted_tables:
        column = _rebuild_target(table)
        if column is None:   # SQLite: copy the table anyway; PostgreSQL: nothing to alter
            lines.append(f"with rebuild_table({table.name!r}, recreate='always' if op.get_bind().dialect.name == "
                         f"'sqlite' else 'auto'):\n    pass")
            continue
        new, old = _widen(column), column.type
        new_type, old_type = (new, old) if widen else (old, new)
        lines.append(f"with rebuild_table({table.name!r}) as batch_op:\n"
                     f"    batch_op.alter_column({column.name!r}, existing_type=sa.{old_type!r}, type_=sa.{new_type!r})")
    return "\n".join(lines)


def test_rebuilding_every_table_of_a_populated_store_keeps_every_row(populated_url, tmp_path) -> None:
    before = _snapshot(populated_url)
    # The store really is populated: items of each kind, runs, rollouts and both transfer checks.
    assert len(before["items"]) == 117 and len(before["code_tasks"]) > 0 and len(before["mcq_answers"]) > 0
    assert len(before["transfer_checks"]) == 2 and len(before["eval_runs"]) == 6
    # Two rollouts per item: 6 train + 4 held-out items per check, 6 train items for each standalone run.
    assert len(before["rollout_results"]) == 2 * (6 * 2 + 4 * 2) + 2 * (6 * 2)
    # The failed check's runs stay out of the views.
    assert len(before["item_history"]) == 10 + 2 * 6 and len(before["transfer_gap"]) == 1
    scripts = _throwaway_revision(tmp_path, _rebuild_every_table(widen=True), _rebuild_every_table(widen=False))
    config = _config(populated_url, scripts)

    command.upgrade(config, "9999")
    assert _snapshot(populated_url) == before
    engine = make_engine(populated_url)
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1   # back on for normal use
            assert connection.exec_driver_sql("PRAGMA foreign_key_check").all() == []
        assert sa.inspect(connection).get_columns("eval_runs")[1]["type"].length == 201   # really rebuilt

    command.downgrade(config, "-1")
    assert _snapshot(populated_url) == before
    with engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection, opts={"compare_type": True}),
                                Base.metadata) == []
    engine.dispose()

    command.upgrade(config, "9999")                # and up again: still every row
    assert _snapshot(populated_url) == before


def test_a_failed_rebuild_rolls_back_whole_and_a_rerun_succeeds(populated_url, tmp_path) -> None:
    before = _snapshot(populated_url)
    scripts = _throwaway_revision(tmp_path, textwrap.dedent('''\
        with rebuild_table("rollout_results") as batch_op:
            batch_op.alter_column("grader", existing_type=sa.String(20), type_=sa.String(21))
        import os
        if os.environ.get("THROWAWAY_FAIL"):
            raise RuntimeError("failure after the rebuild")'''))
    config = _config(populated_url, scripts)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("THROWAWAY_FAIL", "1")
        with pytest.raises(RuntimeError, match="failure after the rebuild"):
            command.upgrade(config, "9999")
    assert _snapshot(populated_url) == before   # no _alembic_tmp_* table, views and rows intact
    command.upgrade(config, "9999")
    assert _snapshot(populated_url) == before


def test_a_rebuild_that_breaks_a_foreign_key_aborts(populated_sqlite_url, tmp_path) -> None:
    populated_url = populated_sqlite_url
    before = _snapshot(populated_url)
    # A migration that (wrongly) deletes a parent row while SQLite's foreign keys are off for rebuilds
    # (PostgreSQL never turns them off: there the DELETE itself would cascade or fail).
    scripts = _throwaway_revision(tmp_path, textwrap.dedent('''\
        with rebuild_table("eval_runs") as batch_op:
            batch_op.alter_column("model", existing_type=sa.String(200), type_=sa.String(201))
        op.execute("DELETE FROM eval_runs WHERE id = 1")'''))
    with pytest.raises(CommandError, match="foreign key.*rollout_results"):
        command.upgrade(_config(populated_url, scripts), "9999")
    assert _snapshot(populated_url) == before


def test_downgrade_that_would_drop_run_history_refuses_and_says_what(populated_url) -> None:
    before = _snapshot(populated_url)
    config = alembic_config(populated_url)
    # The newest revision that drops run data refuses first (0008: the variant fields of stored rollouts).
    with pytest.raises(CommandError) as refused:
        command.downgrade(config, "base")
    message = str(refused.value)
    assert "downgrading revision 0008 would drop run history" in message
    assert f"{len(before['rollout_results'])} rows of rollout_results" in message
    assert "allow_data_loss=true" in message
    assert _snapshot(populated_url) == before

    # The command line says the same (alembic prints "FAILED: ..." and exits 255) and changes nothing.
    result = subprocess.run(["alembic", "downgrade", "base"], cwd=REPO_ROOT, capture_output=True, text=True,
                            env={**os.environ, "SCALING_BOOK_DB": populated_url})
    assert result.returncode == 255 and "would drop run history" in result.stdout
    assert _snapshot(populated_url) == before

    # Past the column-dropping revisions (allowed), 0001 names every table of run history it would drop.
    allowed = alembic_config(populated_url)
    allowed.cmd_opts = type("Options", (), {"x": ["allow_data_loss=true"]})()
    command.downgrade(allowed, "0003")
    with pytest.raises(CommandError) as refused:
        command.downgrade(config, "base")
    message = str(refused.value)
    assert "downgrading revision 0001 would drop run history" in message
    assert "2 rows of transfer_checks" in message and "6 rows of eval_runs" in message
    assert f"{len(before['rollout_results'])} rows of rollout_results" in message

    config.cmd_opts = type("Options", (), {"x": ["allow_data_loss=true"]})()
    command.downgrade(config, "base")
    engine = make_engine(populated_url)
    assert set(sa.inspect(engine).get_table_names()) <= {"alembic_version"}
    engine.dispose()
