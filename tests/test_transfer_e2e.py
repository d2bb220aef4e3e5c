"""The transfer check end to end: scripted policies on a local OpenAI-compatible server, the real
taskset and graders, run history in the store, the history table and plot, and the README's SQL."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, Oracle, Wrong, read_export_rows
from sqlalchemy import text
from typer.testing import CliRunner

from scaling_book.cli import app
from scaling_book.runs.compare import compare_runs
from scaling_book.runs.history import transfer_history
from scaling_book.runs.runner import EvalRequest
from scaling_book.runs.transfer_check import run_transfer_check
from scaling_book.store import make_engine, make_session_factory

API_KEY_VAR = "SCALING_BOOK_TEST_KEY"


@pytest.fixture(scope="module")
def rows(built) -> list[dict]:
    return read_export_rows(built["export_dir"], "all")


class Mixed:
    """Answers an item with `right` where `is_right(row)` holds, else with `wrong`."""

    def __init__(self, rows, is_right):
        self.oracle, self.wrong, self.is_right = Oracle(rows), Wrong(rows), is_right

    def __call__(self, messages):
        row = self.oracle.row_for(messages)
        return (self.oracle if self.is_right(row) else self.wrong).answer(row)


def _fraction_rank(item_id: str) -> float:
    """A stable pseudo-random number in [0, 1) per item (which held-out items a checkpoint forgets)."""
    return int(hashlib.sha256(item_id.encode()).hexdigest()[:8], 16) / 16**8


def _check(policy, built, tmp_db: str, monkeypatch, *, checkpoint=None, step=None, rollouts=1):
    monkeypatch.setenv(API_KEY_VAR, "not-a-real-key")
    with FakeOpenAI(policy) as server:
        request = EvalRequest(model="scripted", base_url=server.base_url, api_key_var=API_KEY_VAR,
                              config="train", export_dir=built["export_dir"], rollouts_per_item=rollouts,
                              checkpoint=checkpoint, step=step, max_concurrent=16)
        return run_transfer_check(request, db_url=tmp_db)


@pytest.fixture
def tmp_db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'history.sqlite'}"


def test_oracle_has_no_gap(built, rows, tmp_db, monkeypatch) -> None:
    result = _check(Oracle(rows), built, tmp_db, monkeypatch, rollouts=2)
    assert result.status == "complete", result.error
    report = result.report
    assert report.train_accuracy == 1.0 and report.heldout_accuracy == 1.0
    assert report.gap_points == 0.0   # both halves exactly 1.0
    assert report.train_items == sum(r["info"]["split"] == "train" for r in rows)
    assert report.heldout_rollouts == 2 * sum(r["info"]["split"] == "heldout" for r in rows)


def test_memoriser_has_a_gap_of_about_100_points(built, rows, tmp_db, monkeypatch) -> None:
    memoriser = Mixed(rows, lambda row: row["info"]["split"] == "train")
    result = _check(memoriser, built, tmp_db, monkeypatch)
    assert result.status == "complete", result.error
    assert result.report.gap_points == pytest.approx(100.0)
    # Newcombe's interval from 89 of 89 and 0 of 28: the Wilson limits 89/(89+z^2) and z^2/(28+z^2).
    n_train = sum(r["info"]["split"] == "train" for r in rows)
    n_heldout = len(rows) - n_train
    z2 = 1.959963984540054 ** 2
    assert result.report.gap_interval.high == 100.0
    assert result.report.gap_interval.low == pytest.approx(
        100 - 100 * ((z2 / (n_train + z2)) ** 2 + (z2 / (n_heldout + z2)) ** 2) ** 0.5)   # 87.2 points


def test_one_grader_policy_separates_raw_and_matched_gap(built, rows, tmp_db, monkeypatch) -> None:
    """Right only on mcq: each grader's accuracy is the same in both halves (1 for mcq, 0 otherwise),
    so the matched-grader gap is 0, while the raw gap is the difference of the mcq shares."""
    result = _check(Mixed(rows, lambda row: row["info"]["grader"] == "mcq"), built, tmp_db, monkeypatch)
    assert result.status == "complete", result.error
    shares = {split: Counter(r["info"]["grader"] for r in rows if r["info"]["split"] == split)
              for split in ("train", "heldout")}
    mcq_train = shares["train"]["mcq"] / sum(shares["train"].values())
    mcq_heldout = shares["heldout"]["mcq"] / sum(shares["heldout"].values())
    assert result.report.gap_points == pytest.approx(100 * (mcq_train - mcq_heldout))
    assert result.report.matched_gap_points == pytest.approx(0.0, abs=1e-9)
    assert abs(result.report.gap_points) > abs(result.report.matched_gap_points)


def test_failed_rollout_marks_the_check_failed_and_keeps_it_out_of_history(built, rows, tmp_db, monkeypatch) -> None:
    from fake_openai import PolicyError

    oracle = Oracle(rows)

    def flaky(messages):
        row = oracle.row_for(messages)
        if row["info"]["split"] == "heldout" and row["info"]["grader"] == "mcq":
            raise PolicyError(500, "scripted server error")
        return oracle.answer(row)

    result = _check(flaky, built, tmp_db, monkeypatch)
    assert result.status == "failed"
    engine = make_engine(tmp_db)
    assert transfer_history(make_session_factory(engine)) == []
    engine.dispose()


def test_degrading_checkpoints_widen_the_gap_in_history_and_plot(built, rows, store_url, monkeypatch, tmp_path) -> None:
    tmp_db = store_url   # on SQLite and on a throwaway PostgreSQL server
    forgotten = {100: 0.0, 200: 0.35, 300: 0.7}   # share of held-out items each checkpoint gets wrong
    run_ids = {}
    for step, share in forgotten.items():
        policy = Mixed(rows, lambda row, share=share: row["info"]["split"] == "train" or _fraction_rank(row["id"]) >= share)
        result = _check(policy, built, tmp_db, monkeypatch, checkpoint=f"ckpt-{step}", step=step)
        assert result.status == "complete", result.error
        run_ids[step] = result.runs["heldout"].run_id
        heldout_ids = [r["id"] for r in rows if r["info"]["split"] == "heldout"]
        expected_wrong = sum(_fraction_rank(i) < share for i in heldout_ids) / len(heldout_ids)
        assert result.report.gap_points == pytest.approx(100 * expected_wrong)

    engine = make_engine(tmp_db)
    history = transfer_history(make_session_factory(engine), model="scripted")
    comparison = compare_runs(make_session_factory(engine), run_ids[100], run_ids[300])
    engine.dispose()
    assert [row.step for row in history] == [100, 200, 300]
    from scaling_book.grading.sandbox import isolation_label

    assert {row.isolation for row in history} == {isolation_label()}  # both halves of every check
    gaps = [row.gap_points for row in history]
    assert gaps[0] < gaps[1] < gaps[2]
    assert comparison.gained == [] and len(comparison.lost) == sum(
        _fraction_rank(r["id"]) < 0.7 for r in rows if r["info"]["split"] == "heldout")

    plot = tmp_path / "gap.png"
    result = CliRunner(env={"COLUMNS": "240"}).invoke(app, ["history", "--model", "scripted", "--plot", str(plot), "--db", tmp_db])
    assert result.exit_code == 0, result.output
    assert "ckpt-300" in result.output
    assert "isolation" in result.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # The README's three SQL queries, taken from the README itself and run against this store.
    gap_sql, flipped_sql, grader_sql = readme_queries()
    engine = make_engine(tmp_db)
    database = engine.connect()
    gap_rows = database.execute(text(gap_sql)).all()
    assert [row[0] for row in gap_rows] == [100, 200, 300]
    # PostgreSQL's round gives a NUMERIC (a Decimal in Python), SQLite's a double.
    assert [float(row[4]) for row in gap_rows] == pytest.approx([round(g, 1) for g in gaps])
    flipped = database.execute(text(flipped_sql)).all()   # right at step 100, wrong at step 200
    heldout_ids = [r["id"] for r in rows if r["info"]["split"] == "heldout"]
    assert sorted(item for item, *_ in flipped) == sorted(
        i for i in heldout_ids if 0.0 <= _fraction_rank(i) < forgotten[200])
    per_grader = database.execute(text(grader_sql)).all()
    assert {(step, split) for step, split, *_ in per_grader} == {(s, h) for s in forgotten for h in ("train", "heldout")}
    assert all(acc == 100.0 for step, split, _, _, acc in per_grader if split == "train")
    assert len(per_grader) == len({(step, split, grader) for step, split, grader, *_ in per_grader})
    database.close()
    engine.dispose()


def readme_queries() -> list[str]:
    """The SQL of the README's sqlite3 examples, with the model name the scripted runs use."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    queries = re.findall(r'sqlite3 -header -column build/scaling_book\.sqlite \\\n  "(.*?)"', readme, re.S)
    assert len(queries) == 3, queries
    return [q.replace("model = 'M'", "model = 'scripted'") for q in queries]
