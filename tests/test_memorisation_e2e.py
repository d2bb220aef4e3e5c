"""`transfer-check --variants K` end to end on the local fake server: a scripted memoriser (knows only
the original items' numbers) shows a memorisation gap near 100 points; a scripted method-follower
(computes each answer from the numbers its question shows, with the item's own target expressions)
shows none. The gap is stored on the check, in the `transfer_gap` view and in `history`."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from fake_openai import (
    FakeOpenAI,
    ItemPolicy,
    Oracle,
    Reply,
    code_answer,
    final_answer,
    read_export_rows,
    user_text,
)
from test_variants import CONTEXT, _independent_targets
from typer.testing import CliRunner

from scaling_book.cli import app
from scaling_book.content.export import load_hidden_tests
from scaling_book.runs.runner import EvalRequest
from scaling_book.runs.transfer_check import run_transfer_check, started_variants

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


class SlowOnVariants:
    """The memoriser, each variant reply `delay_s` late: slow enough to interrupt the variant half."""

    def __init__(self, memoriser: Memoriser, delay_s: float) -> None:
        self.memoriser, self.delay_s = memoriser, delay_s

    def __call__(self, messages):
        row = self.memoriser.row_for(messages)
        return Reply(self.memoriser.answer(row), delay_s=self.delay_s if row["info"]["parent_id"] else 0.0)


def _rows_of(path: Path, sql: str) -> list[tuple]:
    database = sqlite3.connect(path)
    try:
        return database.execute(sql).fetchall()
    finally:
        database.close()


def test_resume_finishes_the_variant_half_of_an_interrupted_check(built, rows, tmp_path, monkeypatch):
    limit, k = 6, 2
    monkeypatch.setenv(API_KEY_VAR, "not-a-real-key")
    store = tmp_path / "v.sqlite"
    db_url, export = f"sqlite:///{store}", str(built["export_dir"])
    memoriser = Memoriser(rows, load_hidden_tests(built["export_dir"]))
    # what --limit selects (the first ids), and the parents of the selected variants among the train items
    train_ids = sorted(r["id"] for r in rows if not r["info"]["parent_id"] and r["info"]["split"] == "train"
                       and int(r["info"]["chapter"]) <= 8)[:limit]
    variant_rows = sorted((r for r in rows if r["info"]["parent_id"] and r["info"]["variant_seed"] <= k),
                          key=lambda r: r["id"])[:limit]
    common = {r["info"]["parent_id"] for r in variant_rows} & set(train_ids)
    assert common
    with FakeOpenAI(SlowOnVariants(memoriser, delay_s=0.5)) as server:
        process = subprocess.Popen(
            [sys.executable, "-c", "from scaling_book.cli import main; main()", "transfer-check", "-m", "scripted",
             "--base-url", server.base_url, "--api-key-var", API_KEY_VAR, "--rollouts", "1", "--max-concurrent", "1",
             "--limit", str(limit), "--variants", str(k), "--db", db_url, "--export-dir", export],
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # a code variant asks its original's question (only its test cases differ): look for the others
        originals = {r["question"] for r in rows if not r["info"]["parent_id"]}
        variant_questions = {r["question"] for r in variant_rows} - originals
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:   # train and held-out done, the first variant request in flight
            assert process.poll() is None, process.stdout.read()
            if any(user_text(r.body["messages"]) in variant_questions for r in server.completions()):
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=120)
    assert process.returncode == 130, output
    [(check_id, status)] = _rows_of(store, "SELECT id, status FROM transfer_checks")
    [(run_id, run_status)] = _rows_of(store, "SELECT id, status FROM eval_runs WHERE config = 'train_variants'")
    stored = _rows_of(store, f"SELECT COUNT(*) FROM rollout_results WHERE run_id = {run_id}")[0][0]
    assert (status, run_status) == ("interrupted", "interrupted") and 1 <= stored < limit, output

    with FakeOpenAI(memoriser) as server:
        result = CliRunner(env={"COLUMNS": "260"}).invoke(app, [
            "resume", str(run_id), "--db", db_url, "--export-dir", export, "--base-url", server.base_url])
        resumed = server.completions()
    assert result.exit_code == 0, result.output
    assert len(resumed) == limit - stored   # only the variant half's missing pairs ran
    assert _rows_of(store, "SELECT id, status FROM eval_runs WHERE config = 'train_variants'") == [(run_id, "complete")]
    pairs = _rows_of(store, f"SELECT item_id, rollout_index FROM rollout_results WHERE run_id = {run_id}")
    assert sorted(pairs) == sorted((r["id"], 0) for r in variant_rows)
    # the memoriser is right on every original and wrong on every variant: 100 points over `common`
    [(status, k_stored, variant_accuracy, points)] = _rows_of(store, (
        "SELECT status, variants_per_item, variant_train_accuracy, memorisation_gap_points FROM transfer_checks"))
    assert (status, k_stored, variant_accuracy) == ("complete", k, 0.0) and points == pytest.approx(100.0)
    assert _rows_of(store, "SELECT transfer_check_id FROM transfer_gap") == [(check_id,)]


def test_a_check_started_before_k_was_stored_resumes_with_the_k_its_hash_names(built):
    configs = json.loads((built["export_dir"] / "manifest.json").read_text())["configs"]
    # the combined hash a check started with --variants 3 recorded, spelled out from the manifest
    text = f"{configs['train']['dataset_hash']}\n{configs['heldout']['dataset_hash']}\n" \
           f"{configs['train_variants']['dataset_hash']}:3"
    old_check = SimpleNamespace(variants_per_item=None, dataset_hash=hashlib.sha256(text.encode()).hexdigest())
    request = EvalRequest(model="m", base_url="http://127.0.0.1:9/v1", api_key_var=API_KEY_VAR, config="train",
                          export_dir=built["export_dir"])
    assert started_variants(old_check, request) == 3
    assert started_variants(SimpleNamespace(variants_per_item=5, dataset_hash="x"), request) == 5
    assert started_variants(SimpleNamespace(variants_per_item=None, dataset_hash="no such hash"), request) == 0
