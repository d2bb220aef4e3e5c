"""`scaling-book build`: the whole pipeline on the real seed, its idempotence and reproducibility,
and its refusal (non-zero exit, nothing exported, file/item/field named) on bad content."""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scaling_book.cli import app
from scaling_book.content.export import CONFIGS, load_config, read_manifest
from scaling_book.paths import SEED_DIR


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_build_exports_every_config_loadable_with_datasets(built) -> None:
    manifest = read_manifest(built["export_dir"])
    assert set(manifest["configs"]) == set(CONFIGS)
    heldout = load_config(built["export_dir"], "heldout")
    assert len(heldout) == manifest["configs"]["heldout"]["items"] == 28
    row = heldout[0]
    assert row["prompt"][0]["role"] == "system" and row["prompt"][1]["content"] == row["question"]
    assert row["info"]["split"] == "heldout" and row["info"]["chapter"] == 12
    assert (built["export_dir"] / "README.md").read_text().startswith("---\nlicense: mit")


def test_rebuild_is_idempotent_and_export_is_byte_identical(built, tmp_path: Path) -> None:
    first = _files(built["export_dir"])
    result = CliRunner().invoke(app, ["build", "--db", built["db_url"], "--export-dir", str(tmp_path / "again")])
    assert result.exit_code == 0, result.output
    assert _files(tmp_path / "again") == first
    database = sqlite3.connect(built["db_url"].removeprefix("sqlite:///"))
    assert database.execute("SELECT count(*) FROM items").fetchone() == (117,)
    assert database.execute("SELECT count(*) FROM baselines").fetchone() == (24,)
    database.close()


def test_build_refuses_a_failing_reference_and_exports_nothing(tmp_path: Path) -> None:
    seed = tmp_path / "seed"
    shutil.copytree(SEED_DIR, seed)
    reference = seed / "reference_solutions" / "ch01.py"
    source = reference.read_text()
    # Break one reference solution: every return value doubled.
    broken = source.replace("return ", "return 2 * ", 1)
    assert broken != source
    reference.write_text(broken)
    from scaling_book.content.build import build
    from scaling_book.content.gate import GateError

    export_dir = tmp_path / "export"
    with pytest.raises(GateError) as info:
        build(f"sqlite:///{tmp_path / 'store.sqlite'}", seed_dir=seed, export_dir=export_dir)
    assert any(f.file == "ch01_roofline.toml" and f.field.startswith(("test", "reference"))
               for f in info.value.issues)
    assert not export_dir.exists()


def test_build_command_exits_1_and_names_file_item_and_field(tmp_path: Path) -> None:
    seed = tmp_path / "seed"
    shutil.copytree(SEED_DIR, seed)
    chapter = seed / "ch01_roofline.toml"
    chapter.write_text(re.sub(r"^tolerance = .*$", "tolerance = 1.5", chapter.read_text(), count=1, flags=re.M))
    export_dir = tmp_path / "export"
    result = CliRunner(env={"COLUMNS": "300"}).invoke(app, [
        "build", "--db", f"sqlite:///{tmp_path / 's.sqlite'}", "--export-dir", str(export_dir), "--seed-dir", str(seed)])
    assert result.exit_code == 1
    assert re.search(r"ch01_roofline\.toml, item ch01-[a-z0-9-]+, field tolerance: must be a number strictly inside", result.output)
    assert not export_dir.exists()


def test_failed_build_keeps_the_previous_store_content(built, tmp_path: Path) -> None:
    seed = tmp_path / "seed"
    shutil.copytree(SEED_DIR, seed)
    (seed / "ch02_tpus.toml").write_text((seed / "ch02_tpus.toml").read_text().replace('grader = "mcq"', 'grader = "essay"', 1))
    db_copy = tmp_path / "copy.sqlite"
    shutil.copy(built["db_url"].removeprefix("sqlite:///"), db_copy)
    from scaling_book.content.build import build
    from scaling_book.content.specs import SeedError

    with pytest.raises(SeedError, match="ch02_tpus.toml, item ch02-.*field grader"):
        build(f"sqlite:///{db_copy}", seed_dir=seed, export_dir=None)
    database = sqlite3.connect(db_copy)
    assert database.execute("SELECT count(*) FROM items").fetchone() == (117,)
    database.close()


def test_build_on_postgresql_exports_the_same_bytes_as_on_sqlite(built, postgres_server, tmp_path: Path,
                                                                 monkeypatch) -> None:
    url = postgres_server.new_database()
    monkeypatch.setenv("SCALING_BOOK_DB", url)   # as a user would: SCALING_BOOK_DB=postgresql+psycopg://...
    result = CliRunner().invoke(app, ["build", "--export-dir", str(tmp_path / "pg-export")])
    assert result.exit_code == 0, result.output
    assert _files(tmp_path / "pg-export") == _files(built["export_dir"])
