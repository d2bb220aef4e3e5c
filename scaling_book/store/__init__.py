"""The SQLite item store and run history: models, engine, migrations."""

from scaling_book.store import models, tracking  # noqa: E402,F401  (every table on Base.metadata)
from scaling_book.store.engine import (
    DB_ENV_VAR,
    make_engine,
    make_session_factory,
    resolve_db_url,
)
from scaling_book.store.migrate import upgrade_to_head

__all__ = ["DB_ENV_VAR", "make_engine", "make_session_factory", "resolve_db_url", "upgrade_to_head"]
