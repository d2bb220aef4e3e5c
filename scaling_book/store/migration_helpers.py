"""Safe table rebuilds and guarded downgrades for the store's Alembic migrations.

Every migration that alters an existing table uses `rebuild_table` instead of `op.batch_alter_table`:

    from scaling_book.store.migration_helpers import rebuild_table

    with rebuild_table("rollout_results") as batch_op:
        batch_op.alter_column("grader", type_=sa.String(40))

It drops every view before the change and recreates the same views, from the definitions the
database itself holds, after it. SQLite's batch mode copies a table into `_alembic_tmp_<table>`,
drops the original and renames the copy; SQLite refuses the rename while a view reads the table
("no such table: main.rollout_results"), and PostgreSQL refuses `ALTER COLUMN ... TYPE` on a column
a view reads. Views hold no data, so dropping and recreating them loses nothing.

The rest of the safety lives in `migrations/env.py`: on SQLite each migration run is one real
transaction (DDL included, so a failed rebuild leaves no `_alembic_tmp_*` table behind), foreign keys
are off while it runs (dropping `eval_runs` during its rebuild would otherwise cascade-delete every
rollout), and `PRAGMA foreign_key_check` runs before the commit and aborts on any violation.

`refuse_data_loss` guards downgrades that would drop run history: it raises unless the command was
given `-x allow_data_loss=true`, and says how many rows of which table would be lost.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from graphlib import TopologicalSorter

from alembic import context, op
from alembic.util import CommandError
from sqlalchemy import text
from sqlalchemy.engine import Connection

ALLOW_DATA_LOSS = "allow_data_loss"
TEMP_TABLE_PREFIX = "_alembic_tmp_"


def _views_sqlite(connection: Connection) -> list[tuple[str, str]]:
    # sqlite_master holds each view's own CREATE VIEW statement, in creation order (rowid).
    rows = connection.execute(text("SELECT name, sql FROM sqlite_master WHERE type = 'view' ORDER BY rowid"))
    return [(name, sql) for name, sql in rows]


def _views_postgresql(connection: Connection) -> list[tuple[str, str]]:
    definitions = dict(connection.execute(text(
        "SELECT c.relname, pg_get_viewdef(c.oid) FROM pg_class AS c "
        "JOIN pg_namespace AS n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'v' AND n.nspname = current_schema()"
    )).all())
    # A view reading another view must be created after it: order by pg_depend.
    edges = connection.execute(text(
        "SELECT DISTINCT v.relname, d.relname FROM pg_depend AS dep "
        "JOIN pg_rewrite AS r ON r.oid = dep.objid "
        "JOIN pg_class AS v ON v.oid = r.ev_class "
        "JOIN pg_class AS d ON d.oid = dep.refobjid "
        "WHERE v.relkind = 'v' AND d.relkind = 'v' AND v.oid <> d.oid"
    )).all()
    graph: dict[str, set[str]] = {name: set() for name in definitions}
    for view, dependency in edges:
        if view in graph and dependency in graph:
            graph[view].add(dependency)
    order = TopologicalSorter(graph).static_order()
    return [(name, f'CREATE VIEW "{name}" AS {definitions[name]}') for name in order]


def current_views(connection: Connection) -> list[tuple[str, str]]:
    """Every view of the current schema as (name, CREATE VIEW statement), in an order that recreates them.

    Raises `NotImplementedError` for a back-end other than SQLite and PostgreSQL.
    """
    dialect = connection.dialect.name
    if dialect == "sqlite":
        return _views_sqlite(connection)
    if dialect == "postgresql":
        return _views_postgresql(connection)
    raise NotImplementedError(f"view rebuilds are not implemented for the {dialect} back-end")


@contextmanager
def views_set_aside() -> Iterator[list[tuple[str, str]]]:
    """Drop every view for the duration of the block and recreate the same views after it."""
    connection = op.get_bind()
    views = current_views(connection)
    for name, _ in reversed(views):
        op.execute(f'DROP VIEW "{name}"')
    yield views
    for _, statement in views:
        op.execute(statement)


@contextmanager
def rebuild_table(table: str, **batch_options) -> Iterator[object]:
    """`op.batch_alter_table(table, **batch_options)` with the views set aside around it.

    Yields Alembic's batch operations object. On SQLite the table is copied, dropped and renamed
    (foreign keys are off for the migration and checked before the commit, see `migrations/env.py`);
    on PostgreSQL the changes are plain `ALTER TABLE` statements.
    """
    with views_set_aside():
        with op.batch_alter_table(table, **batch_options) as batch_op:
            yield batch_op


def data_loss_allowed() -> bool:
    """Whether the command line carried `-x allow_data_loss=true`."""
    return context.get_x_argument(as_dictionary=True).get(ALLOW_DATA_LOSS, "").lower() == "true"


def refuse_data_loss(revision: str, tables: list[str]) -> None:
    """Raise `CommandError` if any of `tables` holds rows and data loss was not allowed.

    The message names the revision, the row count of each non-empty table and the flag that allows it.
    """
    connection = op.get_bind()
    counts = {t: connection.execute(text(f'SELECT COUNT(*) FROM "{t}"')).scalar_one() for t in tables}
    lost = {t: n for t, n in counts.items() if n}
    if not lost or data_loss_allowed():
        return
    listing = ", ".join(f"{n} rows of {t}" for t, n in lost.items())
    raise CommandError(
        f"downgrading revision {revision} would drop run history: {listing}. "
        f"Nothing was changed; pass -x {ALLOW_DATA_LOSS}=true to drop it anyway."
    )
