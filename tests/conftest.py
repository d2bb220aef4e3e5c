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


@pytest.fixture(scope="module")
def export_infos(request) -> dict[str, dict]:
    """Every exported item's `info`, by item id: from `build/export` when it exists (fast), else
    from the session's own build."""
    import pyarrow.parquet as pq

    files = sorted((Path(__file__).resolve().parent.parent / "build" / "export" / "all").glob("*.parquet"))
    rows = ([row for f in files for row in pq.read_table(f).to_pylist()] if files
            else request.getfixturevalue("exported_rows"))
    return {row["info"]["item_id"]: row["info"] for row in rows}


@pytest.fixture
def sandbox_kind(request, monkeypatch):
    """Parametrized indirectly with True (the warm sandbox) or False (a bwrap per submission): sets
    `SCALING_BOOK_WARM_SANDBOX` and starts and ends with no warm sandbox on this thread."""
    from scaling_book.grading.sandbox import warm

    monkeypatch.setenv("SCALING_BOOK_WARM_SANDBOX", "1" if request.param else "0")
    warm.close_this_thread()
    yield request.param
    warm.close_this_thread()
