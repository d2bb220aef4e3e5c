"""The `scaling-book` command. Parses arguments and calls the module that owns each step.

Exit codes: 0 success; 1 the seed or the gate refused the content (nothing exported), or a rescore
over changed items; 2 usage error (bad option, bad database URL); 3 an evaluation failed (a rollout
errored or the endpoint was unreachable; the run is stored as failed); 4 something to read is missing
(no export, no store, no such run, no history).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from scaling_book.paths import DEFAULT_EXPORT_DIR, EXPORT_ENV_VAR, SEED_DIR, export_dir
from scaling_book.store.engine import DB_ENV_VAR, DEFAULT_DB_URL

EXIT_CONTENT = 1
EXIT_EVAL_FAILED = 3
EXIT_MISSING = 4

app = typer.Typer(
    help="scaling-book: build the item store from seed/, gate and export it, evaluate models and track "
    "the train/held-out transfer gap across checkpoints.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output gets wide tables rather than rich's 80-column default, so nothing is cut.
console = Console(stderr=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
EXIT_USAGE = 2

DbOption = Annotated[
    Optional[str],
    typer.Option("--db", help=f"Database URL, or the path of a SQLite file. Default: ${DB_ENV_VAR}, else "
                 f"{DEFAULT_DB_URL}", show_default=False),
]
ExportOption = Annotated[
    Optional[Path],
    typer.Option("--export-dir", help=f"Export folder. Default: ${EXPORT_ENV_VAR}, else {DEFAULT_EXPORT_DIR}",
                 show_default=False),
]


def _counts_table(title: str, counts: dict) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column(title.split()[-1])
    table.add_column("items", justify="right")
    for key, value in counts.items():
        table.add_row(str(key), str(value))
    table.add_row("[bold]total[/bold]", f"[bold]{sum(counts.values())}[/bold]")
    return table


@app.command()
def build(
    db: DbOption = None,
    export_to: ExportOption = None,
    no_export: Annotated[bool, typer.Option("--no-export", help="Load and gate only; write no export.")] = False,
    seed_dir: Annotated[Path, typer.Option("--seed-dir", help="The seed folder to build from.", exists=True,
                                           file_okay=False)] = SEED_DIR,
) -> None:
    """Migrate the store to head, load seed/, run the validation gate, export every config.

    On any failure nothing is exported, the previous store content stays, and the exit code is 1; each
    error names the seed file, the item id and the field.
    """
    from scaling_book.build import build as run_build
    from scaling_book.seed_loader import ContentError

    started = time.perf_counter()
    target = None if no_export else export_dir(export_to)
    try:
        with err.status("building") as status:
            report = run_build(db, seed_dir=seed_dir, export_dir=target, on_progress=lambda message: status.update(message))
    except ContentError as exc:
        problems = exc.issues
        err.print(f"[bold red]build refused:[/bold red] {len(problems)} problem(s); nothing exported")
        for problem in problems:
            err.print(f"  {problem}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_CONTENT) from None
    elapsed = time.perf_counter() - started
    console.print(f"[bold green]build ok[/bold green]: {report.items} items, store {report.db_url}")
    for title, counts in (("Items per chapter", report.by_chapter), ("Items per grader", report.by_grader),
                          ("Items per provenance", report.by_provenance)):
        console.print(_counts_table(title, counts))
    configs = Table(title="Items per config", title_justify="left")
    for column in ("config", "items", "dataset hash"):
        configs.add_column(column)
    for config, n in report.by_config.items():
        digest = report.manifest.get("configs", {}).get(config, {}).get("dataset_hash", "")
        configs.add_row(config, str(n), digest[:12])
    console.print(configs)
    gate = report.gate
    console.print(
        f"gate: {gate.formulas_checked} formulas parsed, {gate.references_run} reference solutions passed "
        f"{gate.test_cases_run} test cases, sandbox mode [bold]{gate.isolation_mode}[/bold]"
        + ("" if gate.isolation_mode == "bwrap" else " (install the Debian package bubblewrap for isolation)")
    )
    if gate.baselines:
        nonzero = {k: v for k, v in gate.baselines.items() if v[0] > 0}
        console.print(f"baselines: {len(gate.baselines)} code items measured, {len(nonzero)} with a constant "
                      f"passing some tests (max {max((v[0] for v in gate.baselines.values()), default=0):.2f})")
    if report.errata:
        console.print(f"errata recorded: {len(report.errata)} items ({', '.join(i for i, _ in report.errata)})")
    console.print(f"export: {report.export_dir if report.export_dir else 'skipped (--no-export)'}")
    console.print(f"took {elapsed:.1f} s")


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
    from scaling_book.run_eval import EvalRequest, MissingExport, run_and_record

    request = EvalRequest(model=model, base_url=base_url, api_key_var=api_key_var, config=config,
                          rollouts_per_item=rollouts, checkpoint=checkpoint, step=step,
                          max_concurrent=max_concurrent, export_dir=export_dir(export_from))
    _check_config(config)
    _check_endpoint(base_url, api_key_var)
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


def _fmt_interval(low: float | None, high: float | None, scale: float = 1.0, digits: int = 1) -> str:
    if low is None or high is None:
        return "-"
    # Round first, then + 0.0: float noise like -1e-15 would otherwise print as -0.0.
    low, high = round(scale * low, digits) + 0.0, round(scale * high, digits) + 0.0
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


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
    db: DbOption = None,
    export_from: ExportOption = None,
) -> None:
    """Evaluate train and heldout, store both runs under one transfer check, print the gap.

    Prints each half's exact accuracy (items, rollouts, 95% interval), the gap in points, a per-grader
    table and the matched-grader gap (held-out reweighted to the train grader mix). A check in which any
    rollout failed is stored as failed (exit 3) and stays out of the history views.
    """
    from scaling_book.run_eval import EvalRequest, MissingExport
    from scaling_book.transfer_check import run_transfer_check

    request = EvalRequest(model=model, base_url=base_url, api_key_var=api_key_var, config="train",
                          rollouts_per_item=rollouts, checkpoint=checkpoint, step=step,
                          max_concurrent=max_concurrent, export_dir=export_dir(export_from))
    _check_endpoint(base_url, api_key_var)
    started = time.perf_counter()
    try:
        result = run_transfer_check(request, db_url=db, seed=seed, console=err)
    except MissingExport as exc:
        err.print(f"[bold red]{exc}[/bold red]")
        raise typer.Exit(EXIT_MISSING) from None
    if result.status != "complete":
        err.print(f"[bold red]transfer check {result.transfer_check_id} failed:[/bold red] {result.error}",
                  highlight=False)
        raise typer.Exit(EXIT_EVAL_FAILED)
    report = result.report
    halves = Table(title=f"transfer check {result.transfer_check_id}: {model}"
                   + (f" @ {checkpoint}" if checkpoint else "") + (f" (step {step})" if step is not None else ""),
                   title_justify="left")
    for column in ("half", "run", "items", "rollouts", "exact accuracy", "95% interval"):
        halves.add_column(column, justify="left" if column == "half" else "right")
    halves.add_row("train", str(result.runs["train"].run_id), str(report.train_items), str(report.train_rollouts),
                   f"{100 * report.train_accuracy:.1f}%", _fmt_interval(*astuple_interval(report.train_interval), 100))
    halves.add_row("heldout", str(result.runs["heldout"].run_id), str(report.heldout_items),
                   str(report.heldout_rollouts), f"{100 * report.heldout_accuracy:.1f}%",
                   _fmt_interval(*astuple_interval(report.heldout_interval), 100))
    console.print(halves)
    graders = Table(title="per grader (exact accuracy)", title_justify="left")
    for column in ("grader", "train items", "train", "heldout items", "heldout", "in"):
        graders.add_column(column, justify="left" if column in ("grader", "in") else "right")
    for row in report.per_grader:
        graders.add_row(row.grader, str(row.train_items),
                        "-" if row.train_accuracy is None else f"{100 * row.train_accuracy:.1f}%",
                        str(row.heldout_items),
                        "-" if row.heldout_accuracy is None else f"{100 * row.heldout_accuracy:.1f}%", row.status)
    console.print(graders)
    console.print(f"gap (train - heldout): [bold]{report.gap_points:+.1f} points[/bold] "
                  f"95% {_fmt_interval(*astuple_interval(report.gap_interval))}")
    if report.matched_gap_points is None:
        console.print("matched-grader gap: none (no grader is present in both halves)")
    else:
        console.print(f"matched-grader gap: [bold]{report.matched_gap_points:+.1f} points[/bold] "
                      f"95% {_fmt_interval(*astuple_interval(report.matched_gap_interval))}")
    for grader, status in report.unmatched.items():
        console.print(f"  grader {grader} is in the {status.replace(' only', '')} half only: "
                      "left out of the matched-grader gap")
    console.print(f"took {time.perf_counter() - started:.1f} s (bootstrap seed {seed})")


def astuple_interval(interval) -> tuple[float | None, float | None]:
    return (None, None) if interval is None else (interval.low, interval.high)


@app.command()
def history(
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Only this model's checkpoints.")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Write a PNG of accuracy and gap against step.")] = None,
    db: DbOption = None,
) -> None:
    """The table of completed transfer checks (step, train, held-out, gap, matched gap, intervals)."""
    from scaling_book.history import plot_history, transfer_history
    from scaling_book.store import make_engine, make_session_factory, upgrade_to_head

    _require_store(db)
    upgrade_to_head(db)
    engine = make_engine(db)
    rows = transfer_history(make_session_factory(engine), model)
    engine.dispose()
    if not rows:
        err.print("no completed transfer checks" + (f" for model {model}" if model else ""))
        raise typer.Exit(EXIT_MISSING)
    table = Table(title="transfer checks", title_justify="left")
    for column in ("id", "model", "checkpoint", "step", "train", "heldout", "gap (pts)", "gap 95%",
                   "matched (pts)", "matched 95%"):
        table.add_column(column, justify="left" if column in ("model", "checkpoint") else "right")
    for r in rows:
        table.add_row(str(r.transfer_check_id), r.model, r.checkpoint or "-", "-" if r.step is None else str(r.step),
                      f"{100 * r.train_accuracy:.1f}% {_fmt_interval(*r.train_ci, 100, 0)}",
                      f"{100 * r.heldout_accuracy:.1f}% {_fmt_interval(*r.heldout_ci, 100, 0)}",
                      f"{r.gap_points:+.1f}", _fmt_interval(*r.gap_ci),
                      "-" if r.matched_gap_points is None else f"{r.matched_gap_points:+.1f}",
                      _fmt_interval(*r.matched_gap_ci))
    console.print(table)
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
    from sqlalchemy import func, select

    from scaling_book.store import make_engine, make_session_factory, upgrade_to_head
    from scaling_book.store.models import EvalRun, RolloutResult

    _require_store(db)
    upgrade_to_head(db)
    engine = make_engine(db)
    query = (select(EvalRun, func.count(RolloutResult.id), func.avg(RolloutResult.exact))
             .outerjoin(RolloutResult, RolloutResult.run_id == EvalRun.id)
             .group_by(EvalRun.id).order_by(EvalRun.id.desc()).limit(limit))
    if model:
        query = query.where(EvalRun.model == model)
    with make_session_factory(engine)() as session:
        found = session.execute(query).all()
    engine.dispose()
    table = Table(title="eval runs (newest first)", title_justify="left")
    for column in ("run", "model", "checkpoint", "step", "config", "status", "rollouts", "exact", "transfer check",
                   "rescored from", "graders"):
        table.add_column(column, justify="right" if column in ("run", "step", "rollouts", "exact") else "left")
    for run, n, exact in found:
        table.add_row(str(run.id), run.model, run.checkpoint or "-", "-" if run.step is None else str(run.step),
                      run.config, run.status, str(n), "-" if exact is None else f"{exact:.3f}",
                      "-" if run.transfer_check_id is None else str(run.transfer_check_id),
                      "-" if run.rescored_from_run_id is None else str(run.rescored_from_run_id), run.grader_version)
    console.print(table)


@app.command()
def compare(
    run_a: Annotated[int, typer.Argument(help="Id of the first (earlier) run.")],
    run_b: Annotated[int, typer.Argument(help="Id of the second run.")],
    seed: Annotated[int, typer.Option("--seed", help="Seed of the paired bootstrap.")] = 0,
    db: DbOption = None,
) -> None:
    """Paired per-item comparison of two runs: items that flipped each way and the difference (B - A)."""
    from scaling_book.history import compare_runs
    from scaling_book.store import make_engine, make_session_factory, upgrade_to_head

    _require_store(db)
    upgrade_to_head(db)
    engine = make_engine(db)
    try:
        result = compare_runs(make_session_factory(engine), run_a, run_b, seed=seed)
    except (LookupError, ValueError) as exc:
        err.print(f"[bold red]cannot compare:[/bold red] {exc}")
        raise typer.Exit(EXIT_MISSING) from None
    finally:
        engine.dispose()
    console.print(f"runs {run_a} -> {run_b}: {result.common_items} common items; "
                  f"difference {result.difference_points:+.1f} points, paired 95% {_fmt_interval(*result.interval)}")
    console.print(f"right in {run_b} only ({len(result.gained)}): {', '.join(result.gained) or '-'}")
    console.print(f"right in {run_a} only ({len(result.lost)}): {', '.join(result.lost) or '-'}")
    if result.changed_items:
        console.print(f"[yellow]not compared, item changed between the runs ({len(result.changed_items)}):[/yellow] "
                      + ", ".join(result.changed_items))
    for label, ids in ((f"only in run {run_a}", result.only_in_a), (f"only in run {run_b}", result.only_in_b)):
        if ids:
            console.print(f"{label} ({len(ids)}): {', '.join(ids)}")


@app.command()
def rescore(
    run: Annotated[int, typer.Argument(help="Id of the stored run to re-grade.")],
    code_timeout: Annotated[float, typer.Option("--code-timeout", help="Wall-clock limit per code submission, seconds.")] = 20.0,
    no_code_execution: Annotated[bool, typer.Option("--no-code-execution", help="Score code items 0 without running them.")] = False,
    db: DbOption = None,
    export_from: ExportOption = None,
) -> None:
    """Re-grade a stored run's responses with the current graders (no model call) into a new run."""
    from scaling_book.export import StaleExport
    from scaling_book.rescore import RescoreError, UnknownRun, rescore_run
    from scaling_book.run_eval import MissingExport

    _require_store(db)
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


def _check_endpoint(base_url: str, api_key_var: str) -> None:
    """Usage errors for a malformed base URL; a warning when the key variable is unset."""
    if not base_url.startswith(("http://", "https://")):
        err.print(f"[bold red]--base-url {base_url!r} must start with http:// or https://[/bold red] "
                  "(e.g. http://127.0.0.1:8000/v1)")
        raise typer.Exit(EXIT_USAGE)
    if not os.environ.get(api_key_var):
        hint = " (that looks like a key: pass the NAME of the variable that holds it)" \
            if api_key_var.startswith(("sk-", "key-")) else ""
        err.print(f"[yellow]warning:[/yellow] environment variable {api_key_var} is not set{hint}; "
                  "requests carry no real key", highlight=False)


def _require_store(db: str | None) -> None:
    """Exit 4 when a read-only command is pointed at a store that does not exist (never create one)."""
    from scaling_book.store.engine import resolve_db_url, store_exists

    if not store_exists(db):
        err.print(f"[bold red]no store at {resolve_db_url(db)}[/bold red]: run `scaling-book build` (or pass the "
                  "right --db)", highlight=False)
        raise typer.Exit(EXIT_MISSING)


def _check_config(config: str) -> None:
    from scaling_book.export import CONFIGS

    if config not in CONFIGS:
        err.print(f"[bold red]unknown config {config!r}[/bold red]; choose one of {', '.join(CONFIGS)}")
        raise typer.Exit(EXIT_USAGE)


db_app = typer.Typer(help="Inspect or migrate the store.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None) -> None:
    """Bring the store to the newest schema (the same as `alembic upgrade head`)."""
    from scaling_book.store import resolve_db_url, upgrade_to_head

    upgrade_to_head(db)
    console.print(f"store at head: {resolve_db_url(db)}")


@db_app.command("url")
def db_url(db: DbOption = None) -> None:
    """Print the database URL that commands would use."""
    from scaling_book.store import resolve_db_url

    console.print(resolve_db_url(db), highlight=False)


def main() -> None:
    """Console-script entry point: database and driver problems become one clear line, not a traceback."""
    from sqlalchemy.exc import ArgumentError, DatabaseError, OperationalError

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        app(prog_name="scaling-book", standalone_mode=True)
    except ArgumentError as exc:
        err.print(f"[bold red]bad database URL:[/bold red] {exc} (use a SQLAlchemy URL or a SQLite file path)")
        sys.exit(EXIT_USAGE)
    except (DatabaseError, OperationalError) as exc:
        err.print(f"[bold red]database error:[/bold red] {exc.orig if exc.orig else exc}", highlight=False)
        sys.exit(EXIT_USAGE)
    except ModuleNotFoundError as exc:
        err.print(f"[bold red]missing database driver:[/bold red] {exc}; install it or use the SQLite default")
        sys.exit(EXIT_USAGE)
