"""Running the Alembic migrations programmatically (the same ones `alembic upgrade head` runs)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from scaling_book.paths import REPO_ROOT
from scaling_book.store.engine import make_engine, resolve_db_url


class UnknownRevision(RuntimeError):
    """The store is at a schema revision this version of scaling-book does not know (a newer one)."""


def alembic_config(url: str | None = None) -> Config:
    """An Alembic config for `alembic.ini` at the repository root, pointed at `url`."""
    config = Config(str(REPO_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(REPO_ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", resolve_db_url(url).replace("%", "%%"))
    return config


def check_known_revision(url: str | None = None) -> None:
    """Raise `UnknownRevision` if the store at `url` is at a revision missing from migrations/.

    The message names the store's revision and this version's newest one. A store without a
    revision (new or empty) passes. Database errors (unreachable server, ...) propagate.
    """
    url = resolve_db_url(url)
    scripts = ScriptDirectory.from_config(alembic_config(url))
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            current = MigrationContext.configure(connection).get_current_heads()
    finally:
        engine.dispose()
    known = {revision.revision for revision in scripts.walk_revisions()}
    for revision in current:
        if revision not in known:
            raise UnknownRevision(
                f"the store at {_displayed(url)} is at schema revision {revision}, which this version of "
                f"scaling-book does not know (its newest is {scripts.get_current_head()}); a newer scaling-book "
                "migrated it: upgrade scaling-book to use it")


def _displayed(url: str) -> str:
    """`url` with any password hidden, for messages."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def upgrade_to_head(url: str | None = None) -> None:
    """Bring the database at `url` to the newest schema (never drops data).

    Raises `UnknownRevision` for a store at a revision newer than this version knows.
    """
    check_known_revision(url)
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
