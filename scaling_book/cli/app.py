"""The `scaling-book` Typer app, its exit codes, the options every command group shares, and the checks
commands run before calling the module that owns a step.

Exit codes: 0 success; 1 the seed or the gate refused the content (nothing exported), or a rescore
over changed items; 2 usage error (bad option, bad database URL); 3 an evaluation failed (a rollout
errored, or the endpoint check failed: unreachable, key refused, model not served); 4 something to read
is missing (no export, no store, no such run, no history, nothing to resume); 5 a database error at run
time (server unreachable, database missing or locked, a store at a schema revision this version does
not know); 130 a run was interrupted by SIGINT/SIGTERM (its finished rollouts are stored;
`scaling-book resume RUN` finishes it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from scaling_book.paths import DEFAULT_EXPORT_DIR, EXPORT_ENV_VAR
from scaling_book.store.engine import DB_ENV_VAR, DEFAULT_DB_URL

EXIT_CONTENT = 1
EXIT_USAGE = 2
EXIT_EVAL_FAILED = 3
EXIT_MISSING = 4
EXIT_DATABASE = 5
EXIT_INTERRUPTED = 130

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


def check_endpoint(base_url: str, api_key_var: str) -> None:
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


def require_store(db: str | None) -> None:
    """Exit 4 when a read-only command is pointed at a store that does not exist (never create one)."""
    from scaling_book.store.engine import resolve_db_url, store_exists

    if not store_exists(db):
        err.print(f"[bold red]no store at {resolve_db_url(db)}[/bold red]: run `scaling-book build` (or pass the "
                  "right --db)", highlight=False)
        raise typer.Exit(EXIT_MISSING)


def open_for_reading(db: str | None):
    """An engine on an existing store for a read-only command: exits 4 without a store, migrates only a
    writable store that is behind, and exits 4 when a read-only store is behind (never writes to it)."""
    from scaling_book.store.engine import is_read_only, make_engine
    from scaling_book.store.migrate import at_head, upgrade_to_head

    require_store(db)
    if not at_head(db):
        if is_read_only(db):
            err.print("[bold red]the read-only store is at an older schema[/bold red]: run `scaling-book db "
                      "upgrade` on a writable copy")
            raise typer.Exit(EXIT_MISSING)
        upgrade_to_head(db)
    return make_engine(db)


def check_config(config: str) -> None:
    from scaling_book.content.export import CONFIGS

    if config not in CONFIGS:
        err.print(f"[bold red]unknown config {config!r}[/bold red]; choose one of {', '.join(CONFIGS)}")
        raise typer.Exit(EXIT_USAGE)
