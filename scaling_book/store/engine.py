"""Engine and session factory for the item store, and resolution of the database URL.

The URL comes from, in order: the `--db` option, the `SCALING_BOOK_DB` environment variable, and
the embedded default `sqlite:///<repo>/build/scaling_book.sqlite`. SQLite connections get
`PRAGMA foreign_keys=ON` (constraints are the static gate), WAL journaling and a busy timeout, so two
writers (two transfer checks) wait for each other instead of failing.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from scaling_book.paths import BUILD_DIR

DB_ENV_VAR = "SCALING_BOOK_DB"
DEFAULT_DB_URL = f"sqlite:///{BUILD_DIR / 'scaling_book.sqlite'}"
SQLITE_BUSY_TIMEOUT_S = 30.0


def resolve_db_url(explicit: str | None = None) -> str:
    """The database URL: `explicit` if given, else `$SCALING_BOOK_DB`, else the embedded default.

    A value without `://` is taken as the path of a SQLite file (`build/x.sqlite` means
    `sqlite:///<absolute path of build/x.sqlite>`), so the path that `sqlite3` takes works here too.
    """
    value = explicit or os.environ.get(DB_ENV_VAR) or DEFAULT_DB_URL
    if "://" not in value:
        return f"sqlite:///{Path(value).expanduser().resolve()}"
    return value


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None for another backend or an in-memory database). A URI filename
    (`sqlite:///file:PATH?mode=ro&uri=true`) gives PATH."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    database = parsed.database
    if parsed.query.get("uri") == "true" and database.startswith("file:"):
        database = database.removeprefix("file:")
    return Path(database)


def is_read_only(url: str | None = None) -> bool:
    """Whether `url` opens a SQLite store read-only (`mode=ro` or `immutable=1` in a URI filename)."""
    parsed = make_url(resolve_db_url(url))
    return parsed.get_backend_name() == "sqlite" and (
        parsed.query.get("mode") == "ro" or parsed.query.get("immutable") == "1")


def store_exists(url: str | None = None) -> bool:
    """Whether the store at `url` exists already (always True for a server database)."""
    path = sqlite_path(resolve_db_url(url))
    return path is None or path.exists()


def _on_sqlite_connect(dbapi_connection, _record, read_only: bool = False) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    if not read_only:   # setting the journal mode writes; a read-only store keeps the one it has
        cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
    cursor.close()


def make_private(path: Path) -> None:
    """Create the SQLite file `path` (and its folder) readable by its owner only (0600), or narrow an
    existing one we own to 0600: the store holds every answer key, including the hidden code tests,
    so a submission running under another uid (the rlimit fallback as root) cannot read it. SQLite
    gives the -wal and -shm files the database file's mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        if path.stat().st_uid == os.geteuid():
            os.chmod(path, 0o600)
    except OSError:
        pass  # a read-only location or another owner: left as it is


def make_engine(url: str | None = None) -> Engine:
    """An engine for `url` (resolved by `resolve_db_url`); creates the SQLite file (mode 0600, see
    `make_private`) and its folder, unless the URL opens the store read-only."""
    url = resolve_db_url(url)
    if make_url(url).get_backend_name() == "sqlite":
        return _sqlite_engine(url, functools.partial(_on_sqlite_connect, read_only=is_read_only(url)))
    return create_engine(url)


def _sqlite_engine(url: str, on_connect) -> Engine:
    """A SQLite engine whose every new connection is set up by `on_connect(dbapi_connection, record)`."""
    path = sqlite_path(url)
    if path is not None and not is_read_only(url):
        make_private(path)
    engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
    event.listen(engine, "connect", on_connect)
    return engine


def _on_sqlite_migration_connect(dbapi_connection, _record) -> None:
    # Our own BEGIN (below) instead of the driver's, which starts a transaction only before DML:
    # then a migration's DDL is inside the transaction too and a failed rebuild rolls back whole.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    # Off while tables are copied, dropped and renamed (dropping a parent would cascade to its
    # children); migrations/env.py runs `PRAGMA foreign_key_check` before committing.
    cursor.execute("PRAGMA foreign_keys=OFF")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
    cursor.close()


def make_migration_engine(url: str | None = None) -> Engine:
    """An engine for running migrations at `url`.

    On SQLite, unlike `make_engine`: every transaction is a real one that includes DDL (so a failed
    migration leaves nothing behind) and foreign keys are not enforced while it runs; the caller
    checks them with `PRAGMA foreign_key_check` before committing. Other back-ends: as `make_engine`.
    """
    url = resolve_db_url(url)
    if make_url(url).get_backend_name() != "sqlite":
        return make_engine(url)
    engine = _sqlite_engine(url, _on_sqlite_migration_connect)
    event.listen(engine, "begin", lambda connection: connection.exec_driver_sql("BEGIN"))
    return engine


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """A session factory bound to `engine` (objects stay usable after commit)."""
    return sessionmaker(engine, expire_on_commit=False)
