"""`scaling-book build`: the content command group (migrate, load seed/, gate, export)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from scaling_book.cli.app import EXIT_CONTENT, DbOption, ExportOption, app, console, err
from scaling_book.cli.render import print_build_report
from scaling_book.paths import SEED_DIR, export_dir


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
    from scaling_book.content.build import build as run_build
    from scaling_book.content.specs import ContentError

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
    print_build_report(console, report, time.perf_counter() - started)
