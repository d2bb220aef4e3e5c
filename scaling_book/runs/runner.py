"""Running a model over one exported config through verifiers, and recording the run.

`evaluate()` drives verifiers in-process, the way `vf-eval` does, minus its output folder,
dashboard and platform upload: it loads the scaling-book environment
(`vf.load_environment(vf.resolve_env_config(...))`), holds its serving resources
(`env.serving()`: the interception server the harness posts to), and runs each planned rollout
with `env.run_slot(...)`, at most `max_concurrent` at once. Every rollout becomes one
`RolloutOutcome` (`scaling_book.runs.outcome`), handed to `on_rollout` as soon as it finishes.
SIGINT/SIGTERM stop it: nothing new is sent, rollouts in flight get `INTERRUPT_GRACE_S` seconds to
finish (a second signal stops them at once), and the outcome says it was interrupted.

`run_and_record()` is one recorded evaluation: the export's dataset hash, a `running` run row, each
rollout stored as it finishes, then the final status (`scaling_book.runs.recording.close_run`). With
`resume_run_id` it runs only the (item, rollout) pairs that run is missing. Used by `scaling-book
eval`, `transfer-check` and `resume`.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from scaling_book.content.export import read_manifest
from scaling_book.runs.outcome import rollout_outcome
from scaling_book.runs.progress import ProgressReporter
from scaling_book.runs.recording import (
    HEARTBEAT_S,
    RolloutOutcome,
    close_run,
    heartbeat,
    record_rollouts,
    start_run,
    stored_outcomes,
)
from scaling_book.store import make_engine, make_session_factory, upgrade_to_head

TASKSET_ID = "scaling-book"
"""The id verifiers resolves to this package (`import scaling_book`)."""

DEFAULT_REQUEST_TIMEOUT_S = 600.0
"""Seconds a model request may wait for its reply (`--request-timeout`): long enough for a long
reasoning reply, finite so that a server that accepts and never answers cannot hang a run."""

INTERRUPT_GRACE_S = 10.0
"""Seconds rollouts in flight get to finish after the first SIGINT/SIGTERM."""


class EmptySelection(ValueError):
    """The config, subset and limit select no items: there is nothing to evaluate."""


@dataclass
class EvalOutcome:
    """Every rollout of one evaluation of `model` on exported config `config`."""

    config: str
    model: str
    rollouts_per_item: int
    sampling: dict
    """The sampling settings sent with every request (only those that were set)."""
    rollouts: list[RolloutOutcome]
    """The rollouts that finished in this call (not those skipped, nor those cut off by a signal)."""
    planned: int = 0
    """(item, rollout) pairs of the selection, skipped ones included."""
    interrupted: bool = False
    """A signal stopped the evaluation before every pair ran."""


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
    allow_code_execution: bool | str = True,
    limit: int | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
    system_prompt_mode: str = "system",
    skip: frozenset[tuple[str, int]] = frozenset(),
    on_rollout: Callable[[RolloutOutcome], None] | None = None,
    on_heartbeat: Callable[[], None] | None = None,
    on_notice: Callable[[str], None] | None = None,
    taskset_options: dict | None = None,
) -> EvalOutcome:
    """Run `rollouts_per_item` rollouts of every item of exported config `config` (the first `limit`
    items by id when given) against the OpenAI-compatible endpoint `base_url` (API key read from
    environment variable `api_key_var`), at most `max_concurrent` at once, each model request given
    `request_timeout` seconds. `sampling` holds request settings (`temperature`, `top_p`,
    `max_tokens`, `seed`); `taskset_options` extra taskset fields (`--env.taskset.*`). (item id,
    rollout index) pairs in `skip` are not run.
    `on_progress(done, total)` is called once before the first rollout and after each one finishes;
    `on_rollout(outcome)` as each finishes; `on_heartbeat()` every `HEARTBEAT_S` seconds;
    `on_notice(text)` for what a person should see (the interrupt message). A failed rollout is
    reported, never raised; errors loading the export or configuring verifiers are raised, and
    `EmptySelection` when nothing is selected."""
    if rollouts_per_item < 1:
        raise ValueError(f"rollouts_per_item must be at least 1, got {rollouts_per_item}")
    if max_concurrent < 1:
        raise ValueError(f"max_concurrent must be at least 1, got {max_concurrent}")
    if not request_timeout > 0:
        raise ValueError(f"request_timeout must be positive seconds, got {request_timeout}")
    return asyncio.run(_evaluate(
        config=config, model=model, base_url=base_url, api_key_var=api_key_var,
        rollouts_per_item=rollouts_per_item, max_concurrent=max_concurrent, export_dir=export_dir,
        sampling=dict(sampling or {}), on_progress=on_progress, limit=limit, request_timeout=request_timeout,
        system_prompt_mode=system_prompt_mode, skip=skip, on_rollout=on_rollout, on_heartbeat=on_heartbeat,
        on_notice=on_notice, allow_code_execution=allow_code_execution, taskset_options=taskset_options,
    ))


async def _evaluate(*, config: str, model: str, base_url: str, api_key_var: str, rollouts_per_item: int,
                    max_concurrent: int, export_dir: Path | None, sampling: dict,
                    on_progress: Callable[[int, int], None] | None, limit: int | None, request_timeout: float,
                    system_prompt_mode: str, skip: frozenset[tuple[str, int]],
                    on_rollout: Callable[[RolloutOutcome], None] | None, on_heartbeat: Callable[[], None] | None,
                    on_notice: Callable[[str], None] | None,
                    allow_code_execution: bool | str = True, taskset_options: dict | None = None) -> EvalOutcome:
    import verifiers.v1 as vf

    taskset: dict[str, Any] = {"id": TASKSET_ID, "config": config, "system_prompt_mode": system_prompt_mode,
                               "allow_code_execution": allow_code_execution, **(taskset_options or {})}
    if export_dir is not None:
        taskset["export_dir"] = str(Path(export_dir).resolve())
    env = vf.load_environment(vf.resolve_env_config({"taskset": taskset}))
    tasks = sorted(env.taskset, key=lambda task: task.data.id)
    if limit is not None:
        tasks = tasks[:limit]
    if not tasks:
        raise EmptySelection(f"config {config!r}" + (f" with --limit {limit}" if limit is not None else "")
                             + " selects no items; nothing to evaluate")
    sampling_config = vf.SamplingConfig.model_validate(sampling)
    client = vf.EvalClientConfig(base_url=base_url, api_key_var=api_key_var,
                                 timeout={"connect": min(30.0, request_timeout), "read": request_timeout})
    ctx = vf.ModelContext(client=client, model=model, sampling=sampling_config)
    every = [(task, index, slot) for task in tasks for index, slot in enumerate(env.slots(task, rollouts_per_item))]
    planned = [(task, index, slot) for task, index, slot in every if (task.data.id, index) not in skip]
    total, done, in_flight = len(planned), 0, 0
    stop = asyncio.Event()
    gate = asyncio.Semaphore(max_concurrent)
    finished: list[RolloutOutcome] = []
    notice = on_notice or (lambda text: print(text, file=sys.stderr))

    async def one(task: Any, index: int, slot: Any) -> None:
        nonlocal done, in_flight
        async with gate:
            if stop.is_set():
                return   # never sent
            in_flight += 1
            try:
                result: Any = await env.run_slot(slot, ctx)
            except asyncio.CancelledError:
                return   # cut off by a second signal or the grace period: not stored, resume reruns it
            except Exception as exc:  # noqa: BLE001 - a failed rollout is an outcome, not a crash
                result = exc
            finally:
                in_flight -= 1
        outcome = rollout_outcome(task, index, result)
        finished.append(outcome)
        if on_rollout is not None:
            on_rollout(outcome)
        done += 1
        if on_progress is not None:
            on_progress(done, total)

    signals_seen = 0
    running: list[asyncio.Task] = []

    def on_signal(signum: int) -> None:
        nonlocal signals_seen
        signals_seen += 1
        stop.set()
        if signals_seen == 1:
            notice(f"{signal.Signals(signum).name}: stopping; waiting up to {INTERRUPT_GRACE_S:.0f} s for "
                   f"{in_flight} rollouts in flight (signal again to stop now)")
        else:
            for task in running:
                task.cancel()

    async def beat() -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            if on_heartbeat is not None:
                on_heartbeat()

    loop = asyncio.get_running_loop()
    handled = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(signum, on_signal, signum)
            handled.append(signum)
        except (NotImplementedError, RuntimeError, ValueError):   # not the main thread: no handlers
            pass
    if on_progress is not None:
        on_progress(0, total)
    beating = asyncio.create_task(beat())
    try:
        async with env.serving():
            running.extend(asyncio.create_task(one(*entry)) for entry in planned)
            stopped = asyncio.create_task(stop.wait())
            # One future for all rollouts: waiting on the list of rollouts after each one finished
            # re-armed a callback on every rollout each time, quadratic in the rollout count.
            all_done = asyncio.gather(*running, return_exceptions=True)
            await asyncio.wait([all_done, stopped], return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                pending = [task for task in running if not task.done()]
                if pending:
                    await asyncio.wait(pending, timeout=INTERRUPT_GRACE_S)
                for task in running:
                    task.cancel()
            await all_done
            stopped.cancel()
    finally:
        beating.cancel()
        for signum in handled:
            loop.remove_signal_handler(signum)
    for task in running:   # a crash inside one() (e.g. storing a rollout) is the run's crash
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()
    return EvalOutcome(config=config, model=model, rollouts_per_item=rollouts_per_item,
                       sampling=sampling_config.model_dump(exclude_none=True), rollouts=finished,
                       planned=len(every), interrupted=stop.is_set() and len(finished) < total)


__all__ = ["EmptySelection", "EvalOutcome", "EvalRequest", "EvalSummary", "RolloutOutcome", "evaluate",
           "run_and_record"]


class MissingExport(Exception):
    """There is no export to evaluate: `scaling-book build` has not been run."""


@dataclass(frozen=True)
class EvalRequest:
    """What to evaluate, against which endpoint, how it is sampled, and how it is labelled in run history."""

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
    """Sent with every request: `temperature`, `top_p`, `max_tokens`, `seed` (only those set)."""
    limit: int | None = None
    """Only the first `limit` items of the config, by id."""
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S
    """Seconds each model request may take."""
    system_prompt_mode: str = "system"
    """`system` or `user` (instructions folded into the user message)."""

    def stored_sampling(self) -> dict[str, Any]:
        """What the run stores in `sampling_json`: everything that shapes the requests."""
        return {**self.sampling, "request_timeout": self.request_timeout,
                "system_prompt_mode": self.system_prompt_mode}

    taskset_options: dict = field(default_factory=dict)
    """Extra taskset fields (`--env.taskset.*`), e.g. {"variants_per_item": 4}."""
    allow_unisolated_code: bool = False
    """Run code submissions even when no isolation works here (`--allow-unisolated-code`)."""

    @property
    def allow_code_execution(self) -> bool | str:
        """The taskset's `allow_code_execution` for this request."""
        from scaling_book.grading.sandbox import UNISOLATED

        return UNISOLATED if self.allow_unisolated_code else True


@dataclass
class EvalSummary:
    """The stored run: its id, status, counts and per-grader means of the binary `exact` metric."""

    run_id: int
    status: str
    error: str | None
    n_rollouts: int
    seconds: float
    rows: list[RolloutOutcome]
    planned: int = 0
    """(item, rollout) pairs the run covers."""

    @property
    def truncated(self) -> int:
        """Rollouts cut at the token limit (scored 0, counted in every mean)."""
        return sum(row.status == "truncated" for row in self.rows)
    isolation: str | None = None
    """How code submissions ran (`scaling_book.grading.sandbox.isolation_label`)."""

    def table(self) -> Table:
        by_grader: dict[str, list[RolloutOutcome]] = defaultdict(list)
        for row in self.rows:
            by_grader[row.grader].append(row)
        table = Table(title=f"run {self.run_id} ({self.status})", title_justify="left")
        for column in ("grader", "rollouts", "exact", "correctness", "reward", "truncated", "errors"):
            table.add_column(column, justify="right" if column != "grader" else "left")
        for grader in sorted(by_grader):
            rows = by_grader[grader]
            n = len(rows)
            table.add_row(grader, str(n), f"{sum(r.exact for r in rows) / n:.3f}",
                          f"{sum(r.correctness for r in rows) / n:.3f}", f"{sum(r.reward for r in rows) / n:.3f}",
                          str(sum(r.status == "truncated" for r in rows)), str(sum(r.status == "error" for r in rows)))
        return table


def dataset_hash_of(export_dir: Path, config: str) -> str:
    """The dataset hash of `config` in the export at `export_dir`; raises `MissingExport`."""
    try:
        return read_manifest(export_dir)["configs"][config]["dataset_hash"]
    except (FileNotFoundError, KeyError) as exc:
        raise MissingExport(f"no export of config {config!r} at {export_dir}: run `scaling-book build` first") from exc


def item_versions(export_dir: Path, config: str) -> dict[str, tuple]:
    """item id -> (content hash, split, parent id, variant seed, drawn inputs JSON) of every item of
    `config` in the export (the last three None for an original item), read with pyarrow and checked
    against the manifest (raises FileNotFoundError, `StaleExport`)."""
    from scaling_book.content.export import read_config_rows

    rows = read_config_rows(export_dir, config, columns=["id", "info"])
    return {row["id"]: (row["info"]["content_hash"], row["info"]["split"], row["info"].get("parent_id") or None,
                        row["info"]["variant_seed"] if row["info"].get("parent_id") else None,
                        row["info"].get("variant_inputs") or None)
            for row in rows}


def selected_items(versions: dict[str, tuple], config: str, limit: int | None) -> list[str]:
    """The item ids a run of `config` covers: all, or the first `limit` by id. Raises `EmptySelection`."""
    ids = sorted(versions)[:limit] if limit is not None else sorted(versions)
    if not ids:
        raise EmptySelection(f"config {config!r}" + (f" with --limit {limit}" if limit is not None else "")
                             + " selects no items; nothing to evaluate")
    return ids


def run_and_record(request: EvalRequest, db_url: str | None = None, console: Console | None = None,
                   transfer_check_id: int | None = None, resume_run_id: int | None = None) -> EvalSummary:
    """Evaluate `request` and store it as one run (or, with `resume_run_id`, run the pairs that stored
    run is missing and close it); return the stored summary (never raises on rollout errors).

    Raises `MissingExport` when `request.export_dir` has no export of `request.config` and
    `EmptySelection` when the selection has no items (no run is stored either way).
    """
    from scaling_book.grading import GRADER_VERSION
    from scaling_book.grading.sandbox import isolation_label

    digest = dataset_hash_of(request.export_dir, request.config)
    versions = item_versions(request.export_dir, request.config)   # read before any model call
    per_parent = request.taskset_options.get("variants_per_item")
    if per_parent:   # the taskset keeps variant seeds 1..K of every parent: plan exactly those
        versions = {i: v for i, v in versions.items() if v[2] is None or v[3] <= per_parent}
    ids = selected_items(versions, request.config, request.limit)
    planned = len(ids) * request.rollouts_per_item
    console = console or Console(stderr=True)
    upgrade_to_head(db_url)
    engine = make_engine(db_url)
    factory = make_session_factory(engine)
    started = time.perf_counter()
    try:
        isolation = isolation_label(request.allow_code_execution)
        if resume_run_id is None:
            run_id = start_run(factory, model=request.model, config=request.config,
                               rollouts_per_item=request.rollouts_per_item, sampling=request.stored_sampling(),
                               dataset_hash=digest, grader_version=GRADER_VERSION, checkpoint=request.checkpoint,
                               step=request.step, transfer_check_id=transfer_check_id, base_url=request.base_url,
                               api_key_var=request.api_key_var, item_limit=request.limit,
                               isolation=isolation)
            skip: frozenset[tuple[str, int]] = frozenset()
        else:
            from scaling_book.runs.resume import reopen_run

            run_id, skip = resume_run_id, reopen_run(factory, resume_run_id)
        console.print(f"run {run_id} {'resumed' if skip else 'started'}: {request.model} on {request.config}, "
                      f"{len(ids)} items x {request.rollouts_per_item} rollouts"
                      + (f", {len(skip)} already stored" if skip else ""), highlight=False)
        interrupted = False
        try:
            with ProgressReporter(console, f"run {run_id} {request.config}") as reporter:
                outcome = evaluate(
                    config=request.config, model=request.model, base_url=request.base_url,
                    api_key_var=request.api_key_var, rollouts_per_item=request.rollouts_per_item,
                    max_concurrent=request.max_concurrent, export_dir=request.export_dir,
                    sampling=request.sampling or None, limit=request.limit,
                    allow_code_execution=request.allow_code_execution,
                    request_timeout=request.request_timeout, system_prompt_mode=request.system_prompt_mode,
                    skip=skip, on_progress=reporter.update,
                    on_rollout=lambda row: record_rollouts(factory, run_id, [row], versions),
                    on_heartbeat=lambda: heartbeat(factory, run_id),
                    on_notice=lambda text: console.print(f"[yellow]{text}[/yellow]", highlight=False),
                    taskset_options=request.taskset_options or None,
                )
            interrupted = outcome.interrupted
            status, error = close_run(factory, run_id, planned, interrupted=interrupted)
        except KeyboardInterrupt:
            close_run(factory, run_id, planned, interrupted=True)
            raise
        except Exception as exc:  # noqa: BLE001 - any crash is a failed run, recorded as such
            status, error = close_run(factory, run_id, planned, error=f"{type(exc).__name__}: {exc}")
        rows = stored_outcomes(factory, run_id)
        return EvalSummary(run_id, status, error, len(rows), time.perf_counter() - started, rows, planned=planned,
                           isolation=isolation)
    finally:
        engine.dispose()
