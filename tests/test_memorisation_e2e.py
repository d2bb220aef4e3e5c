"""`transfer-check --variants K` end to end on the local fake server: a scripted memoriser (knows only
the original items' numbers) shows a memorisation gap near 100 points; a scripted method-follower
(computes each answer from the numbers its question shows, with the item's own target expressions)
shows none. The gap is stored on the check, in the `transfer_gap` view and in `history`."""

from __future__ import annotations

import json
import sqlite3

import pytest
from fake_openai import (
    FakeOpenAI,
    ItemPolicy,
    Oracle,
    code_answer,
    final_answer,
    read_export_rows,
)
from test_variants import CONTEXT, _independent_targets
from typer.testing import CliRunner

from scaling_book.cli import app
from scaling_book.content.export import load_hidden_tests
from scaling_book.runs.runner import EvalRequest
from scaling_book.runs.transfer_check import run_transfer_check

API_KEY_VAR = "SCALING_BOOK_TEST_KEY"
K = 4


@pytest.fixture(scope="module")
def rows(built) -> list[dict]:
    return read_export_rows(built["export_dir"], "all") + read_export_rows(built["export_dir"], "train_variants")


class Memoriser(ItemPolicy):
    """Recognises an item (original or variant) and answers what it memorised for the original: the
    original targets, and for a code item a lookup table of every original test case, the hidden ones
    of the export's key file included (the whole answer key of the original item)."""

    def __init__(self, rows, hidden: dict[str, list[dict]]):
        originals = [r for r in rows if not r["info"]["parent_id"]]
        super().__init__([r for r in rows if r["info"]["parent_id"]] + originals)   # originals win a tie
        self.original = {r["id"]: r for r in originals}
        self.oracle = Oracle(originals)
        self.hidden = hidden

    def answer(self, row):
        parent = self.original[row["info"]["parent_id"] or row["id"]]
        info = parent["info"]
        if info["grader"] != "code":
            return self.oracle.answer(parent)
        cases = json.loads(info["code_tests"]) + self.hidden.get(info["item_id"], [])
        table = {json.dumps(t["args"]): t["expected"] for t in cases}
        source = (f"import json\nTABLE = {table!r}\n"
                  f"def {info['code_function']}(*args):\n    return TABLE.get(json.dumps(list(args)), 0.0)\n")
        return code_answer(source)


class MethodFollower(ItemPolicy):
    """Answers a variant from the numbers its question shows, through the item's own target expressions
    (evaluated in tests/test_variants.py, not by the build); originals and code items like the oracle."""

    def __init__(self, rows):
        super().__init__(rows)
        self.oracle = Oracle(rows)

    def answer(self, row):
        info = row["info"]
        if not info["parent_id"] or info["grader"] == "code":
            return self.oracle.answer(row)
        values = _independent_targets(CONTEXT, info["parent_id"], row["question"], json.loads(info["variant_inputs"]))
        return final_answer("; ".join(repr(v) for v in values))


def _check(policy, built, db_url, monkeypatch):
    monkeypatch.setenv(API_KEY_VAR, "not-a-real-key")
    with FakeOpenAI(policy) as server:
        request = EvalRequest(model="scripted", base_url=server.base_url, api_key_var=API_KEY_VAR,
                              config="train", export_dir=built["export_dir"], max_concurrent=16)
        return run_transfer_check(request, db_url=db_url, variants=K)


def test_memoriser_shows_a_memorisation_gap_of_about_100_points(built, rows, tmp_path, monkeypatch):
    db_url = f"sqlite:///{tmp_path / 'm.sqlite'}"
    result = _check(Memoriser(rows, load_hidden_tests(built["export_dir"])), built, db_url, monkeypatch)
    assert result.status == "complete", result.error
    gap = result.memorisation
    parametric_train = [i for i in CONTEXT.parametric_ids() if int(i[2:4]) <= 8]
    assert gap.items == len(parametric_train) and gap.variants_per_item == K
    assert gap.original_accuracy == 1.0 and gap.variant_accuracy == 0.0
    assert gap.gap_points == pytest.approx(100.0) and gap.interval.low > 90.0
    assert result.report.train_accuracy == 1.0
    database = sqlite3.connect(tmp_path / "m.sqlite")
    [(points, k)] = database.execute("SELECT memorisation_gap_points, variants_per_item FROM transfer_gap").fetchall()
    variant_rows = database.execute(
        "SELECT parent_item_id, variant_seed, variant_inputs_json FROM rollout_results WHERE parent_item_id IS NOT NULL"
    ).fetchall()
    database.close()
    assert points == pytest.approx(100.0) and k == K
    assert len(variant_rows) == K * len(parametric_train)
    assert {seed for _, seed, _ in variant_rows} == set(range(1, K + 1))
    assert all(json.loads(inputs) for _, _, inputs in variant_rows)
    result = CliRunner(env={"COLUMNS": "260"}).invoke(app, ["history", "--db", db_url])
    assert result.exit_code == 0 and "+100.0" in result.output, result.output


def test_method_follower_shows_no_memorisation_gap_through_the_cli(built, rows, tmp_path, monkeypatch):
    monkeypatch.setenv(API_KEY_VAR, "not-a-real-key")
    db_url = f"sqlite:///{tmp_path / 'f.sqlite'}"
    with FakeOpenAI(MethodFollower(rows)) as server:
        result = CliRunner(env={"COLUMNS": "260"}).invoke(app, [
            "transfer-check", "-m", "scripted", "--base-url", server.base_url, "--api-key-var", API_KEY_VAR,
            "--rollouts", "1", "--max-concurrent", "16", "--variants", str(K), "--db", db_url,
            "--export-dir", str(built["export_dir"])])
    assert result.exit_code == 0, result.output
    assert "memorisation gap" in result.output and "+0.0 points" in result.output, result.output
    database = sqlite3.connect(tmp_path / "f.sqlite")
    [(points, accuracy)] = database.execute(
        "SELECT memorisation_gap_points, variant_train_accuracy FROM transfer_gap").fetchall()
    database.close()
    assert points == 0.0 and accuracy == 1.0
