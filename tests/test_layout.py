"""The package layout: imports point down the data flow (DESIGN.md, "Layout"), modules stay small.

Imports are read from each module's syntax tree (top level and inside functions), so a lazy import
that points the wrong way is caught too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "scaling_book"
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def _imports(path: Path) -> set[str]:
    """Every module name `path` imports, absolute (relative imports resolved against the package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.relative_to(PACKAGE.parent).with_suffix("").parts[: -node.level]
                names.add(".".join([*base, node.module or ""]).rstrip("."))
            elif node.module:
                names.add(node.module)
    return names


def _subpackage(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else ""


def _violations(subpackage: str, forbidden: tuple[str, ...]) -> list[str]:
    found = []
    for path in MODULES:
        if _subpackage(path) != subpackage:
            continue
        for name in _imports(path):
            if name == "verifiers" or name.startswith("verifiers."):
                target = "verifiers"
            else:
                target = name.split(".")[1] if name.startswith("scaling_book.") else ""
            if target in forbidden:
                found.append(f"{path.relative_to(PACKAGE)} imports {name}")
    return found


def test_the_expected_subpackages_exist():
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert {"content", "store", "grading", "environment", "runs", "cli"} <= subpackages


def test_store_imports_nothing_above_it():
    assert _violations("store", ("content", "grading", "environment", "runs", "cli")) == []


def test_grading_imports_nothing_from_runs_or_cli():
    assert _violations("grading", ("runs", "cli")) == []


def test_content_never_imports_verifiers():
    assert _violations("content", ("verifiers", "environment", "runs", "cli")) == []


def test_the_checker_sees_a_wrong_way_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from scaling_book.content.specs import ItemSpec\n")
    assert "scaling_book.content.specs" in _imports(module)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_over_about_400_lines(path):
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 440


def test_no_two_modules_differ_only_by_a_prefix_or_suffix_of_one_word():
    stems = {p.stem.strip("_") for p in MODULES if p.stem != "__init__"}
    stems |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    clashes = []
    for a in sorted(stems):
        for b in sorted(stems):
            if a < b and (b.startswith(a + "_") or b.endswith("_" + a) or a.startswith(b + "_") or a.endswith("_" + b)):
                clashes.append((a, b))
    assert clashes == []
