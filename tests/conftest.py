"""Shared fixtures: a migrated throwaway SQLite store per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaling_book.store import make_engine, make_session_factory, upgrade_to_head


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """URL of a fresh SQLite file migrated to head."""
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    upgrade_to_head(url)
    return url


@pytest.fixture
def session_factory(db_url: str):
    engine = make_engine(db_url)
    yield make_session_factory(engine)
    engine.dispose()


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict:
    """A full build of the real seed/ into a throwaway store and export folder (once per test session).

    Returns {"db_url", "export_dir", "report"}. Tests that need exported rows use this rather than
    the developer's build/ folder, so `pytest` works on a fresh clone.
    """
    from scaling_book.content.build import build

    root = tmp_path_factory.mktemp("built")
    db_url = f"sqlite:///{root / 'store.sqlite'}"
    export_dir = root / "export"
    report = build(db_url, export_dir=export_dir)
    return {"db_url": db_url, "export_dir": export_dir, "report": report}


@pytest.fixture(scope="session")
def exported_rows(built) -> list[dict]:
    """Every exported row of config `all`, loaded through `datasets` as the taskset loads it."""
    from scaling_book.content.export import load_config

    return list(load_config(built["export_dir"], "all"))


@pytest.fixture(scope="session")
def postgres_server():
    """A throwaway PostgreSQL server for the whole session (see tests/postgres_server.py).

    Skips only where no server binaries exist; on the project's machines and in CI they do.
    """
    from postgres_server import PostgresServer, server_bin_dir

    bin_dir = server_bin_dir()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl): install postgresql-15 to run this test")
    server = PostgresServer(bin_dir).start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path: Path) -> str:
    """URL of an empty, unmigrated store on each back-end: a SQLite file, a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return request.getfixturevalue("postgres_server").new_database()
