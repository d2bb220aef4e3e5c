"""Alembic environment: batch mode for SQLite, type comparison on, and safe table rebuilds.

On SQLite the migrations run on `make_migration_engine`'s connection: one real transaction that
includes DDL, with foreign keys off while tables are rebuilt. Before committing, this file checks
that no `_alembic_tmp_*` table is left and that `PRAGMA foreign_key_check` finds no violation; either
aborts the migration and rolls everything back. Migrations alter tables through
`scaling_book.store.migration_helpers.rebuild_table`, which sets the views aside around the rebuild.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from alembic.util import CommandError
from sqlalchemy import inspect

from scaling_book.store.engine import make_migration_engine, resolve_db_url
from scaling_book.store.migration_helpers import TEMP_TABLE_PREFIX
from scaling_book.store.models import Base

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or resolve_db_url()


def run_migrations_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connectable = config.attributes.get("connection")
    if connectable is not None:
        _run(connectable)
        return
    engine = make_migration_engine(_url())
    with engine.connect() as connection:
        _run(connection)
    engine.dispose()


def _check_integrity(connection) -> None:
    """Abort (roll back) if a rebuild left a temporary table or broke a foreign key."""
    stray = [t for t in inspect(connection).get_table_names() if t.startswith(TEMP_TABLE_PREFIX)]
    if stray:
        raise CommandError(f"migration left temporary tables {', '.join(stray)}; rolled back")
    if connection.dialect.name == "sqlite":
        violations = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
        if violations:
            listing = "; ".join(f"{table} row {rowid} -> {parent}" for table, rowid, parent, _ in violations[:10])
            raise CommandError(
                f"migration would break {len(violations)} foreign keys ({listing}); rolled back, nothing changed"
            )


def _run(connection) -> None:
    # A connection passed in `config.attributes["connection"]` must come from `make_migration_engine`:
    # its SQLite transactions include DDL, so the whole run is one transaction (Alembic's default for
    # SQLite is a commit per revision), and the integrity check below sees it before it is committed.
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations()
        _check_integrity(connection)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
