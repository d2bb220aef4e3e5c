"""Running a model over one exported config through verifiers, and recording the run.

`evaluate()` drives verifiers in-process, the way `vf-eval` does, minus its output folder,
dashboard and platform upload: it loads the scaling-book environment
(`vf.load_environment(vf.resolve_env_config(...))`), holds its serving resources
(`env.serving()`: the interception server the harness posts to), and runs each planned rollout
with `env.run_slot(...)` under a semaphore of `max_concurrent`. Every rollout becomes one
`RolloutOutcome`: the response text, each reward and metric, the grader's reason, and a status
that is "error" whenever verifiers recorded a failure (provider, harness, scoring) or a signal is
missing.

`run_and_record()` is one recorded evaluation: the export's dataset hash, a `running` run row, the
rollouts through `evaluate()`, then every rollout and the final status in one transaction
(`scaling_book.runs.recording`). Used by `scaling-book eval` and by the transfer check.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from scaling_book.content.export import read_manifest
from scaling_book.runs.recording import (
    RolloutOutcome,
    failure_summary,
    finish_run,
    mark_failed,
    start_run,
)
from scaling_book.store import make_engine, make_session_factory, upgrade_to_head

TASKSET_ID = "scaling-book"
"""The id verifiers resolves to this package (`import scaling_book`)."""


@dataclass
class EvalOutcome:
    """Every rollout of one evaluation of `model` on exported config `config`."""

    config: str
    model: str
    rollouts_per_item: int
    sampling: dict
    """The sampling settings sent with every request (only those that were set)."""
    rollouts: list[RolloutOutcome]


def evaluate(
    *,
    config: str,
    model: str,
    base_url: str,
    api_key_var: str,
    rollouts_per_item: int = 1,
    max_concurrent: int = 8,
    export_dir: Path | None = None,
    sampling: dict | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    taskset_options: dict | None = None,
) -> EvalOutcome:
    """Run `rollouts_per_item` rollouts of every item of exported config `config` against the
    OpenAI-compatible endpoint `base_url` (API key read from environment variable
    `api_key_var`), at most `max_concurrent` at once. `sampling` holds request settings such as
    `temperature` and `max_tokens`; `taskset_options` extra taskset fields. `on_progress(done, total)` is called once before the first
    rollout and after each one finishes. A failed rollout is reported, never raised; errors
    loading the export or configuring verifiers are raised."""
    if rollouts_per_item < 1:
        raise ValueError(f"rollouts_per_item must be at least 1, got {rollouts_per_item}")
    if max_concurrent < 1:
        raise ValueError(f"max_concurrent must be at least 1, got {max_concurrent}")
    return asyncio.run(
        _evaluate(
            config=config,
            model=model,
            base_url=base_url,
            api_key_var=api_key_var,
            rollouts_per_item=rollouts_per_item,
            max_concurrent=max_concurrent,
            export_dir=export_dir,
            sampling=dict(sampling or {}),
            on_progress=on_progress,
            taskset_options=taskset_options,
        )
    )


async def _evaluate(
    *,
    config: str,
    model: str,
    base_url: str,
    api_key_var: str,
    rollouts_per_item: int,
    max_concurrent: int,
    export_dir: Path | None,
    sampling: dict,
    on_progress: Callable[[int, int], None] | None,
    taskset_options: dict | None = None,
) -> EvalOutcome:
    import verifiers.v1 as vf

    taskset: dict[str, Any] = {"id": TASKSET_ID, "config": config, **(taskset_options or {})}
    if export_dir is not None:
        taskset["export_dir"] = str(Path(export_dir).resolve())
    env = vf.load_environment(vf.resolve_env_config({"taskset": taskset}))
    tasks = list(env.taskset)
    sampling_config = vf.SamplingConfig.model_validate(sampling)
    ctx = vf.ModelContext(
        client=vf.EvalClientConfig(base_url=base_url, api_key_var=api_key_var),
        model=model,
        sampling=sampling_config,
    )
    planned = [
        (task, index, slot)
        for task in tasks
        for index, slot in enumerate(env.slots(task, rollouts_per_item))
    ]
    total = len(planned)
    done = 0
    semaphore = asyncio.Semaphore(max_concurrent)

    def progress() -> None:
        if on_progress is not None:
            on_progress(done, total)

    async def completed(_episode: Any) -> None:
        nonlocal done
        done += 1
        progress()

    progress()
    async with env.serving():
        results = await asyncio.gather(
            *(env.run_slot(slot, ctx, semaphore, completed) for _, _, slot in planned),
            return_exceptions=True,
        )
    rollouts = [
        _outcome(task, index, result)
        for (task, index, _), result in zip(planned, results, strict=True)
    ]
    return EvalOutcome(
        config=config,
        model=model,
        rollouts_per_item=rollouts_per_item,
        sampling=sampling_config.model_dump(exclude_none=True),
        rollouts=rollouts,
    )


def _outcome(task: Any, index: int, result: Any) -> RolloutOutcome:
    """The outcome of one finished slot: an `Episode`, or the exception `run_slot` raised."""
    info = task.data.info
    base = {
        "item_id": task.data.id,
        "rollout_index": index,
        "grader": info.get("grader", ""),
        # A property of the item, not a score: known even when the rollout failed.
        "heldout_flag": 1.0 if info.get("split") == "heldout" else 0.0,
    }
    if isinstance(result, BaseException):
        return _failed(base, None, f"{type(result).__name__}: {result}")
    episode = result
    trace = episode.traces[-1] if episode.traces else None
    if trace is None:
        return _failed(base, None, _errors_text(episode.errors) or "the episode ran no rollout")
    response = trace.last_reply if trace.assistant_messages else None
    errors = [*episode.errors, *trace.errors] if not (episode.ok and trace.ok) else []
    values = {
        "correctness": _score(trace.rewards.get("correctness")),
        "format": _score(trace.rewards.get("format")),
        "exact": trace.metrics.get("exact"),
        "heldout_flag": trace.metrics.get("heldout_flag"),
    }
    if not (episode.ok and trace.ok):
        return _failed(base, response, _errors_text(errors) or "verifiers marked the rollout failed")
    if trace.is_timeout:
        return _failed(base, response, f"a stage deadline expired ({trace.stop_condition})")
    missing = [name for name, value in values.items() if value is None]
    if missing:
        return _failed(base, response, f"signals not scored: {', '.join(missing)}")
    kept = trace.info.get("grade") or {}
    return RolloutOutcome(
        **base,
        status="ok",
        response=response,
        correctness=float(values["correctness"]),
        format=float(values["format"]),
        exact=float(values["exact"]),
        reward=float(trace.reward),
        reason=str(kept.get("reason", "")),
        error=None,
    )


def _failed(base: dict[str, Any], response: str | None, error: str) -> RolloutOutcome:
    return RolloutOutcome(
        **base,
        status="error",
        response=response,
        correctness=0.0,
        format=0.0,
        exact=0.0,
        reward=0.0,
        reason="",
        error=error,
    )


def _score(reward: Any) -> float | None:
    return None if reward is None else float(reward.score)


def _errors_text(errors: list[Any]) -> str:
    """The recorded errors, newest last, as `Type: message` lines."""
    return "\n".join(f"{error.type}: {error.message}" for error in errors)


__all__ = ["EvalOutcome", "RolloutOutcome", "evaluate"]


class MissingExport(Exception):
    """There is no export to evaluate: `scaling-book build` has not been run."""


@dataclass(frozen=True)
class EvalRequest:
    """What to evaluate, against which endpoint, and how it is labelled in run history."""

    model: str
    base_url: str
    api_key_var: str
    config: str
    export_dir: Path
    rollouts_per_item: int = 1
    checkpoint: str | None = None
    step: int | None = None
    max_concurrent: int = 8
    sampling: dict = field(default_factory=dict)
    taskset_options: dict = field(default_factory=dict)
    """Extra taskset fields (`--env.taskset.*`), e.g. {"variants_per_item": 4}."""


@dataclass
class EvalSummary:
    """The stored run: its id, status, counts and per-grader means of the binary `exact` metric."""

    run_id: int
    status: str
    error: str | None
    n_rollouts: int
    seconds: float
    rows: list[RolloutOutcome]

    def table(self) -> Table:
        by_grader: dict[str, list[RolloutOutcome]] = defaultdict(list)
        for row in self.rows:
            by_grader[row.grader].append(row)
        table = Table(title=f"run {self.run_id} ({self.status})", title_justify="left")
        for column in ("grader", "rollouts", "exact", "correctness", "reward", "errors"):
            table.add_column(column, justify="right" if column != "grader" else "left")
        for grader in sorted(by_grader):
            rows = by_grader[grader]
            n = len(rows)
            table.add_row(grader, str(n), f"{sum(r.exact for r in rows) / n:.3f}",
                          f"{sum(r.correctness for r in rows) / n:.3f}", f"{sum(r.reward for r in rows) / n:.3f}",
                          str(sum(r.status != "ok" for r in rows)))
        return table


def dataset_hash_of(export_dir: Path, config: str) -> str:
    """The dataset hash of `config` in the export at `export_dir`; raises `MissingExport`."""
    try:
        return read_manifest(export_dir)["configs"][config]["dataset_hash"]
    except (FileNotFoundError, KeyError) as exc:
        raise MissingExport(f"no export of config {config!r} at {export_dir}: run `scaling-book build` first") from exc


def item_versions(export_dir: Path, config: str) -> dict[str, tuple]:
    """item id -> (content hash, split, parent id, variant seed, drawn inputs JSON) of every item of
    `config` in the export; the last three are None for an original item."""
    from scaling_book.content.export import load_config

    return {row["id"]: (row["info"]["content_hash"], row["info"]["split"], row["info"].get("parent_id") or None,
                        row["info"]["variant_seed"] if row["info"].get("parent_id") else None,
                        row["info"].get("variant_inputs") or None)
            for row in load_config(export_dir, config)}


def run_and_record(request: EvalRequest, db_url: str | None = None, console: Console | None = None,
                   transfer_check_id: int | None = None) -> EvalSummary:
    """Evaluate `request` and store it as one run; return the stored summary (never raises on rollout errors).

    Raises `MissingExport` when `request.export_dir` has no export of `request.config` (no run is stored).
    """
    from scaling_book.grading import GRADER_VERSION

    digest = dataset_hash_of(request.export_dir, request.config)
    versions = item_versions(request.export_dir, request.config)   # read before any model call
    upgrade_to_head(db_url)
    engine = make_engine(db_url)
    factory = make_session_factory(engine)
    started = time.perf_counter()
    try:
        run_id = start_run(factory, model=request.model, config=request.config,
                           rollouts_per_item=request.rollouts_per_item, sampling=request.sampling,
                           dataset_hash=digest, grader_version=GRADER_VERSION, checkpoint=request.checkpoint,
                           step=request.step, transfer_check_id=transfer_check_id)
        progress = Progress(TextColumn(f"[bold]{request.config}[/bold] rollouts"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), console=console or Console(stderr=True),
                            transient=True)
        try:
            with progress:
                task = progress.add_task("rollouts", total=None)
                outcome = evaluate(
                    config=request.config, model=request.model, base_url=request.base_url,
                    api_key_var=request.api_key_var, rollouts_per_item=request.rollouts_per_item,
                    max_concurrent=request.max_concurrent, export_dir=request.export_dir,
                    sampling=request.sampling or None,
                    on_progress=lambda done, total: progress.update(task, completed=done, total=total),
                    taskset_options=request.taskset_options or None,
                )
        except Exception as exc:  # noqa: BLE001 - any crash is a failed run, recorded as such
            message = f"{type(exc).__name__}: {exc}"
            mark_failed(factory, run_id, message)
            return EvalSummary(run_id, "failed", message, 0, time.perf_counter() - started, [])
        rows = outcome.rollouts
        status = finish_run(factory, run_id, rows, versions)
        error = None if status == "complete" else failure_summary(rows)
        return EvalSummary(run_id, status, error, len(rows), time.perf_counter() - started, rows)
    finally:
        engine.dispose()
