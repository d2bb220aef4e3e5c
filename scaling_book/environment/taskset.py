"""The scaling-book taskset: single-turn questions and implementation tasks from the book.

Each task is one exported item (`build/export/<config>/*.parquet`, written by
`scaling-book build`): a system prompt stating the answer format, and a question from one chapter
of *How To Scale Your Model*. The model answers once. The response is graded once per rollout by
`scaling_book.grading.grade`, dispatched on the item's grader (numeric, numeric_multi, mcq,
formula, code), and that one grade feeds every signal:

- reward `correctness` (weight 1.0): the grader's credit in [0, 1];
- reward `format` (weight 0.2): 1 when the response carries a parseable final answer, else 0;
- metric `exact`: 1 for full credit, else 0 (the transfer check's accuracy);
- metric `heldout_flag`: 1 for a chapter-12 (GPU, held-out) item, else 0.

The grader's reason (what it extracted and why it scored so) is kept on `trace.info["grade"]`.

Config (`--env.taskset.*`): `config` picks the exported config (`train` by default; `qa`, `code`,
`heldout_qa`, `heldout_code`, `heldout`, `all`); `eval_fraction` and `subset` carve a stable
train/eval split out of it by a hash of the item id (a selection with no items is an error);
`code_timeout` and `allow_code_execution` govern how implementation tasks are graded;
`grading_workers` bounds the grading steps that block (sandbox runs, sympy requests) in flight at
once, off the event loop; `export_dir`
points at the export (default `$SCALING_BOOK_EXPORT`, else `build/export`); `system_prompt_mode`
`user` folds the instructions into the user message, for served models that reject a system message.

Only the visible reply is graded (`scaling_book.grading.extract.visible_reply`: reasoning up to the
last `</think>` never counts; a server's `reasoning_content` is never read). A reply cut at the token
limit (`trace.is_truncated`: finish_reason "length" or a framework token limit) scores 0 on every
signal, since its answer may be a discarded draft.

`variant_seed` (`epoch:N` or `random`) replaces every parametric item's row by a freshly drawn
counterfactual variant (new numbers, same method), so RL training sees fresh numbers each epoch
without a new export. Configs `train_variants` and `heldout_variants` hold K fixed variants per
parametric item for evaluation.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, get_args

import verifiers.v1 as vf
from pydantic import Field

from scaling_book.grading import GRADER_VERSION, Grade, grade_async
from scaling_book.grading.rubric import CORRECTNESS_WEIGHT, FORMAT_WEIGHT, format_reward
from scaling_book.paths import REPO_ROOT, export_dir

ConfigName = Literal["qa", "code", "train", "heldout_qa", "heldout_code", "heldout", "all", "train_variants",
                     "heldout_variants"]
"""The exported configs (`scaling_book.content.export.CONFIGS`; a test keeps the two in step)."""
CONFIGS: tuple[str, ...] = get_args(ConfigName)

GRADE_INFO_KEY = "grade"
"""Where a rollout's grade is kept on `trace.info` (serialized with the trace)."""

GRADE_FIELDS = ("correctness", "exact", "formatted", "reason", "extracted")

TRUNCATED_REASON = "truncated at the token limit (finish_reason length): not graded, scored 0"
"""The reason kept for a truncated rollout."""

SystemPromptMode = Literal["system", "user"]
"""The `Grade` fields kept there, next to `grader` and `grader_version`."""


def in_eval_fraction(item_id: str, eval_fraction: float) -> bool:
    """Whether `item_id` falls in the eval side of the hash split: the first 8 bytes of the
    sha256 of the id, read as a fraction of 2**64, are below `eval_fraction`. Stable across runs,
    machines and Python versions, and independent of the other items."""
    digest = hashlib.sha256(item_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < eval_fraction


class ScalingBookTasksetConfig(vf.TasksetConfig):
    """Which items load and how they are graded (`--env.taskset.<field>`)."""

    config: ConfigName = "train"
    """Exported config to load. Train on `train`; `heldout` is the chapter-12 transfer check."""
    eval_fraction: float = Field(0.2, ge=0.0, le=1.0)
    """Share of the config's items on the eval side of the stable hash split (see `subset`)."""
    subset: Literal["all", "train", "eval"] = "all"
    """`all` loads every item of the config; `eval` only the items whose id hashes into
    `eval_fraction`; `train` the others."""
    code_timeout: float = Field(20.0, gt=0)
    """Wall-clock seconds a submitted implementation may run, all test cases together."""
    allow_code_execution: bool | Literal["unisolated"] = True
    """Run submitted code (in a throwaway subprocess). True: only isolated (bwrap); without working
    isolation implementation tasks score 0 ("no isolation available"). "unisolated": also run it
    without isolation (rlimit fallback). False: implementation tasks score 0."""
    grading_workers: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1)
    """Most grading steps that block (a code submission running in the sandbox, a formula at the
    sympy worker) in flight at once, off the event loop; default: this machine's cores."""
    export_dir: Path | None = None
    """The export folder; unset means `$SCALING_BOOK_EXPORT`, else `<repo>/build/export`."""
    system_prompt_mode: SystemPromptMode = "system"
    """`system` sends the answer-format instructions as a system message; `user` puts them at the
    top of the user message (for served models that reject a system message with HTTP 400)."""
    variants_per_item: int | None = Field(None, ge=1)
    """Keep only the first N exported variants (variant seeds 1..N) of every parent item; rows of
    original items are unaffected. Unset: every row."""
    variant_seed: str | None = Field(None, pattern=r"^(epoch:\d+|random)$")
    """Fresh counterfactual variants without a new export: `epoch:N` replaces every parametric item's
    row with a variant drawn for epoch N (the same rows on every machine), `random` with a random
    epoch. Unset: the exported rows as they are."""


class ScalingBookTaskConfig(vf.TaskConfig):
    """Grading knobs each task reads; the taskset copies them from its own config."""

    code_timeout: float = Field(20.0, gt=0)
    """Wall-clock seconds a submitted implementation may run."""
    allow_code_execution: bool | Literal["unisolated"] = True
    """Whether implementation tasks execute submitted code (see the taskset config)."""
    grading_workers: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1)
    """Size of the grading pool the blocking grading steps run in (see the taskset's config)."""


class ScalingBookData(vf.TaskData):
    """One exported item. `id` is the item id, `prompt` the question, `system_prompt` the
    answer-format instructions."""

    answer: str
    """The canonical answer as text (for a code item: the reference function and its module)."""
    info: dict[str, Any]
    """The grader's key for the item, exactly as exported (grader, targets, tolerance, tests...)."""


class ScalingBookTask(vf.Task[ScalingBookData, vf.State, ScalingBookTaskConfig]):
    """Scores one response to one item. The grade is computed once per rollout and kept on
    `trace.info["grade"]`; every reward and metric reads it from there."""

    @property
    def key(self) -> str:
        """The item id: durable across exports, unique within a config."""
        return self.data.id or self.hash

    async def graded(self, trace: vf.Trace) -> Grade:
        """The rollout's grade: computed by the first signal that asks, kept on the trace, and
        reused by the others (and by any re-scoring of the same trace). Signals that ask while
        it is being computed wait for the same computation.

        Grading does not block the event loop: the sandbox run of a code submission and the
        sympy request of a formula run in the grading pool (`grading_workers` threads), while
        other rollouts make progress. What builds Python syntax trees (formula vetting) stays
        on the loop's thread, as pydantic's parsing does: on CPython 3.11 `ast.parse` is not
        thread-safe (python/cpython#106905, "AST constructor recursion depth mismatch"): with
        whole grades in threads, about one 100-rollout eval in ten lost a correct answer to it."""
        kept = trace.info.get(GRADE_INFO_KEY)
        if kept is not None:
            return Grade(**{field: kept[field] for field in GRADE_FIELDS})
        key = id(trace)
        pending = _GRADING.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._grade_and_keep(trace))
            _GRADING[key] = pending
            pending.add_done_callback(lambda _: _GRADING.pop(key, None))
        return await asyncio.shield(pending)

    async def _grade_and_keep(self, trace: vf.Trace) -> Grade:
        if trace.is_truncated:
            result = Grade(correctness=0.0, exact=False, formatted=False, reason=TRUNCATED_REASON, extracted=None)
        else:
            result = await self.grade_response(trace.last_reply)
        trace.info[GRADE_INFO_KEY] = {
            **{field: getattr(result, field) for field in GRADE_FIELDS},
            "grader": self.data.info.get("grader"),
            "grader_version": GRADER_VERSION,
        }
        return result

    async def grade_response(self, response: str) -> Grade:
        """Grade `response` against this item with the task's code-execution settings, its
        blocking step in the grading pool."""
        return await grade_async(
            self.data.info,
            response,
            allow_code_execution=self.config.allow_code_execution,
            code_timeout_s=self.config.code_timeout,
            executor=grading_pool(self.config.grading_workers),
        )

    @vf.reward(weight=CORRECTNESS_WEIGHT)
    async def correctness(self, trace: vf.Trace) -> float:
        """The grader's credit in [0, 1]."""
        return (await self.graded(trace)).correctness

    @vf.reward(weight=FORMAT_WEIGHT)
    async def format(self, trace: vf.Trace) -> float:
        """1 when the response followed the answer format (a parseable final answer), else 0."""
        return format_reward(await self.graded(trace))

    @vf.metric
    async def exact(self, trace: vf.Trace) -> float:
        """1 for full credit, else 0."""
        return 1.0 if (await self.graded(trace)).exact else 0.0

    @vf.metric
    async def heldout_flag(self, trace: vf.Trace) -> float:
        """1 for a held-out (chapter 12, GPU) item, else 0."""
        return 1.0 if self.data.info.get("split") == "heldout" else 0.0

    async def validate(self, runtime: vf.Runtime) -> bool | None:
        """Whether the gold answer, written as a model would write it, scores full marks.
        None for a code item whose reference solution is not in this checkout's `seed/`."""
        response = gold_response(self.data)
        if response is None:
            return None
        return (await self.grade_response(response)).exact


_GRADING: dict[int, asyncio.Future[Grade]] = {}
"""Grades being computed, by `id()` of their trace; an entry leaves when its grade is kept."""


@functools.cache
def grading_pool(workers: int) -> ThreadPoolExecutor:
    """The process's grading pool of `workers` threads (one pool per size, made on first use)."""
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scaling-book-grading")


_CODE_ANSWER = re.compile(r"^(?P<function>\w+) \(reference solution in seed/(?P<module>[\w/.-]+\.py)\)$")


def gold_response(data: ScalingBookData) -> str | None:
    """A response carrying the item's gold answer in the answer format of the system prompt.
    For a code item, the reference solution's module source with the task's function name bound
    to the reference function; None when that module is not in this checkout."""
    info = data.info
    grader = info.get("grader")
    if grader == "code":
        match = _CODE_ANSWER.match(data.answer.strip())
        if match is None:
            return None
        path = REPO_ROOT / "seed" / match["module"]
        if not path.is_file():
            return None
        source = path.read_text(encoding="utf-8")
        function = info["code_function"]
        if function != match["function"]:
            source += f"\n\n{function} = {match['function']}\n"
        return f"```python\n{source}\n```"
    if grader in ("numeric", "numeric_multi"):
        answer = "; ".join(repr(float(value)) for value in info["targets"])
    elif grader == "mcq":
        answer = info["answer_letter"]
    elif grader == "formula":
        answer = info["formula_answer"]
    else:
        return None
    return f"<answer>{answer}</answer>"


class ScalingBookTaskset(vf.Taskset[ScalingBookTask, ScalingBookTasksetConfig]):
    """Loads one exported config as tasks, in export order."""

    def load(self) -> Iterator[ScalingBookTask]:
        task_config = ScalingBookTaskConfig.model_validate(
            {
                **self.config.task.model_dump(),
                "code_timeout": self.config.code_timeout,
                "allow_code_execution": self.config.allow_code_execution,
                "grading_workers": self.config.grading_workers,
            }
        )
        selected = 0
        rows = read_rows(self.config.config, self.config.export_dir)
        if self.config.variants_per_item is not None:
            rows = [row for row in rows if not row["info"].get("parent_id")
                    or row["info"]["variant_seed"] <= self.config.variants_per_item]
        if self.config.variant_seed is not None:
            from scaling_book.environment.variant_draws import fresh_variant_rows

            rows = fresh_variant_rows(rows, self.config.variant_seed, REPO_ROOT / "seed")
        for row in rows:
            item_id = row["id"]
            if self.config.subset != "all":
                on_eval_side = in_eval_fraction(item_id, self.config.eval_fraction)
                if on_eval_side != (self.config.subset == "eval"):
                    continue
            selected += 1
            yield ScalingBookTask(row_data(row, self.config.system_prompt_mode), task_config)
        if not selected:
            raise ValueError(
                f"config {self.config.config!r} with subset={self.config.subset!r} and "
                f"eval_fraction={self.config.eval_fraction} selects no items; nothing to evaluate"
            )


def row_data(row: dict[str, Any], system_prompt_mode: SystemPromptMode = "system") -> ScalingBookData:
    """Task data of one exported row: the system message becomes `system_prompt`, the user
    message `prompt`; with `system_prompt_mode="user"` the system text opens the user message
    (separated by a blank line) and there is no system prompt."""
    system = [m["content"] for m in row["prompt"] if m["role"] == "system"]
    user = [m["content"] for m in row["prompt"] if m["role"] != "system"]
    info = dict(row["info"])
    prompt = user[0] if len(user) == 1 else row["question"]
    system_prompt = "\n\n".join(system) or None
    if system_prompt_mode == "user" and system_prompt:
        prompt, system_prompt = f"{system_prompt}\n\n{prompt}", None
    return ScalingBookData(
        id=row["id"],
        name=row["id"],
        description=f"ch{info.get('chapter')} {info.get('section', '')}".strip(),
        prompt=prompt,
        system_prompt=system_prompt,
        answer=row["answer"],
        info=info,
    )


def read_rows(config: str, export: Path | str | None = None, hidden_tests: bool = True) -> list[dict[str, Any]]:
    """The rows of one exported config, in file order, checked against the export's manifest.
    Reads the parquet files directly (what `datasets.load_dataset(export, config)` loads), so no
    `datasets` cache can serve a previous build's rows. `hidden_tests`: attach each code item's hidden
    test cases (from the export's key file, not its datasets) to the row's `info` in memory, for the
    grader. Raises `StaleExport` when the key file is missing or does not match the manifest."""
    import pyarrow.parquet as pq

    if config not in CONFIGS:
        raise ValueError(f"unknown config {config!r}; expected one of {', '.join(CONFIGS)}")
    folder = export_dir(export)
    files = sorted((folder / config).glob("*.parquet"))
    if not files:
        raise FileNotFoundError(
            f"no exported config {config!r} under {folder}: run `uv run scaling-book build` "
            "first, or point $SCALING_BOOK_EXPORT (or --env.taskset.export-dir) at an export"
        )
    rows: list[dict[str, Any]] = []
    for file in files:
        rows.extend(pq.read_table(file).to_pylist())
    if (folder / "manifest.json").is_file():
        from scaling_book.content.export import dataset_hash, read_manifest

        expected = read_manifest(folder)["configs"][config]["dataset_hash"]
        found = dataset_hash([row["info"]["content_hash"] for row in rows])
        if found != expected:
            raise ValueError(
                f"config {config!r} under {folder}: its rows hash to {found[:12]}, but manifest.json "
                f"says {expected[:12]}; the export is incomplete or mixed. Rebuild it "
                "(`uv run scaling-book build`)"
            )
        if hidden_tests:
            from scaling_book.content.export import load_hidden_tests, with_hidden_tests

            hidden = load_hidden_tests(folder)
            for row in rows:
                row["info"] = with_hidden_tests(row["info"], hidden)
    return rows


__all__ = [
    "ScalingBookData",
    "ScalingBookTask",
    "ScalingBookTaskConfig",
    "ScalingBookTaskset",
    "ScalingBookTasksetConfig",
    "gold_response",
    "in_eval_fraction",
    "read_rows",
]
