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
