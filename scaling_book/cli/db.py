"""`scaling-book db`: the store command group (print the URL in use, migrate to head)."""

from __future__ import annotations

import typer

from scaling_book.cli.app import DbOption, app, console

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
