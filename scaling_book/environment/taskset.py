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
train/eval split out of it by a hash of the item id; `code_timeout` and `allow_code_execution`
govern how implementation tasks are graded; `export_dir` points at the export (default
`$SCALING_BOOK_EXPORT`, else `build/export`); `variant_seed` (`epoch:N` or `random`) replaces
every parametric item's row by a freshly drawn counterfactual variant (new numbers, same method),
so RL training sees fresh numbers each epoch without a new export. Configs `train_variants` and
`heldout_variants` hold K fixed variants per parametric item for evaluation.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, get_args

import verifiers.v1 as vf
from pydantic import Field

from scaling_book.grading import GRADER_VERSION, Grade, grade
from scaling_book.grading.rubric import CORRECTNESS_WEIGHT, FORMAT_WEIGHT, format_reward
from scaling_book.paths import REPO_ROOT, export_dir

ConfigName = Literal["qa", "code", "train", "heldout_qa", "heldout_code", "heldout", "all", "train_variants",
                     "heldout_variants"]
"""The exported configs (`scaling_book.content.export.CONFIGS`; a test keeps the two in step)."""
CONFIGS: tuple[str, ...] = get_args(ConfigName)

GRADE_INFO_KEY = "grade"
"""Where a rollout's grade is kept on `trace.info` (serialized with the trace)."""

GRADE_FIELDS = ("correctness", "exact", "formatted", "reason", "extracted")
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
    allow_code_execution: bool = True
    """Run submitted code (in a throwaway subprocess). False: implementation tasks score 0."""
    export_dir: Path | None = None
    """The export folder; unset means `$SCALING_BOOK_EXPORT`, else `<repo>/build/export`."""
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
    allow_code_execution: bool = True
    """Whether implementation tasks execute submitted code."""


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

    def graded(self, trace: vf.Trace) -> Grade:
        """The rollout's grade: computed by the first signal that asks, kept on the trace, and
        reused by the others (and by any re-scoring of the same trace).

        Grading runs on the event loop's thread, not in a worker thread. On CPython 3.11,
        `ast.parse` is not thread-safe (python/cpython#106905: "AST constructor recursion depth
        mismatch"), and both the graders (syntax check of code, formula vetting) and pydantic on
        the loop's thread (every model construction in verifiers) call it. Graded in a thread,
        about one 100-rollout eval in ten lost a correct answer to that error. The cost: the loop
        waits while a code submission runs (typically well under 0.1 s; `code_timeout` at worst).
        Since nothing awaits between the check and the store, concurrent signals cannot grade
        twice."""
        kept = trace.info.get(GRADE_INFO_KEY)
        if kept is not None:
            return Grade(**{field: kept[field] for field in GRADE_FIELDS})
        result = self.grade_response(trace.last_reply)
        trace.info[GRADE_INFO_KEY] = {
            **{field: getattr(result, field) for field in GRADE_FIELDS},
            "grader": self.data.info.get("grader"),
            "grader_version": GRADER_VERSION,
        }
        return result

    def grade_response(self, response: str) -> Grade:
        """Grade `response` against this item with the task's code-execution settings."""
        return grade(
            self.data.info,
            response,
            allow_code_execution=self.config.allow_code_execution,
            code_timeout_s=self.config.code_timeout,
        )

    @vf.reward(weight=CORRECTNESS_WEIGHT)
    async def correctness(self, trace: vf.Trace) -> float:
        """The grader's credit in [0, 1]."""
        return self.graded(trace).correctness

    @vf.reward(weight=FORMAT_WEIGHT)
    async def format(self, trace: vf.Trace) -> float:
        """1 when the response followed the answer format (a parseable final answer), else 0."""
        return format_reward(self.graded(trace))

    @vf.metric
    async def exact(self, trace: vf.Trace) -> float:
        """1 for full credit, else 0."""
        return 1.0 if self.graded(trace).exact else 0.0

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
        return self.grade_response(response).exact


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
            }
        )
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
            yield ScalingBookTask(row_data(row), task_config)


def row_data(row: dict[str, Any]) -> ScalingBookData:
    """Task data of one exported row: the system message becomes `system_prompt`, the user
    message `prompt`."""
    system = [m["content"] for m in row["prompt"] if m["role"] == "system"]
    user = [m["content"] for m in row["prompt"] if m["role"] != "system"]
    info = dict(row["info"])
    return ScalingBookData(
        id=row["id"],
        name=row["id"],
        description=f"ch{info.get('chapter')} {info.get('section', '')}".strip(),
        prompt=user[0] if len(user) == 1 else row["question"],
        system_prompt="\n\n".join(system) or None,
        answer=row["answer"],
        info=info,
    )


def read_rows(config: str, export: Path | str | None = None) -> list[dict[str, Any]]:
    """The rows of one exported config, in file order, checked against the export's manifest.
    Reads the parquet files directly (what `datasets.load_dataset(export, config)` loads), so no
    `datasets` cache can serve a previous build's rows."""
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
