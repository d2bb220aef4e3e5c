"""End to end: exported items -> verifiers taskset -> a local OpenAI-compatible server -> run history.

A scripted server on 127.0.0.1 (tests/fake_openai.py) answers from the item key: the oracle
answers every item correctly, the wrong policy every item incorrectly but in the answer format.
`scaling-book eval` must store correctness 1.0 (resp. 0.0) for every item; a rollout whose model
call fails must be stored as an error and fail the run; `vf-eval scaling-book` with only the
documented flags must complete against the same server and score every item.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, Oracle, PolicyError, Wrong, read_export_rows
from typer.testing import CliRunner

KEY_VAR = "SCALING_BOOK_TEST_API_KEY"
REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_VAR, "test-key-not-secret")
    return "test-key-not-secret"


def run_cli_eval(base_url: str, db_url: str, export_dir: Path, config: str, model: str) -> tuple[int, str]:
    from scaling_book.cli import app

    result = CliRunner().invoke(app, [
        "eval", "--model", model, "--base-url", base_url, "--api-key-var", KEY_VAR,
        "--config", config, "--db", db_url, "--export-dir", str(export_dir),
    ])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def stored(db_url: str) -> tuple[list[sqlite3.Row], list[sqlite3.Row]]:
    """Every eval run and every rollout result in the store."""
    path = db_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as connection:
        connection.row_factory = sqlite3.Row
        runs = connection.execute("SELECT * FROM eval_runs ORDER BY id").fetchall()
        rollouts = connection.execute("SELECT * FROM rollout_results ORDER BY id").fetchall()
    return runs, rollouts


def test_oracle_eval_stores_full_correctness_for_every_item(built, db_url):
    rows = read_export_rows(built["export_dir"], "all")
    # Every chapter-1 item is in the run, and every grader path runs.
    assert any(row["info"]["chapter"] == 1 for row in rows)
    assert {row["info"]["grader"] for row in rows} == {"numeric", "numeric_multi", "mcq", "formula", "code"}
    with FakeOpenAI(Oracle(rows)) as server:
        code, output = run_cli_eval(server.base_url, db_url, built["export_dir"], "all", "oracle-model")
        requests = server.completions()
    assert code == 0, output

    runs, rollouts = stored(db_url)
    assert [(run["model"], run["config"], run["status"]) for run in runs] == [("oracle-model", "all", "complete")]
    # The run records how code ran: here, under the bwrap this machine has (code scored 1.0 above).
    from scaling_book.grading.sandbox import bwrap_binary, isolation_mode

    if isolation_mode() == "bwrap":
        assert runs[0]["isolation"] == f"bwrap {'.'.join(map(str, bwrap_binary().version))} ({bwrap_binary().source})"
    assert sorted(r["item_id"] for r in rollouts) == sorted(row["id"] for row in rows)  # one rollout per item
    for r in rollouts:
        assert (r["item_id"], r["status"], r["correctness"], r["exact"], r["format"]) == (
            r["item_id"], "ok", 1.0, 1, 1.0), r["reason"]
        assert r["reward"] == pytest.approx(1.0 * 1.0 + 0.2 * 1.0)
        assert r["reason"], f"{r['item_id']}: no grader reason stored"
        assert r["response"], f"{r['item_id']}: no response stored"

    # Exactly one request per item reached the endpoint: the item's own system prompt and question,
    # authenticated with the key from the named variable.
    assert len(requests) == len(rows)
    by_question = {row["question"]: row for row in rows}
    for request in requests:
        messages = request.body["messages"]
        assert [m["role"] for m in messages] == ["system", "user"]
        row = by_question[messages[1]["content"]]
        assert messages[0]["content"] == row["prompt"][0]["content"]
        assert request.body["model"] == "oracle-model"
        assert request.authorization == "Bearer test-key-not-secret"


def test_wrong_answers_store_zero_correctness_for_every_item(built, db_url):
    rows = read_export_rows(built["export_dir"], "all")
    with FakeOpenAI(Wrong(rows)) as server:
        code, output = run_cli_eval(server.base_url, db_url, built["export_dir"], "all", "wrong-model")
    assert code == 0, output  # every rollout completed: a wrong answer is not an error

    runs, rollouts = stored(db_url)
    assert [run["status"] for run in runs] == ["complete"]
    assert sorted(r["item_id"] for r in rollouts) == sorted(row["id"] for row in rows)
    for r in rollouts:
        # Well formed but wrong: no credit, no exact match, the format bonus only.
        assert (r["item_id"], r["status"], r["correctness"], r["exact"], r["format"]) == (
            r["item_id"], "ok", 0.0, 0, 1.0), r["reason"]
        assert r["reward"] == pytest.approx(0.2)


def test_failed_model_call_is_stored_as_error_and_fails_the_run(built, db_url):
    rows = read_export_rows(built["export_dir"], "qa")
    failing = rows[0]
    oracle = Oracle(rows)

    def policy(messages):
        if messages[-1]["content"] == failing["question"]:
            raise PolicyError(400, "scripted refusal for one item")
        return oracle(messages)

    with FakeOpenAI(policy) as server:
        code, output = run_cli_eval(server.base_url, db_url, built["export_dir"], "qa", "flaky-model")
    assert code == 3, output

    runs, rollouts = stored(db_url)
    assert [run["status"] for run in runs] == ["failed"]
    statuses = {r["item_id"]: r["status"] for r in rollouts}
    assert statuses == {row["id"]: ("error" if row["id"] == failing["id"] else "ok") for row in rows}
    [error] = [r for r in rollouts if r["status"] == "error"]
    assert "400" in error["error"] and "scripted refusal" in error["error"]
    assert (error["correctness"], error["reward"]) == (0.0, 0.0)
    assert all(r["correctness"] == 1.0 for r in rollouts if r["status"] == "ok")


def test_evaluate_grades_once_per_rollout_and_reports_progress(built, monkeypatch):
    import scaling_book.environment.taskset as taskset
    from scaling_book.runs.runner import evaluate

    rows = read_export_rows(built["export_dir"], "code")
    calls: Counter[str] = Counter()
    real_grade = taskset.grade_async

    async def counting_grade(info, response, **kwargs):
        calls[info["item_id"]] += 1
        return await real_grade(info, response, **kwargs)

    monkeypatch.setattr(taskset, "grade_async", counting_grade)
    progress: list[tuple[int, int]] = []
    with FakeOpenAI(Oracle(rows)) as server:
        outcome = evaluate(config="code", model="oracle-model", base_url=server.base_url, api_key_var=KEY_VAR,
                           rollouts_per_item=2, max_concurrent=4, export_dir=built["export_dir"],
                           sampling={"temperature": 0.0, "max_tokens": 512}, on_progress=lambda d, t: progress.append((d, t)))
        requests = server.completions()

    total = 2 * len(rows)
    assert calls == Counter({row["id"]: 2 for row in rows})  # four signals, one grade per rollout
    assert progress == [(done, total) for done in range(total + 1)]
    assert sorted((r.item_id, r.rollout_index) for r in outcome.rollouts) == sorted(
        (row["id"], i) for row in rows for i in (0, 1))
    assert all(r.status == "ok" and r.correctness == 1.0 and r.grader == "code" for r in outcome.rollouts)
    assert outcome.sampling == {"temperature": 0.0, "max_tokens": 512}
    assert all(r.body.get("temperature") == 0.0 and r.body.get("max_tokens") == 512 for r in requests)


def test_vf_eval_with_documented_flags_completes_against_the_local_server(built, tmp_path):
    rows = read_export_rows(built["export_dir"], "train")  # vf-eval's default config is `train`
    vf_eval = Path(sys.executable).with_name("vf-eval")
    env = {**os.environ, "SCALING_BOOK_EXPORT": str(built["export_dir"]), KEY_VAR: "test-key-not-secret"}
    with FakeOpenAI(Oracle(rows)) as server:
        result = subprocess.run(
            [str(vf_eval), "scaling-book", "-m", "oracle-model", "--client.base-url", server.base_url,
             "--client.api-key-var", KEY_VAR, "--no-push"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
        )
        requests = server.completions()
    assert result.returncode == 0, result.stderr[-4000:]
    # vf-eval exits 0 even when every rollout errored: read what it recorded.
    [traces_file] = tmp_path.glob("outputs/*/traces.jsonl")
    episodes = [json.loads(line) for line in traces_file.read_text().splitlines() if line.strip()]
    assert sorted(e["task"]["data"]["id"] for e in episodes) == sorted(row["id"] for row in rows)
    for episode in episodes:
        [trace] = episode["traces"]
        assert episode["ok"] and trace["ok"], trace.get("errors")
        assert trace["rewards"]["correctness"] == {"score": 1.0, "weight": 1.0}, (
            episode["task"]["data"]["id"], trace["info"]["grade"])
        assert trace["rewards"]["format"] == {"score": 1.0, "weight": 0.2}
        assert trace["metrics"]["exact"] == 1.0
        assert trace["info"]["grade"]["reason"]
    assert len(requests) == len(rows)


def test_gold_answer_of_every_item_validates(built, monkeypatch):
    from scaling_book.environment.taskset import (
        ScalingBookTaskset,
        ScalingBookTasksetConfig,
    )

    taskset = ScalingBookTaskset(ScalingBookTasksetConfig(id="scaling-book", config="all",
                                                          export_dir=built["export_dir"]))
    tasks = list(taskset)
    assert len(tasks) == len(read_export_rows(built["export_dir"], "all"))

    async def validate_all():
        return await asyncio.gather(*(task.validate(None) for task in tasks))

    results = asyncio.run(validate_all())
    assert {task.data.id: result for task, result in zip(tasks, results, strict=True)} == {task.data.id: True for task in tasks}


def test_hash_split_partitions_each_config_stably(built):
    from scaling_book.environment.taskset import (
        ScalingBookTaskset,
        ScalingBookTasksetConfig,
    )

    def ids(config: str, subset: str, fraction: float = 0.2) -> set[str]:
        taskset = ScalingBookTaskset(ScalingBookTasksetConfig(
            id="scaling-book", config=config, subset=subset, eval_fraction=fraction,
            export_dir=built["export_dir"]))
        return {task.data.id for task in taskset}

    everything = ids("all", "all")
    eval_side, train_side = ids("all", "eval"), ids("all", "train")
    assert eval_side | train_side == everything and not eval_side & train_side
    assert eval_side == ids("all", "eval")  # stable between loads
    # An item's side depends on its id alone, not on which other items share the config.
    assert ids("qa", "eval") == eval_side & ids("qa", "all")
    # A selection with no items is an error, not an empty run.
    for subset, fraction in (("eval", 0.0), ("train", 1.0)):
        with pytest.raises(ValueError, match="selects no items"):
            ids("all", subset, fraction)


def test_taskset_refuses_rows_that_do_not_match_the_manifest(built, tmp_path):
    import shutil

    import pyarrow.parquet as pq

    from scaling_book.environment.taskset import read_rows

    export = tmp_path / "export"
    shutil.copytree(built["export_dir"], export)
    [file] = (export / "qa").glob("*.parquet")
    table = pq.read_table(file)
    pq.write_table(table.slice(1), file)  # one item missing, manifest unchanged
    assert len(read_rows("code", export)) == len(read_export_rows(built["export_dir"], "code"))
    with pytest.raises(ValueError, match="manifest"):
        read_rows("qa", export)


def test_taskset_configs_are_the_exported_configs():
    from scaling_book.content.export import CONFIGS as EXPORTED
    from scaling_book.environment.taskset import CONFIGS

    assert set(CONFIGS) == set(EXPORTED)


def test_importing_the_package_and_cli_does_not_import_verifiers():
    code = ("import sys, scaling_book, scaling_book.cli, scaling_book.runs.runner; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'verifiers'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    assert out.stdout.strip() == "[]"
