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
