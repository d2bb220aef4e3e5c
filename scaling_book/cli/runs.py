"""`scaling-book history`, `runs`, `compare`, `rescore`: reading and re-grading stored runs.

The read commands (`history`, `runs`, `compare`) work on a read-only store
(`sqlite:///file:PATH?mode=ro&uri=true`): they migrate nothing and need no write access to its folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from scaling_book.cli.app import (
    EXIT_CONTENT,
    EXIT_EVAL_FAILED,
    EXIT_MISSING,
    EXIT_USAGE,
    DbOption,
    ExportOption,
    app,
    console,
    err,
    open_for_reading,
    require_store,
)
from scaling_book.cli.render import (
    print_comparison,
    print_history,
    print_runs,
)
from scaling_book.paths import export_dir


@app.command()
def history(
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Only this model's checkpoints.")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Write a PNG of accuracy and gap against step.")] = None,
    metric: Annotated[str, typer.Option("--metric", help="Gap drawn in the plot's lower panel: "
                                        "gap or matched-grader-gap.")] = "gap",
    db: DbOption = None,
) -> None:
    """The table of completed transfer checks (step, train, held-out, gap, matched gap, intervals).

    `--plot` draws one colour per model against training step; checks without a step are listed, not plotted.
    """
    from scaling_book.runs.history import transfer_history
    from scaling_book.runs.plot import METRICS, plot_history, unplaced
    from scaling_book.store import make_session_factory

    if metric not in METRICS:
        err.print(f"[bold red]unknown --metric {metric!r}[/bold red]; choose one of {', '.join(METRICS)}")
        raise typer.Exit(EXIT_USAGE)
    engine = open_for_reading(db)
    rows = transfer_history(make_session_factory(engine), model)
    engine.dispose()
    if not rows:
        err.print("no completed transfer checks" + (f" for model {model}" if model else ""))
        raise typer.Exit(EXIT_MISSING)
    print_history(console, rows)
    if plot is not None:
        stepless = unplaced(rows)
        if stepless:
            err.print(f"not plotted ({len(stepless)} checks without --step): transfer checks "
                      + ", ".join(f"#{r.transfer_check_id} ({r.model})" for r in stepless), highlight=False)
        if len(stepless) == len(rows):
            err.print("[bold red]nothing to plot[/bold red]: no check has a training step "
                      "(run transfer-check with --step)")
            raise typer.Exit(EXIT_MISSING)
        plot.parent.mkdir(parents=True, exist_ok=True)
        plot_history(rows, plot, metric)
        console.print(f"plot written to {plot}")


@app.command()
def runs(
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Only this model's runs.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Show the newest N runs.")] = 20,
    prune_stale: Annotated[bool, typer.Option("--prune-stale", help="Mark running runs whose process is gone as failed.")] = False,
    db: DbOption = None,
) -> None:
    """List stored eval runs, newest first: the ids that `compare`, `rescore`, `show` and `resume` take.

    A `running` run whose process is gone (its pid is dead on this host, or its heartbeat stopped) shows
    as `running (stale)`; `--prune-stale` marks those failed. Interrupted runs can be resumed.
    """
    from scaling_book.runs.history import list_runs, prune_stale_runs
    from scaling_book.store import make_engine, make_session_factory, upgrade_to_head

    if prune_stale:
        require_store(db)
        upgrade_to_head(db)
        engine = make_engine(db)
        try:
            pruned = prune_stale_runs(make_session_factory(engine))
        finally:
            engine.dispose()
        console.print(f"marked {len(pruned)} stale running runs failed" + (f": {', '.join(map(str, pruned))}" if pruned else ""))
    engine = open_for_reading(db)
    try:
        found = list_runs(make_session_factory(engine), model=model, limit=limit)
    finally:
        engine.dispose()
    print_runs(console, found)


@app.command()
def compare(
    run_a: Annotated[int, typer.Argument(help="Id of the first (earlier) run.")],
    run_b: Annotated[int, typer.Argument(help="Id of the second run.")],
    bootstrap_seed: Annotated[int, typer.Option("--bootstrap-seed", help="Seed of the paired bootstrap.")] = 0,
    db: DbOption = None,
) -> None:
    """Paired per-item comparison of two runs: items that flipped each way and the difference (B - A).
    Warns when the runs were sampled differently (their sampling_json differs)."""
    from scaling_book.runs.compare import compare_runs
    from scaling_book.store import make_session_factory

    engine = open_for_reading(db)
    try:
        result = compare_runs(make_session_factory(engine), run_a, run_b, seed=bootstrap_seed)
    except (LookupError, ValueError) as exc:
        err.print(f"[bold red]cannot compare:[/bold red] {exc}")
        raise typer.Exit(EXIT_MISSING) from None
    finally:
        engine.dispose()
    print_comparison(console, result)


@app.command()
def rescore(
    run: Annotated[int, typer.Argument(help="Id of the stored run to re-grade.")],
    code_timeout: Annotated[float, typer.Option("--code-timeout", help="Wall-clock limit per code submission, seconds.")] = 20.0,
    no_code_execution: Annotated[bool, typer.Option("--no-code-execution", help="Score code items 0 without running them.")] = False,
    allow_unisolated_code: Annotated[bool, typer.Option("--allow-unisolated-code", help="Run code submissions even without isolation (no working bwrap): NOT a sandbox.")] = False,
    db: DbOption = None,
    export_from: ExportOption = None,
) -> None:
    """Re-grade a stored run's responses with the current graders (no model call) into a new run."""
    from scaling_book.content.export import StaleExport
    from scaling_book.runs.rescore import RescoreError, UnknownRun, rescore_run
    from scaling_book.runs.runner import MissingExport

    require_store(db)
    try:
        result = rescore_run(run, export_dir(export_from), db_url=db, code_timeout_s=code_timeout,
                             allow_code_execution=(False if no_code_execution
                                                   else "unisolated" if allow_unisolated_code else True))
    except (UnknownRun, MissingExport, StaleExport) as exc:
        err.print(f"[bold red]cannot rescore:[/bold red] {exc}")
        raise typer.Exit(EXIT_MISSING) from None
    except RescoreError as exc:
        err.print(f"[bold red]cannot rescore:[/bold red] {exc}")
        raise typer.Exit(EXIT_CONTENT) from None
    console.print(f"run {result.new_run_id} ({result.status}) rescored from run {result.source_run_id} with "
                  f"graders {result.grader_version}: {result.rollouts} rollouts, {result.changed_exact} changed exact")
    if result.status != "complete":
        raise typer.Exit(EXIT_EVAL_FAILED)
