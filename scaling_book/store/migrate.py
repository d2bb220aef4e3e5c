"""Running the Alembic migrations programmatically (the same ones `alembic upgrade head` runs)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config

from scaling_book.paths import REPO_ROOT
from scaling_book.store.engine import resolve_db_url


def alembic_config(url: str | None = None) -> Config:
    """An Alembic config for `alembic.ini` at the repository root, pointed at `url`."""
    config = Config(str(REPO_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(REPO_ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", resolve_db_url(url).replace("%", "%%"))
    return config


def upgrade_to_head(url: str | None = None) -> None:
    """Bring the database at `url` to the newest schema (never drops data)."""
    command.upgrade(alembic_config(url), "head")


def at_head(url: str | None = None) -> bool:
    """Whether the database at `url` is at the newest revision (reads only; never migrates)."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from scaling_book.store.engine import make_engine

    heads = set(ScriptDirectory.from_config(alembic_config(url)).get_heads())
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return set(MigrationContext.configure(connection).get_current_heads()) == heads
    finally:
        engine.dispose()
