"""The `scaling-book` command. Parses arguments and calls the module that owns each step.

Exit codes: 0 success; 1 the seed or the gate refused the content (nothing exported); 2 usage error;
3 an evaluation failed (a rollout errored or the endpoint was unreachable; the run is stored as
failed); 4 a prerequisite is missing (no export: run `scaling-book build` first).
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

from scaling_book.paths import DEFAULT_EXPORT_DIR, EXPORT_ENV_VAR, export_dir
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
console = Console(stderr=False)
err = Console(stderr=True)

DbOption = Annotated[
    Optional[str],
    typer.Option("--db", help=f"Database URL. Default: ${DB_ENV_VAR}, else {DEFAULT_DB_URL}", show_default=False),
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
) -> None:
    """Migrate the store to head, load seed/, run the validation gate, export every config.

    On any failure nothing is exported, the previous store content stays, and the exit code is 1; each
    error names the seed file, the item id and the field.
    """
    from scaling_book.build import build as run_build
    from scaling_book.gate import GateError
    from scaling_book.seed_loader import SeedError

    started = time.perf_counter()
    target = None if no_export else export_dir(export_to)
    try:
        with err.status("building") as status:
            report = run_build(db, export_dir=target, on_progress=lambda message: status.update(message))
    except (SeedError, GateError) as exc:
        problems = getattr(exc, "issues", None) or getattr(exc, "failures", [])
        err.print(f"[bold red]build refused:[/bold red] {len(problems)} problem(s); nothing exported")
        for problem in problems:
            err.print(f"  {problem}", markup=False, highlight=False)
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


def _check_config(config: str) -> None:
    from scaling_book.export import CONFIGS

    if config not in CONFIGS:
        err.print(f"[bold red]unknown config {config!r}[/bold red]; choose one of {', '.join(CONFIGS)}")
        raise typer.Exit(2)


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
    """Console-script entry point."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app(prog_name="scaling-book")
    sys.exit(0)
