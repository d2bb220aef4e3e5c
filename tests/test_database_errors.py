"""Runtime database errors exit 5 with one line, not a traceback: a server that refuses the connection,
a database that does not exist, and a store at a schema revision this version does not know."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess

import pytest
from sqlalchemy import text

from scaling_book.store import make_engine, upgrade_to_head
from scaling_book.store.migrate import UnknownRevision

EXIT_DATABASE = 5


def _scaling_book(*args: str) -> subprocess.CompletedProcess:
    executable = shutil.which("scaling-book")
    assert executable, "the scaling-book console script is installed in the venv"
    return subprocess.run([executable, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "300"})


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]   # nothing listens there once the probe is closed


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == EXIT_DATABASE, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_connection_refused_exits_5() -> None:
    line = _one_line_error(_scaling_book("history", "--db", f"postgresql+psycopg://u@127.0.0.1:{_closed_port()}/x"))
    assert line.startswith("database error:") and "refused" in line


def test_missing_postgresql_database_exits_5(postgres_server) -> None:
    url = postgres_server.new_database().replace("/store_", "/no_such_", 1)
    line = _one_line_error(_scaling_book("history", "--db", url))
    assert line.startswith("database error:") and "no_such_" in line and "does not exist" in line


def test_store_at_an_unknown_newer_revision_names_it(store_url) -> None:
    upgrade_to_head(store_url)
    engine = make_engine(store_url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    with pytest.raises(UnknownRevision, match="revision 0099, which this version of scaling-book does not know"):
        upgrade_to_head(store_url)
    line = _one_line_error(_scaling_book("history", "--db", store_url))
    assert "0099" in line and "does not know" in line
