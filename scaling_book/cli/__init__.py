"""The `scaling-book` command: one module per command group, one of rendering helpers.

- `app`: the Typer app, exit codes, shared options and pre-checks;
- `content`: `build`;
- `evaluate`: `eval`, `transfer-check`, `resume` (the commands that call a model);
- `runs`: `history`, `runs`, `compare`, `rescore`;
- `inspect`: `items`, `items show`, `show`, `export-run`;
- `db`: `db url`, `db upgrade`;
- `render`: the tables and lines the commands print.

A command parses its options and calls one function of the module that owns the step.
"""

from __future__ import annotations

import os
import sys

from scaling_book.cli import content, db, evaluate, inspect, runs  # noqa: F401  (registers the commands on `app`)
from scaling_book.cli.app import EXIT_DATABASE, EXIT_USAGE, app, err

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point: database and driver problems become one clear line, not a traceback."""
    from sqlalchemy.exc import ArgumentError, DBAPIError

    from scaling_book.store.migrate import UnknownRevision

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        app(prog_name="scaling-book", standalone_mode=True)
    except ArgumentError as exc:
        err.print(f"[bold red]bad database URL:[/bold red] {exc} (use a SQLAlchemy URL or a SQLite file path)")
        sys.exit(EXIT_USAGE)
    except UnknownRevision as exc:
        err.print(f"[bold red]unknown schema revision:[/bold red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_DATABASE)
    except DBAPIError as exc:   # connection refused, database missing or locked, ...: one line, exit 5
        detail = " ".join(str(exc.orig if exc.orig else exc).split())
        err.print(f"[bold red]database error:[/bold red] {detail}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_DATABASE)
    except ModuleNotFoundError as exc:
        err.print(f"[bold red]missing database driver:[/bold red] {exc}; install it or use the SQLite default")
        sys.exit(EXIT_USAGE)
