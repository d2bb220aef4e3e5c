"""One recorded evaluation: the export's dataset hash, a `running` run row, the rollouts through the
verifiers taskset (`scaling_book.evaluation`), then every rollout and the final status in one
transaction. Used by `scaling-book eval` and by the transfer check.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from scaling_book.export import read_manifest
from scaling_book.evaluation import RolloutOutcome
from scaling_book.history import failure_summary, finish_run, mark_failed, start_run
from scaling_book.store import make_engine, make_session_factory, upgrade_to_head


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


def item_versions(export_dir: Path, config: str) -> dict[str, tuple[str, str]]:
    """item id -> (content hash, split) of every item of `config` in the export."""
    from scaling_book.export import load_config

    return {row["id"]: (row["info"]["content_hash"], row["info"]["split"]) for row in load_config(export_dir, config)}


def run_and_record(request: EvalRequest, db_url: str | None = None, console: Console | None = None,
                   transfer_check_id: int | None = None) -> EvalSummary:
    """Evaluate `request` and store it as one run; return the stored summary (never raises on rollout errors).

    Raises `MissingExport` when `request.export_dir` has no export of `request.config` (no run is stored).
    """
    from scaling_book.evaluation import evaluate
    from scaling_book.graders import GRADER_VERSION

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
