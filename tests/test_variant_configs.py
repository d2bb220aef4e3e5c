"""The variant configs (`train_variants`, `heldout_variants`), the taskset's `variant_seed`, and
`vf-eval ... --env.taskset.config train_variants` offline against the local fake server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from fake_openai import FakeOpenAI, Oracle, read_export_rows
from test_reward_hacking import FORMULAS, KNOWLEDGE_FREE_CEILING, constant_responses

from scaling_book.content.variants import load_context
from scaling_book.grading import grade
from scaling_book.paths import SEED_DIR

KEY_VAR = "SCALING_BOOK_TEST_API_KEY"


def test_variant_configs_hold_k_variants_per_parametric_item_with_parent_seed_and_inputs(built):
    context = load_context(SEED_DIR)
    k = built["report"].variants.k
    for config, chapters in (("train_variants", range(1, 9)), ("heldout_variants", (12,))):
        rows = read_export_rows(built["export_dir"], config)
        parents = [i for i in context.parametric_ids() if int(i[2:4]) in chapters]
        assert parents, config
        assert Counter(row["info"]["parent_id"] for row in rows) == {p: k for p in parents}
        for row in rows:
            info = row["info"]
            assert row["id"] == f"{info['parent_id']}@v{info['variant_seed']}" and info["variant_seed"] >= 1
            assert json.loads(info["variant_inputs"]) and info["item_id"] == row["id"]
    originals = read_export_rows(built["export_dir"], "all")
    assert all(row["info"]["parent_id"] == "" and row["info"]["variant_seed"] == -1 for row in originals)


def test_the_original_numbers_score_zero_and_the_variant_key_full_on_every_qa_variant(built):
    originals = {row["id"]: row for row in read_export_rows(built["export_dir"], "all")}
    rows = [r for r in read_export_rows(built["export_dir"], "train_variants") if r["info"]["grader"] != "code"]
    for row in rows:
        book = originals[row["info"]["parent_id"]]["info"]["targets"]
        assert grade(row["info"], "<answer>" + "; ".join(repr(v) for v in book) + "</answer>").correctness < 1.0
        assert grade(row["info"], "<answer>" + "; ".join(repr(v) for v in row["info"]["targets"]) + "</answer>").exact


def test_knowledge_free_constants_score_at_most_five_percent_on_the_variant_configs(built):
    """The grid of tests/test_reward_hacking.py over the qa rows of both variant configs (code rows get
    no python block from these responses and score 0; the count includes them). For time, the first
    5 variants (seeds 1-5) of every parent: the draws are independent of the seed's value."""
    rows = [row for config in ("train_variants", "heldout_variants")
            for row in read_export_rows(built["export_dir"], config) if row["info"]["variant_seed"] <= 5]
    infos = [row["info"] for row in rows]
    qa = [info for info in infos if info["grader"] != "code"]
    best_mean, best = 0.0, None
    for response in constant_responses():
        content = response[len("<answer>"):-len("</answer>")]
        if content in FORMULAS and not content[0].isdigit():
            continue
        mean = sum(grade(info, response).correctness for info in qa) / len(infos)
        if mean > best_mean:
            best_mean, best = mean, response
    assert best_mean <= KNOWLEDGE_FREE_CEILING, (best, best_mean)


def test_variant_seed_draws_fresh_deterministic_variants_at_load_time(built):
    from scaling_book.environment.taskset import (
        ScalingBookTaskset,
        ScalingBookTasksetConfig,
        gold_response,
    )

    def load(seed):
        config = ScalingBookTasksetConfig(id="scaling-book", config="train", export_dir=built["export_dir"],
                                          variant_seed=seed)
        return list(ScalingBookTaskset(config))

    context = load_context(SEED_DIR)
    plain, epoch3, again, epoch4 = load(None), load("epoch:3"), load("epoch:3"), load("epoch:4")
    assert [t.data.id for t in plain] == [t.data.info["parent_id"] or t.data.id for t in epoch3]
    fresh = [t for t in epoch3 if t.data.info["parent_id"]]
    assert {t.data.info["parent_id"] for t in fresh} == {i for i in context.parametric_ids() if int(i[2:4]) <= 8}
    assert [(t.data.id, t.data.prompt) for t in epoch3] == [(t.data.id, t.data.prompt) for t in again]
    assert [t.data.prompt for t in epoch3 if t.data.info["parent_id"]] != \
        [t.data.prompt for t in epoch4 if t.data.info["parent_id"]]
    for task in fresh:
        if task.data.info["grader"] != "code":
            assert grade(task.data.info, gold_response(task.data)).exact, task.data.id


def test_vf_eval_runs_train_variants_offline_against_the_local_server(built, tmp_path):
    rows = read_export_rows(built["export_dir"], "train_variants")
    vf_eval = Path(sys.executable).with_name("vf-eval")
    env = {**os.environ, "SCALING_BOOK_EXPORT": str(built["export_dir"]), KEY_VAR: "test-key-not-secret"}
    with FakeOpenAI(Oracle(rows)) as server:
        result = subprocess.run(
            [str(vf_eval), "scaling-book", "-m", "oracle-model", "--client.base-url", server.base_url,
             "--client.api-key-var", KEY_VAR, "--no-push", "--env.taskset.config", "train_variants", "-n", "30"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
        )
    assert result.returncode == 0, result.stderr[-4000:]
    [traces_file] = tmp_path.glob("outputs/*/traces.jsonl")
    episodes = [json.loads(line) for line in traces_file.read_text().splitlines() if line.strip()]
    assert len(episodes) == 30
    for episode in episodes:
        [trace] = episode["traces"]
        assert episode["task"]["data"]["info"]["parent_id"]
        assert trace["rewards"]["correctness"]["score"] == 1.0, trace["info"]["grade"]
