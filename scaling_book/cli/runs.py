"""`scaling-book eval`, `transfer-check`, `history`, `runs`, `compare`, `rescore`: the runs command group."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from scaling_book.cli.app import (
    EXIT_CONTENT,
    EXIT_EVAL_FAILED,
    EXIT_MISSING,
    DbOption,
    ExportOption,
    app,
    check_config,
    check_endpoint,
    console,
    err,
    require_store,
)
from scaling_book.cli.render import (
    print_comparison,
    print_history,
    print_runs,
    print_transfer_check,
)
from scaling_book.paths import export_dir


@app.command("eval")
def eval_command(
    model: Annotated[str, typer.Option("--model", "-m", help="Model name sent to the endpoint.")],
    base_url: Annotated[str, typer.Option("--base-url", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")],
    api_key_var: Annotated[str, typer.Option("--api-key-var", help="Name of the environment variable holding the API key.")] = "OPENAI_API_KEY",
    config: Annotated[str, typer.Option("--config", help="Config to evaluate: qa, code, train, heldout_qa, heldout_code, heldout, all.")] = "train",
    rollouts: Annotated[int, typer.Option("--rollouts", "-r", min=1, help="Rollouts per item.")] = 1,
    checkpoint: Annotated[Optional[str], typer.Option("--checkpoint", help="Checkpoint label stored with the run.")] = None,
    step: Annotated[Optional[int], typer.Option("--step", help="Training step stored with the run.")] = None,
    max_concurrent: Annotated[int, typer.Option("--max-concurrent", min=1, help="Rollouts in flight at once.")] = 8,
    db: DbOption = None,
    export_from: ExportOption = None,
) -> None:
    """Evaluate a model on one config through the verifiers taskset and store the run.

    Every rollout's rewards, metrics, response and grader reason land in the store in one transaction.
    A run in which any rollout errored is stored as failed and the command exits 3.
    """
    from scaling_book.runs.runner import EvalRequest, MissingExport, run_and_record

    request = EvalRequest(model=model, base_url=base_url, api_key_var=api_key_var, config=config,
                          rollouts_per_item=rollouts, checkpoint=checkpoint, step=step,
                          max_concurrent=max_concurrent, export_dir=export_dir(export_from))
    check_config(config)
    check_endpoint(base_url, api_key_var)
    try:
        summary = run_and_record(request, db_url=db, console=err)
    except MissingExport as exc:
        err.print(f"[bold red]{exc}[/bold red]")
        raise typer.Exit(EXIT_MISSING) from None
    console.print(summary.table())
    if summary.status != "complete":
        err.print(f"[bold red]run {summary.run_id} failed:[/bold red] {summary.error}", highlight=False)
        raise typer.Exit(EXIT_EVAL_FAILED)
    console.print(f"run {summary.run_id} complete: {summary.n_rollouts} rollouts in {summary.seconds:.1f} s")


@app.command("transfer-check")
def transfer_check_command(
    model: Annotated[str, typer.Option("--model", "-m", help="Model name sent to the endpoint.")],
    base_url: Annotated[str, typer.Option("--base-url", help="OpenAI-compatible base URL.")],
    api_key_var: Annotated[str, typer.Option("--api-key-var", help="Environment variable holding the API key.")] = "OPENAI_API_KEY",
    rollouts: Annotated[int, typer.Option("--rollouts", "-r", min=1, help="Rollouts per item.")] = 4,
    checkpoint: Annotated[Optional[str], typer.Option("--checkpoint", help="Checkpoint label.")] = None,
    step: Annotated[Optional[int], typer.Option("--step", help="Training step of the checkpoint.")] = None,
    max_concurrent: Annotated[int, typer.Option("--max-concurrent", min=1, help="Rollouts in flight at once.")] = 8,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap intervals.")] = 0,
    variants: Annotated[int, typer.Option("--variants", min=0, help="Also evaluate K counterfactual variants of "
                                          "every parametric train item and report the memorisation gap.")] = 0,
    db: DbOption = None,
    export_from: ExportOption = None,
) -> None:
    """Evaluate train and heldout, store both runs under one transfer check, print the gap.

    With --variants K, a third run evaluates the first K exported variants (config train_variants) of
    every parametric train item, and the memorisation gap (original minus variant accuracy over those
    items, paired 95% interval) is stored on the check and printed beside the train/held-out gap.

    Prints each half's exact accuracy (items, rollouts, 95% interval), the gap in points, a per-grader
    table and the matched-grader gap (held-out reweighted to the train grader mix). A check in which any
    rollout failed is stored as failed (exit 3) and stays out of the history views.
    """
    from scaling_book.runs.runner import EvalRequest, MissingExport
    from scaling_book.runs.transfer_check import run_transfer_check

    request = EvalRequest(model=model, base_url=base_url, api_key_var=api_key_var, config="train",
                          rollouts_per_item=rollouts, checkpoint=checkpoint, step=step,
                          max_concurrent=max_concurrent, export_dir=export_dir(export_from))
    check_endpoint(base_url, api_key_var)
    started = time.perf_counter()
    try:
        result = run_transfer_check(request, db_url=db, seed=seed, console=err, variants=variants)
    except MissingExport as exc:
        err.print(f"[bold red]{exc}[/bold red]")
        raise typer.Exit(EXIT_MISSING) from None
    if result.status != "complete":
        err.print(f"[bold red]transfer check {result.transfer_check_id} failed:[/bold red] {result.error}",
                  highlight=False)
        raise typer.Exit(EXIT_EVAL_FAILED)
    print_transfer_check(console, result, model, checkpoint, step)
    console.print(f"took {time.perf_counter() - started:.1f} s (bootstrap seed {seed})")


@app.command()
def history(
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Only this model's checkpoints.")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Write a PNG of accuracy and gap against step.")] = None,
    db: DbOption = None,
) -> None:
    """The table of completed transfer checks (step, train, held-out, gap, matched gap, intervals)."""
    from scaling_book.runs.history import plot_history, transfer_history
    from scaling_book.store import make_engine, make_session_factory, upgrade_to_head

    require_store(db)
    upgrade_to_head(db)
    engine = make_engine(db)
    rows = transfer_history(make_session_factory(engine), model)
    engine.dispose()
    if not rows:
        err.print("no completed transfer checks" + (f" for model {model}" if model else ""))
        raise typer.Exit(EXIT_MISSING)
    print_history(console, rows)
    if plot is not None:
        plot.parent.mkdir(parents=True, exist_ok=True)
        plot_history(rows, plot)
        console.print(f"plot written to {plot}")


@app.command()
def runs(
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Only this model's runs.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Show the newest N runs.")] = 20,
    db: DbOption = None,
) -> None:
    """List stored eval runs, newest first: the ids that `compare` and `rescore` take."""
    from scaling_book.runs.history import list_runs
    from scaling_book.store import make_engine, make_session_factory, upgrade_to_head

    require_store(db)
    upgrade_to_head(db)
    engine = make_engine(db)
    try:
        found = list_runs(make_session_factory(engine), model=model, limit=limit)
    finally:
        engine.dispose()
    print_runs(console, found)


@app.command()
def compare(
    run_a: Annotated[int, typer.Argument(help="Id of the first (earlier) run.")],
    run_b: Annotated[int, typer.Argument(help="Id of the second run.")],
    seed: Annotated[int, typer.Option("--seed", help="Seed of the paired bootstrap.")] = 0,
    db: DbOption = None,
) -> None:
    """Paired per-item comparison of two runs: items that flipped each way and the difference (B - A)."""
    from scaling_book.runs.compare import compare_runs
    from scaling_book.store import make_engine, make_session_factory, upgrade_to_head

    require_store(db)
    upgrade_to_head(db)
    engine = make_engine(db)
    try:
        result = compare_runs(make_session_factory(engine), run_a, run_b, seed=seed)
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
                             allow_code_execution=not no_code_execution)
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
