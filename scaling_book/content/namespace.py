"""The expression namespace of `seed/`: the hardware constants of `hardware.toml` (each with its
chapter and section), the derivation functions of `derive.py`, magnitude names, `math`, and the
reference-solution modules. Every target and test expression is evaluated over it
(`scaling_book.content.loader`); errors name the file and the field (`SeedError`).
"""

from __future__ import annotations

import importlib.util
import math
import re
import tomllib
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from scaling_book.content.specs import SeedError, SeedIssue

CHAPTER_FILE_PATTERN = re.compile(r"^ch(\d\d)_[a-z0-9_]+\.toml$")
MAGNITUDES = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
SAFE_BUILTINS = {"abs": abs, "min": min, "max": max, "round": round, "sum": sum, "len": len, "int": int,
                 "float": float}


def load_hardware(path: Path) -> dict[str, SimpleNamespace]:
    """`hardware.toml` as {chip: namespace of field -> value}; every field must be {value, source}."""
    issues: list[SeedIssue] = []
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SeedError([SeedIssue(path.name, None, None, f"cannot read: {exc}")]) from exc
    chips: dict[str, SimpleNamespace] = {}
    for chip, fields in raw.items():
        if not isinstance(fields, dict):
            issues.append(SeedIssue(path.name, None, chip, "expected a table of fields"))
            continue
        values: dict[str, Any] = {}
        for name, entry in fields.items():
            if name == "name":
                values[name] = entry
                continue
            if not (isinstance(entry, dict) and set(entry) == {"value", "source"}):
                issues.append(SeedIssue(path.name, None, f"{chip}.{name}", "expected { value = ..., source = \"chN, Section\" }"))
                continue
            value = entry["value"]
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                issues.append(SeedIssue(path.name, None, f"{chip}.{name}", f"value must be a finite number, got {value!r}"))
            if not re.match(r"^ch\d+, \S", str(entry["source"])):
                issues.append(SeedIssue(path.name, None, f"{chip}.{name}", "source must look like 'chN, Section heading'"))
            values[name] = value
        chips[chip] = SimpleNamespace(**values)
    if issues:
        raise SeedError(issues)
    return chips


def load_derive(path: Path) -> ModuleType:
    """`derive.py` as a module (the shared derivation functions)."""
    spec = importlib.util.spec_from_file_location("scaling_book_seed_derive", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - any error in seed code is a seed error
        raise SeedError([SeedIssue(path.name, None, None, f"cannot import: {type(exc).__name__}: {exc}")]) from exc
    return module


def _reference_modules(seed_dir: Path) -> dict[str, tuple[str, str | None]]:
    folder = seed_dir / "reference_solutions"
    modules = {}
    for path in sorted(folder.glob("ch*.py")):
        modules[path.stem] = (f"reference_solutions/{path.name}", path.read_text())
    return modules


def chapter_files(seed_dir: Path) -> list[Path]:
    """The chapter files of `seed_dir`, in chapter order."""
    return sorted(p for p in seed_dir.glob("ch*.toml") if CHAPTER_FILE_PATTERN.match(p.name))


def seed_namespace(seed_dir: Path) -> tuple[dict[str, Any], dict[str, tuple[str, str | None]]]:
    """The expression namespace every item starts from (chips, magnitudes, `derive`, `math`) and the
    reference modules ({"chNN": (path, source)}). Raises `SeedError`."""
    hardware = load_hardware(seed_dir / "hardware.toml")
    derive = load_derive(seed_dir / "derive.py")
    return {**hardware, **MAGNITUDES, "derive": derive, "math": math}, _reference_modules(seed_dir)
