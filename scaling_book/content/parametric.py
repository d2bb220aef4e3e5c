"""Parametric item declarations: `seed/variants/chNN.toml`, read into `VariantDecl`s.

A declaration says which inputs of an item vary (a `[item.given]` name or a hardware field
`chip.field`), how each is drawn (log-uniform, uniform, integer steps or a list of choices), how it
is written in the question (significant figures, style, display scale) and where (a literal `text`
of the original question, or `replace` pairs that turn the question into a template with
`{{name}}` placeholders). Constraints are expressions that every draw must satisfy. The format is
documented in `seed/README.md` ("Variants").

`load_variant_decls(seed_dir)` returns {item id: VariantDecl}; every problem is a `SeedIssue`
naming the file, the item id and the field, raised together as `SeedError`.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scaling_book.content.specs import SeedError, SeedIssue

VARIANT_FILE_PATTERN = re.compile(r"^ch(\d\d)\.toml$")
PLACEHOLDER = re.compile(r"\{\{([A-Za-z_][\w.]*)\}\}")
DISTRIBUTIONS = ("log_uniform", "uniform", "int", "choices")
STYLES = ("sci", "plain", "int", "comma")
INPUT_FIELDS = set(DISTRIBUTIONS) | {"sig", "style", "scale", "text", "hidden", "book"}
DECL_FIELDS = {"inputs", "derived", "replace", "constraints", "test_args", "max_ratio", "fixed"}
DEFAULT_MAX_RATIO = 1e4


@dataclass(frozen=True)
class VariantInput:
    """One varying input. `name` is a given name or `chip.field`; values are drawn in display units
    (the question shows `shown`, the item's namespace gets `float(shown) * scale`)."""

    name: str
    distribution: str
    low: float | None = None
    high: float | None = None
    step: int = 1
    choices: tuple[Any, ...] = ()
    sig: int = 3
    style: str = "sci"
    scale: float = 1.0
    text: str | None = None
    hidden: bool = False
    book: float | None = None
    """The book's value of an input the item's `given` does not name (one only the question shows)."""

    @property
    def is_hardware(self) -> bool:
        return "." in self.name


@dataclass
class VariantDecl:
    """The parametric declaration of one item (see module docstring)."""

    item_id: str
    file: str
    inputs: list[VariantInput] = field(default_factory=list)
    derived: dict[str, str] = field(default_factory=dict)
    """Given names bound to an expression over the drawn inputs (e.g. d_model = "n_heads * d_head"),
    which the template may show like an input."""
    replace: list[tuple[str, str]] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    test_args: dict[int, VariantInput] = field(default_factory=dict)
    max_ratio: float = DEFAULT_MAX_RATIO
    fixed: str | None = None
    """When set, the item is declared non-parametric and this says why (pure recall, a count...)."""

    @property
    def parametric(self) -> bool:
        return self.fixed is None

    def placeholders(self) -> set[str]:
        """Every `{name}` the template uses."""
        found = {p for _, new in self.replace for p in PLACEHOLDER.findall(new)}
        return found | {i.name for i in self.inputs if i.text is not None}

    def bound_names(self) -> set[str]:
        """Every name a placeholder may use: the inputs and the derived values."""
        return {i.name for i in self.inputs} | set(self.derived)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _read_input(name: str, raw: Any, where: str, issue) -> VariantInput | None:
    if not isinstance(raw, dict):
        issue(where, "must be a table { log_uniform|uniform|int|choices = ..., ... }")
        return None
    for unknown in sorted(set(raw) - INPUT_FIELDS):
        issue(f"{where}.{unknown}", "unknown field")
    kinds = [k for k in DISTRIBUTIONS if k in raw]
    if len(kinds) != 1:
        issue(where, f"give exactly one of {', '.join(DISTRIBUTIONS)}")
        return None
    kind = kinds[0]
    spec: dict[str, Any] = {"name": name, "distribution": kind}
    value = raw[kind]
    if kind == "choices":
        if not isinstance(value, list) or len(value) < 2 or not all(_finite(v) for v in value):
            issue(f"{where}.choices", "must be a list of at least two finite numbers")
            return None
        spec["choices"] = tuple(value)
        spec["style"] = "int" if all(isinstance(v, int) for v in value) else "plain"
    else:
        size = 3 if kind == "int" else 2
        if not isinstance(value, list) or len(value) not in (2, size) or not all(_finite(v) for v in value):
            issue(f"{where}.{kind}", "must be [low, high]" + (" or [low, high, step]" if kind == "int" else "")
                  + " with finite numbers")
            return None
        low, high = float(value[0]), float(value[1])
        if not low < high:
            issue(f"{where}.{kind}", f"range must be ordered low < high, got {value!r}")
            return None
        if kind == "log_uniform" and low <= 0:
            issue(f"{where}.{kind}", "a log-uniform range must be positive")
            return None
        spec.update(low=low, high=high)
        if kind == "int":
            spec["step"] = int(value[2]) if len(value) == 3 else 1
            spec["style"] = "int"
            if spec["step"] < 1 or low != int(low):
                issue(f"{where}.int", "low must be an integer and step >= 1")
                return None
        else:
            spec["style"] = "sci" if kind == "log_uniform" else "plain"
    if "sig" in raw:
        if not isinstance(raw["sig"], int) or not 1 <= raw["sig"] <= 6:
            issue(f"{where}.sig", "must be an integer 1-6")
        else:
            spec["sig"] = raw["sig"]
    if "style" in raw:
        if raw["style"] not in STYLES:
            issue(f"{where}.style", f"must be one of {', '.join(STYLES)}")
        else:
            spec["style"] = raw["style"]
    if "scale" in raw:
        if not _finite(raw["scale"]) or raw["scale"] <= 0:
            issue(f"{where}.scale", "must be a positive finite number")
        else:
            spec["scale"] = float(raw["scale"])
    for text_field in ("text",):
        if text_field in raw:
            if not isinstance(raw[text_field], str) or not raw[text_field]:
                issue(f"{where}.{text_field}", "must be a non-empty string")
            else:
                spec[text_field] = raw[text_field]
    if "book" in raw:
        if not _finite(raw["book"]):
            issue(f"{where}.book", "must be a finite number")
        else:
            spec["book"] = raw["book"]
    if "hidden" in raw:
        spec["hidden"] = bool(raw["hidden"])
    return VariantInput(**spec)


def read_decl(item_id: str, raw: Any, file: str, issues: list[SeedIssue]) -> VariantDecl | None:
    """One declaration table; problems are appended to `issues`."""

    def issue(field_name: str | None, message: str) -> None:
        issues.append(SeedIssue(file, item_id, field_name, message))

    if not isinstance(raw, dict):
        issue(None, "must be a table")
        return None
    for unknown in sorted(set(raw) - DECL_FIELDS):
        issue(unknown, "unknown field")
    decl = VariantDecl(item_id=item_id, file=file)
    if "fixed" in raw:
        if not isinstance(raw["fixed"], str) or not raw["fixed"].strip():
            issue("fixed", "must say why the item stays fixed")
        decl.fixed = str(raw["fixed"])
        if set(raw) - {"fixed"}:
            issue("fixed", "a fixed item declares nothing else")
        return decl
    inputs = raw.get("inputs", {})
    if not isinstance(inputs, dict):
        issue("inputs", "must be a table of name = { ... }")
        inputs = {}
    for name, spec in inputs.items():
        parsed = _read_input(name, spec, f"inputs.{name}", issue)
        if parsed is not None:
            decl.inputs.append(parsed)
    test_args = raw.get("test_args", {})
    if not isinstance(test_args, dict):
        issue("test_args", "must be a table of position = { ... }")
        test_args = {}
    for position, spec in test_args.items():
        if not str(position).isdigit():
            issue(f"test_args.{position}", "key must be an argument position (0, 1, ...)")
            continue
        parsed = _read_input(f"arg{position}", spec, f"test_args.{position}", issue)
        if parsed is not None:
            decl.test_args[int(position)] = parsed
    if not decl.inputs and not decl.test_args:
        issue("inputs", "a parametric item varies at least one input (or declare `fixed = \"why\"`)")
    derived = raw.get("derived", {})
    if not isinstance(derived, dict) or not all(isinstance(v, str) and v.strip() for v in derived.values()):
        issue("derived", "must be a table of name = \"expression over the inputs\"")
    else:
        decl.derived = dict(derived)
    replace = raw.get("replace", [])
    if not isinstance(replace, list) or not all(isinstance(r, dict) and set(r) == {"old", "new"}
                                                and all(isinstance(v, str) and v for v in r.values())
                                                for r in replace):
        issue("replace", "must be a list of { old = \"...\", new = \"...\" } with non-empty strings")
    else:
        decl.replace = [(r["old"], r["new"]) for r in replace]
    constraints = raw.get("constraints", [])
    if not isinstance(constraints, list) or not all(isinstance(c, str) and c.strip() for c in constraints):
        issue("constraints", "must be a list of expression strings")
    else:
        decl.constraints = list(constraints)
    if "max_ratio" in raw:
        if not _finite(raw["max_ratio"]) or raw["max_ratio"] <= 1:
            issue("max_ratio", "must be a finite number > 1")
        else:
            decl.max_ratio = float(raw["max_ratio"])
    for placeholder in sorted(decl.placeholders() - decl.bound_names()):
        issue("replace", f"placeholder {{{{{placeholder}}}}} is not a declared input")
    return decl


def variant_files(seed_dir: Path) -> list[Path]:
    folder = Path(seed_dir) / "variants"
    return sorted(p for p in folder.glob("ch*.toml") if VARIANT_FILE_PATTERN.match(p.name))


def load_variant_decls(seed_dir: Path) -> dict[str, VariantDecl]:
    """Every declaration under `seed_dir/variants/`, keyed by item id. Raises `SeedError`."""
    issues: list[SeedIssue] = []
    decls: dict[str, VariantDecl] = {}
    for path in variant_files(seed_dir):
        file = f"variants/{path.name}"
        try:
            raw = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            issues.append(SeedIssue(file, None, None, f"not valid TOML: {exc}"))
            continue
        chapter = int(VARIANT_FILE_PATTERN.match(path.name).group(1))
        for item_id, table in raw.items():
            if not item_id.startswith(f"ch{chapter:02d}-"):
                issues.append(SeedIssue(file, item_id, None, f"not a chapter {chapter} item id"))
                continue
            if item_id in decls:
                issues.append(SeedIssue(file, item_id, None, "declared twice"))
                continue
            decl = read_decl(item_id, table, file, issues)
            if decl is not None:
                decls[item_id] = decl
    if issues:
        raise SeedError(issues)
    return decls
