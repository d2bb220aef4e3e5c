"""Evaluating models as they are served today, end to end against the scripted server.

Reasoning output (a reply with only `</think>`, `reasoning_content`, a null content), replies cut at
the token limit, sampling arguments, the endpoint preflight (401, refused connection, unknown model),
a server that hangs, SIGINT to a running `eval` followed by `resume`, read-only stores, stale runs,
and the commands that show items and results. Each run uses `--limit` to stay small; the expected
values are worked out from the scripted replies.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, Oracle, Reply, Wrong, read_export_rows
from typer.testing import CliRunner

KEY_VAR = "SCALING_BOOK_TEST_API_KEY"
KEY = "test-key-not-secret"
REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VAR, KEY)


def cli(*args: str) -> tuple[int, str]:
    from scaling_book.cli import app

    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def eval_args(base_url: str, db_url: str, export_dir: Path, *extra: str, config: str = "qa",
              model: str = "scripted") -> list[str]:
    return ["eval", "--model", model, "--base-url", base_url, "--api-key-var", KEY_VAR, "--config", config,
            "--db", db_url, "--export-dir", str(export_dir), *extra]


def query(db_url: str, sql: str, *params) -> list[sqlite3.Row]:
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as connection:
        connection.row_factory = sqlite3.Row
        return connection.execute(sql, params).fetchall()


def first_ids(rows: list[dict], n: int) -> list[str]:
    """The items `--limit n` selects: the first n by id."""
    return sorted(row["id"] for row in rows)[:n]


@pytest.fixture(scope="module")
def qa_rows(built) -> list[dict]:
    return read_export_rows(built["export_dir"], "qa")


def test_reasoning_truncation_and_null_content_are_graded_by_the_rules(built, db_url, qa_rows):
    ids = first_ids(qa_rows, 6)
    oracle = Oracle(qa_rows)
    long_reasoning = "ponder " * 4000   # 28,000 characters: over the 20,000 stored
    scripted = {
        ids[0]: lambda right: Reply(right, finish_reason="length"),              # right answer, but cut off
        ids[1]: lambda right: Reply(right + "\nWait, let me redo this.</think>The answer is above."),
        ids[2]: lambda right: Reply(right, reasoning_content=long_reasoning),
        ids[3]: lambda right: Reply(None),
        ids[4]: lambda right: Reply("Draft.</think>\n" + right),
    }

    def policy(messages):
        row = oracle.row_for(messages)
        right = oracle.answer(row)
        return scripted.get(row["id"], Reply)(right)

    with FakeOpenAI(policy) as server:
        code, output = cli(*eval_args(server.base_url, db_url, built["export_dir"], "--limit", "6",
                                      "--temperature", "0.3", "--top-p", "0.9", "--max-tokens", "512",
                                      "--seed", "7"))
        bodies = [request.body for request in server.completions()]
    assert code == 0, output   # truncated is not an error: the run completes
    assert "1 truncated" in output
    [run] = query(db_url, "SELECT * FROM eval_runs")
    assert run["status"] == "complete" and run["item_limit"] == 6
    sampling = json.loads(run["sampling_json"])
    assert {k: sampling[k] for k in ("temperature", "top_p", "max_tokens", "seed", "system_prompt_mode")} == {
        "temperature": 0.3, "top_p": 0.9, "max_tokens": 512, "seed": 7, "system_prompt_mode": "system"}
    assert len(bodies) == 6
    for body in bodies:   # what was stored is what was sent
        assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (0.3, 0.9, 512, 7)
    rows = {r["item_id"]: r for r in query(db_url, "SELECT * FROM rollout_results")}
    assert sorted(rows) == ids
    cut = rows[ids[0]]
    assert (cut["status"], cut["finish_reason"], cut["correctness"], cut["format"], cut["exact"], cut["reward"]) == (
        "truncated", "length", 0.0, 0.0, 0, 0.0)
    only_close = rows[ids[1]]   # the right answer sits before the last </think>: reasoning, not graded
    assert (only_close["status"], only_close["correctness"], only_close["format"]) == ("ok", 0.0, 0.0)
    assert only_close["response"] == "The answer is above." and "<answer>" in only_close["reasoning"]
    with_reasoning = rows[ids[2]]
    assert (with_reasoning["exact"], with_reasoning["reasoning_chars"]) == (1, len(long_reasoning))
    assert with_reasoning["reasoning"] == long_reasoning[:20_000]
    assert "ponder" not in with_reasoning["response"]
    null = rows[ids[3]]
    assert (null["status"], null["correctness"], null["format"], null["finish_reason"]) == ("ok", 0.0, 0.0, "stop")
    after_close = rows[ids[4]]
    assert (after_close["exact"], after_close["reasoning"]) == (1, "Draft.")
    assert rows[ids[5]]["exact"] == 1 and rows[ids[5]]["reasoning"] is None
    # mean exact over every rollout, truncated ones included: 3 of 6
    assert sum(r["exact"] for r in rows.values()) / len(rows) == 0.5


def test_compare_warns_when_sampling_differs(built, db_url, qa_rows):
    with FakeOpenAI(Oracle(qa_rows)) as server:
        for temperature in ("0", "1"):
            code, output = cli(*eval_args(server.base_url, db_url, built["export_dir"], "--limit", "2",
                                          "--temperature", temperature))
            assert code == 0, output
    code, output = cli("compare", "1", "2", "--db", db_url)
    assert code == 0, output
    assert "sampled differently: temperature = 0.0 in run 1, 1.0 in run 2" in output


def test_system_prompt_mode_user_folds_the_instructions_into_the_user_message(built, db_url, qa_rows):
    with FakeOpenAI(Oracle(qa_rows)) as server:
        code, output = cli(*eval_args(server.base_url, db_url, built["export_dir"], "--limit", "2",
                                      "--system-prompt-mode", "user"))
        bodies = [request.body for request in server.completions()]
    assert code == 0, output
    by_id = {row["id"]: row for row in qa_rows}
    for body in bodies:
        [message] = body["messages"]
        assert message["role"] == "user"
        assert message["content"].startswith(next(iter(by_id.values()))["prompt"][0]["content"])
    assert json.loads(query(db_url, "SELECT sampling_json FROM eval_runs")[0][0])["system_prompt_mode"] == "user"
    assert [r["exact"] for r in query(db_url, "SELECT exact FROM rollout_results")] == [1, 1]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("case", ["401", "refused", "unknown model"])
def test_preflight_fails_fast_with_one_line_and_exit_3(built, db_url, qa_rows, case):
    server = FakeOpenAI(Oracle(qa_rows), api_key="another-key" if case == "401" else None,
                        served_models=["served-model"] if case == "unknown model" else [])
    with server:
        base_url = f"http://127.0.0.1:{_closed_port()}/v1" if case == "refused" else server.base_url
        started = time.monotonic()
        code, output = cli(*eval_args(base_url, db_url, built["export_dir"], "--limit", "2"))
        elapsed = time.monotonic() - started
        sent = server.completions()
    assert code == 3, output
    assert elapsed < 10, elapsed          # seconds, not retries x items
    assert not sent                        # no rollout request went out
    expected = {"401": "refused the API key from $" + KEY_VAR, "refused": "cannot connect to",
                "unknown model": "model 'scripted' is not served"}[case]
    assert expected in output
    assert output.count("endpoint check failed") == 1
    assert query(db_url, "SELECT COUNT(*) FROM eval_runs")[0][0] == 0


def test_a_server_that_never_answers_fails_the_run_within_the_request_timeout(built, db_url, qa_rows):
    with FakeOpenAI(lambda messages: Reply(None, hang=True)) as server:
        started = time.monotonic()
        code, output = cli(*eval_args(server.base_url, db_url, built["export_dir"], "--limit", "1",
                                      "--request-timeout", "1"))
        elapsed = time.monotonic() - started
    assert code == 3, output
    assert elapsed < 60, elapsed   # bounded: a few attempts of 1 s each, not forever
    [run] = query(db_url, "SELECT status FROM eval_runs")
    assert run["status"] == "failed"
    [rollout] = query(db_url, "SELECT status, error FROM rollout_results")
    assert rollout["status"] == "error" and rollout["error"]


def test_empty_selection_is_an_error(built, db_url):
    code, output = cli(*eval_args("http://127.0.0.1:9/v1", db_url, built["export_dir"], "--limit", "0"))
    assert code == 2, output
    assert "selects no items" in output


class Mixed:
    """Right on the items whose id sorts into an even position, wrong on the others; each reply
    waits `delay_s` seconds (slow enough to interrupt a run in the middle)."""

    def __init__(self, rows, delay_s: float = 0.0):
        self.oracle, self.wrong, self.delay_s = Oracle(rows), Wrong(rows), delay_s
        self.right = set(sorted(row["id"] for row in rows)[::2])

    def __call__(self, messages):
        row = self.oracle.row_for(messages)
        policy = self.oracle if row["id"] in self.right else self.wrong
        return Reply(policy.answer(row), delay_s=self.delay_s)


def _spawn(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, KEY_VAR: KEY, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-c", "from scaling_book.cli import main; main()", *args],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for_rollouts(db_url: str, at_least: int, process: subprocess.Popen, timeout_s: float = 900) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read()
        try:
            count = query(db_url, "SELECT COUNT(*) FROM rollout_results")[0][0]
        except sqlite3.OperationalError:   # the store is not created yet
            count = 0
        if count >= at_least:
            return count
        time.sleep(0.1)
    raise AssertionError(f"fewer than {at_least} rollouts stored after {timeout_s} s")


def test_sigint_stores_finished_rollouts_and_resume_completes_the_run(built, tmp_path, qa_rows):
    limit, rollouts = 8, 2
    db_url = f"sqlite:///{tmp_path / 'interrupted.sqlite'}"
    reference_db = f"sqlite:///{tmp_path / 'reference.sqlite'}"
    with FakeOpenAI(Mixed(qa_rows, delay_s=0.4)) as server:
        process = _spawn(eval_args(server.base_url, db_url, built["export_dir"], "--limit", str(limit),
                                   "--rollouts", str(rollouts), "--max-concurrent", "2", "--seed", "3"))
        stored_before = _wait_for_rollouts(db_url, 3, process)
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=120)
    assert process.returncode == 130, output
    [run] = query(db_url, "SELECT * FROM eval_runs")
    stored = query(db_url, "SELECT COUNT(*) FROM rollout_results")[0][0]
    assert run["status"] == "interrupted"
    assert stored_before <= stored < limit * rollouts   # in-flight ones may finish, not the rest
    assert f"scaling-book resume {run['id']}" in output and f"run {run['id']} started" in output

    code, output = cli("runs", "--db", db_url)
    assert "interrupted" in output
    with FakeOpenAI(Mixed(qa_rows)) as server:
        code, output = cli("resume", str(run["id"]), "--db", db_url, "--export-dir", str(built["export_dir"]),
                           "--base-url", server.base_url)
        resumed_requests = server.completions()
        assert code == 0, output
        assert len(resumed_requests) == limit * rollouts - stored   # only the missing pairs ran
        assert all(request.body["seed"] == 3 for request in resumed_requests)   # stored sampling reused
        code, reference_output = cli(*eval_args(server.base_url, reference_db, built["export_dir"], "--limit",
                                                str(limit), "--rollouts", str(rollouts), "--seed", "3"))
        assert code == 0, reference_output
    [run] = query(db_url, "SELECT * FROM eval_runs")
    assert run["status"] == "complete"
    pairs = query(db_url, "SELECT item_id, rollout_index, exact FROM rollout_results")
    assert len(pairs) == limit * rollouts == len({(p["item_id"], p["rollout_index"]) for p in pairs})
    # Mixed answers the even-position half of the selected items right: 4 of 8 items, every rollout.
    assert sum(p["exact"] for p in pairs) / len(pairs) == 0.5
    reference = query(reference_db, "SELECT item_id, rollout_index, exact FROM rollout_results")
    assert sorted(map(tuple, reference)) == sorted(map(tuple, pairs))


def test_resume_refuses_a_complete_run_and_a_changed_export(built, db_url, qa_rows, tmp_path):
    import shutil

    with FakeOpenAI(Oracle(qa_rows)) as server:
        code, output = cli(*eval_args(server.base_url, db_url, built["export_dir"], "--limit", "1"))
        assert code == 0, output
    code, output = cli("resume", "1", "--db", db_url, "--export-dir", str(built["export_dir"]))
    assert code == 4 and "is complete" in output
    query(db_url, "SELECT 1")
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as connection:
        connection.execute("UPDATE eval_runs SET status = 'interrupted'")
    export = tmp_path / "export"
    shutil.copytree(built["export_dir"], export)
    manifest = json.loads((export / "manifest.json").read_text())
    manifest["configs"]["qa"]["dataset_hash"] = "0" * 64
    (export / "manifest.json").write_text(json.dumps(manifest))
    code, output = cli("resume", "1", "--db", db_url, "--export-dir", str(export))
    assert code == 4 and "has changed" in output


def test_stale_running_runs_show_distinctly_and_are_pruned(built, db_url, qa_rows):
    with FakeOpenAI(Oracle(qa_rows)) as server:
        code, output = cli(*eval_args(server.base_url, db_url, built["export_dir"], "--limit", "1"))
        assert code == 0, output
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()   # a pid that no longer runs
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as connection:
        connection.execute("UPDATE eval_runs SET status = 'running', pid = ?, host = ?", (dead.pid, socket.gethostname()))
    code, output = cli("runs", "--db", db_url)
    assert code == 0 and "running (stale)" in output
    code, output = cli("runs", "--prune-stale", "--db", db_url)
    assert code == 0 and "marked 1 stale running runs failed: 1" in output
    assert query(db_url, "SELECT status FROM eval_runs")[0][0] == "failed"


def test_read_commands_work_on_a_read_only_store(built, db_url, qa_rows):
    with FakeOpenAI(Oracle(qa_rows)) as server:
        for _ in range(2):
            code, output = cli(*eval_args(server.base_url, db_url, built["export_dir"], "--limit", "2"))
            assert code == 0, output
    path = db_url.removeprefix("sqlite:///")
    read_only = f"sqlite:///file:{path}?mode=ro&uri=true"
    code, output = cli("runs", "--db", read_only)
    assert code == 0 and "complete" in output, output
    code, output = cli("compare", "1", "2", "--db", read_only)
    assert code == 0 and "2 common items" in output, output
    code, output = cli("history", "--db", read_only)
    assert code == 4 and "no completed transfer checks" in output, output
    assert not Path("file:" + str(Path(path).parent)).exists()


def test_items_show_and_export_run(built, db_url, qa_rows, tmp_path):
    ids = first_ids(qa_rows, 2)
    code, output = cli("items", "--config", "qa", "--export-dir", str(built["export_dir"]))
    assert code == 0 and ids[0] in output and f"items of config qa ({len(qa_rows)})" in output
    code, output = cli("items", "show", ids[0], "--export-dir", str(built["export_dir"]))
    row = next(r for r in qa_rows if r["id"] == ids[0])
    assert code == 0 and row["question"][:60] in output and row["answer"] in output
    with FakeOpenAI(Wrong(qa_rows)) as server:
        code, output = cli(*eval_args(server.base_url, db_url, built["export_dir"], "--limit", "2"))
    code, output = cli("show", "1", "--wrong", "--item", ids[1], "--db", db_url)
    assert code == 0 and "1 of 2 rollouts shown" in output and ids[1] in output
    out = tmp_path / "run.jsonl"
    code, output = cli("export-run", "1", "--format", "jsonl", "--output", str(out), "--db", db_url)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["item_id"] for r in records] == ids and all(r["exact"] == 0 for r in records)
    out = tmp_path / "run.csv"
    code, output = cli("export-run", "1", "--format", "csv", "--output", str(out), "--db", db_url)
    import csv

    with out.open() as handle:
        assert [r["status"] for r in csv.DictReader(handle)] == ["ok", "ok"]


def test_the_taskset_scores_a_truncated_trace_zero_on_every_signal(qa_rows):
    """Under `vf-eval` the taskset's own signals read `trace.is_truncated` (finish_reason "length")."""
    import asyncio
    from types import SimpleNamespace

    from scaling_book.environment.taskset import (
        TRUNCATED_REASON,
        ScalingBookTask,
        ScalingBookTaskConfig,
        row_data,
    )

    row = qa_rows[0]
    right = Oracle(qa_rows).answer(row)
    scores = {}
    for truncated in (False, True):
        task = ScalingBookTask(row_data(row), ScalingBookTaskConfig())
        trace = SimpleNamespace(info={}, is_truncated=truncated, last_reply=right)
        scores[truncated] = [asyncio.run(signal(trace)) for signal in (task.correctness, task.format, task.exact)]
        if truncated:
            assert trace.info["grade"]["reason"] == TRUNCATED_REASON
    assert scores == {False: [1.0, 1.0, 1.0], True: [0.0, 0.0, 0.0]}
