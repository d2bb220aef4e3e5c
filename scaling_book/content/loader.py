"""Reading `seed/` into validated item specs.

`load_seed(seed_dir)` parses `hardware.toml`, `derive.py` and every `chNN_*.toml`, evaluates every
target and test expression, and returns one `ItemSpec` per item. Every problem is reported as a
`SeedIssue` naming the file, the item id and the field; all issues of a load are collected and raised
together as `SeedError`, so one run shows everything that needs fixing.

The expression namespace is described in `seed/README.md`.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from scaling_book.content.domains import load_domains
from scaling_book.content.namespace import (
    CHAPTER_FILE_PATTERN,
    SAFE_BUILTINS,
    chapter_files,
    seed_namespace,
)
from scaling_book.content.specs import (
    CodeTestSpec,
    ItemSpec,
    SeedError,
    SeedIssue,
)
from scaling_book.store.models import (
    COMPARISONS,
    GRADERS,
    HELDOUT_CHAPTERS,
    PROVENANCES,
    TRAIN_CHAPTERS,
)

ITEM_ID_PATTERN = re.compile(r"^ch(\d\d)-[a-z0-9]+(-[a-z0-9]+)*$")
MCQ_LETTERS = ("A", "B", "C", "D", "E", "F")
MIN_TESTS_PER_CODE_ITEM = 3
MIN_NONDEGENERATE_TESTS = 2

COMMON_FIELDS = {"id", "section", "provenance", "grader", "question", "given", "book_value", "erratum",
                 "counterpart", "notes", "method_stated"}
GRADER_FIELDS: dict[str, set[str]] = {
    "numeric": {"target", "tolerance", "unit"},
    "numeric_multi": {"targets", "tolerance", "units"},
    "mcq": {"choices", "answer"},
    "formula": {"symbols", "answer", "equivalents"},
    "code": {"function", "signature", "docstring", "reference", "compare", "tolerance", "test"},
}
REQUIRED_GRADER_FIELDS: dict[str, set[str]] = {
    "numeric": {"target", "tolerance", "unit"},
    "numeric_multi": {"targets", "tolerance", "units"},
    "mcq": {"choices", "answer"},
    "formula": {"symbols", "answer"},
    "code": {"function", "signature", "docstring", "reference", "compare", "test"},
}


class _ItemReader:
    """Validates one `[[item]]` table; records issues instead of raising."""

    def __init__(self, file: str, raw: dict[str, Any], base_namespace: dict[str, Any], issues: list[SeedIssue]):
        self.file = file
        self.raw = raw
        self.item_id = raw.get("id") if isinstance(raw.get("id"), str) else None
        self.issues = issues
        self.namespace = dict(base_namespace)

    def issue(self, field_name: str | None, message: str) -> None:
        self.issues.append(SeedIssue(self.file, self.item_id, field_name, message))

    def text(self, name: str, required: bool = True) -> str | None:
        value = self.raw.get(name)
        if value is None:
            if required:
                self.issue(name, "missing")
            return None
        if not isinstance(value, str) or not value.strip():
            self.issue(name, f"must be a non-empty string, got {value!r}")
            return None
        return value.strip()

    def evaluate(self, expression: Any, field_name: str) -> Any:
        if isinstance(expression, bool) or expression is None:
            self.issue(field_name, f"expected an expression, got {expression!r}")
            return None
        if isinstance(expression, int | float):
            return expression
        if not isinstance(expression, str):
            self.issue(field_name, f"expected an expression string or a number, got {expression!r}")
            return None
        try:
            return eval(compile(expression, f"<{self.file}:{self.item_id}:{field_name}>", "eval"),  # noqa: S307
                        {"__builtins__": SAFE_BUILTINS}, self.namespace)
        except Exception as exc:  # noqa: BLE001 - the message names the expression
            self.issue(field_name, f"cannot evaluate {expression!r}: {type(exc).__name__}: {exc}")
            return None

    def number(self, expression: Any, field_name: str) -> float | None:
        value = self.evaluate(expression, field_name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.issue(field_name, f"must evaluate to a number, got {value!r}")
            return None
        if not math.isfinite(value):
            self.issue(field_name, f"must be finite, got {value!r}")
            return None
        return float(value)

    def tolerance(self, name: str = "tolerance") -> float | None:
        value = self.raw.get(name)
        if value is None:
            self.issue(name, "missing")
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not (0 < value < 1):
            self.issue(name, f"must be a number strictly inside (0, 1), got {value!r}")
            return None
        return float(value)

    def read(self, chapter: int, reference_modules: dict[str, tuple[str, str | None]]) -> ItemSpec | None:
        raw = self.raw
        if self.item_id is None:
            self.issue("id", "missing or not a string")
            return None
        if not ITEM_ID_PATTERN.match(self.item_id):
            self.issue("id", "must look like chNN-lowercase-slug")
        elif int(ITEM_ID_PATTERN.match(self.item_id).group(1)) != chapter:
            self.issue("id", f"prefix does not match the file's chapter {chapter}")
        grader = raw.get("grader")
        if grader not in GRADERS:
            self.issue("grader", f"must be one of {', '.join(GRADERS)}, got {grader!r}")
            return None
        allowed = COMMON_FIELDS | GRADER_FIELDS[grader]
        for name in sorted(set(raw) - allowed):
            self.issue(name, f"unknown field for a {grader} item")
        for name in sorted(REQUIRED_GRADER_FIELDS[grader] - set(raw)):
            self.issue(name, "missing")
        provenance = raw.get("provenance")
        if provenance not in PROVENANCES:
            self.issue("provenance", f"must be one of {', '.join(PROVENANCES)}, got {provenance!r}")
        spec = ItemSpec(
            id=self.item_id, chapter=chapter, section=self.text("section") or "",
            provenance=str(provenance), grader=grader, question=self.text("question") or "",
            source_file=self.file, notes=self.text("notes", required=False),
            erratum=self.text("erratum", required=False),
            counterpart=self.text("counterpart", required=False),
        )
        method_stated = raw.get("method_stated")
        if not isinstance(method_stated, bool):
            self.issue("method_stated", f"must be true or false (does the question give the formula?), got {method_stated!r}")
        spec.method_stated = method_stated is True
        if "book_value" in raw:
            spec.book_value = json.dumps(raw["book_value"]) if not isinstance(raw["book_value"], str) else raw["book_value"]
            if spec.erratum is None:
                self.issue("erratum", "an item with book_value must say why the book's value is wrong")
        if chapter in HELDOUT_CHAPTERS and spec.counterpart is None:
            self.issue("counterpart", "a held-out item must name its chapter 1-8 counterpart")
        if chapter in TRAIN_CHAPTERS and spec.counterpart is not None:
            self.issue("counterpart", "only held-out items have a counterpart")
        given = raw.get("given", {})
        if not isinstance(given, dict):
            self.issue("given", "must be a table of name = value")
        else:
            spec.given_expressions = dict(given)
            for name, expression in given.items():
                value = self.evaluate(expression, f"given.{name}")
                if value is not None:
                    self.namespace[name] = value
        getattr(self, f"_read_{grader}")(spec, reference_modules)
        return spec

    def check_unit(self, unit: str, field_name: str) -> None:
        """A numeric target's unit must parse in the grading unit registry (``grading/units.txt``)."""
        from scaling_book.grading.units import UnitError, item_unit

        try:
            item_unit(unit)
        except UnitError as exc:
            self.issue(field_name, f"{exc}: not a unit of the grading registry (scaling_book/grading/units.txt)")

    def _read_numeric(self, spec: ItemSpec, _refs) -> None:
        spec.tolerance = self.tolerance()
        value = self.number(self.raw.get("target"), "target")
        if value is not None:
            spec.targets = [value]
            spec.target_expressions = [str(self.raw["target"])]
        unit = self.text("unit") or ""
        self.check_unit(unit, "unit")
        spec.units = [unit]

    def _read_numeric_multi(self, spec: ItemSpec, _refs) -> None:
        spec.tolerance = self.tolerance()
        targets, units = self.raw.get("targets"), self.raw.get("units")
        if not isinstance(targets, list) or len(targets) < 2:
            self.issue("targets", "must be a list of at least two expressions")
            return
        if not isinstance(units, list) or len(units) != len(targets) or not all(isinstance(u, str) and u for u in units):
            self.issue("units", "must be a list of unit strings, one per target")
        else:
            for position, unit in enumerate(units):
                self.check_unit(unit, f"units[{position}]")
            spec.units = list(units)
        for position, expression in enumerate(targets):
            value = self.number(expression, f"targets[{position}]")
            if value is not None:
                spec.targets.append(value)
                spec.target_expressions.append(str(expression))

    def _read_mcq(self, spec: ItemSpec, _refs) -> None:
        choices, answer = self.raw.get("choices"), self.raw.get("answer")
        if not isinstance(choices, dict) or not 2 <= len(choices) <= len(MCQ_LETTERS):
            self.issue("choices", f"must be a table of 2-{len(MCQ_LETTERS)} lettered choices")
            return
        letters = sorted(choices)
        if letters != list(MCQ_LETTERS[: len(letters)]):
            self.issue("choices", f"letters must be A, B, C, ... in order, got {', '.join(letters)}")
        for letter, text in choices.items():
            if not isinstance(text, str) or not text.strip():
                self.issue(f"choices.{letter}", "must be a non-empty string")
        if len({str(t).strip().lower() for t in choices.values()}) != len(choices):
            self.issue("choices", "two choices have the same text")
        spec.choices = {letter: str(choices[letter]).strip() for letter in letters}
        if answer not in choices:
            self.issue("answer", f"must be one of the item's choices ({', '.join(letters)}), got {answer!r}")
        spec.answer_letter = answer if isinstance(answer, str) else None

    def _read_formula(self, spec: ItemSpec, _refs) -> None:
        symbols = self.raw.get("symbols")
        if not isinstance(symbols, list) or not symbols or not all(isinstance(s, str) and s.isidentifier() for s in symbols):
            self.issue("symbols", "must be a non-empty list of identifiers")
        elif len(set(symbols)) != len(symbols):
            self.issue("symbols", "a symbol is declared twice")
        else:
            spec.formula_symbols = list(symbols)
        spec.formula_answer = self.text("answer")
        equivalents = self.raw.get("equivalents", [])
        if not isinstance(equivalents, list) or not all(isinstance(e, str) and e.strip() for e in equivalents):
            self.issue("equivalents", "must be a list of expression strings")
        else:
            spec.formula_equivalents = [e.strip() for e in equivalents]

    def _read_code(self, spec: ItemSpec, reference_modules: dict[str, tuple[str, str | None]]) -> None:
        spec.code_function = self.text("function")
        if spec.code_function and not spec.code_function.isidentifier():
            self.issue("function", "must be a Python identifier")
        spec.code_signature = self.text("signature")
        if spec.code_signature and spec.code_function and not spec.code_signature.startswith(f"def {spec.code_function}("):
            self.issue("signature", f"must start with 'def {spec.code_function}('")
        spec.code_docstring = self.text("docstring")
        spec.code_compare = self.raw.get("compare")
        if spec.code_compare not in COMPARISONS:
            self.issue("compare", f"must be one of {', '.join(COMPARISONS)}, got {spec.code_compare!r}")
        if spec.code_compare == "rel":
            spec.tolerance = self.tolerance()
        elif "tolerance" in self.raw:
            self.issue("tolerance", "only compare = 'rel' takes a tolerance")
        module_name = f"ch{spec.chapter:02d}"
        reference = self.text("reference")
        if reference:
            module_path, source = reference_modules.get(module_name, (f"reference_solutions/{module_name}.py", None))
            if source is None:
                self.issue("reference", f"no module seed/{module_path}")
            elif not re.search(rf"^def {re.escape(reference)}\(", source, re.MULTILINE):
                self.issue("reference", f"no top-level function {reference!r} in seed/{module_path}")
            spec.reference_module, spec.reference_function, spec.reference_source = module_path, reference, source
        tests = self.raw.get("test")
        if not isinstance(tests, list) or len(tests) < MIN_TESTS_PER_CODE_ITEM:
            self.issue("test", f"needs at least {MIN_TESTS_PER_CODE_ITEM} [[item.test]] tables")
            return
        for position, test in enumerate(tests):
            self._read_test(spec, position, test)
        nondegenerate = sum(1 for t in spec.tests if _is_nondegenerate(t))
        if len(spec.tests) == len(tests) and nondegenerate < MIN_NONDEGENERATE_TESTS:
            self.issue("test", f"needs at least {MIN_NONDEGENERATE_TESTS} non-degenerate tests "
                               f"(expected not 0, 1, empty or an echoed argument), has {nondegenerate}")

    def _read_test(self, spec: ItemSpec, position: int, test: Any) -> None:
        where = f"test[{position}]"
        if not isinstance(test, dict) or set(test) - {"args", "args_expr", "expected", "expected_expr"}:
            self.issue(where, "must be a table with args|args_expr and expected|expected_expr")
            return
        if ("args" in test) == ("args_expr" in test) or ("expected" in test) == ("expected_expr" in test):
            self.issue(where, "give exactly one of args/args_expr and one of expected/expected_expr")
            return
        if "args" in test:
            args = test["args"]
        else:
            args = [self.evaluate(e, f"{where}.args_expr[{i}]") for i, e in enumerate(test["args_expr"])] \
                if isinstance(test["args_expr"], list) else None
        if not isinstance(args, list):
            self.issue(where, "args must be a list")
            return
        expected = test["expected"] if "expected" in test else self.evaluate(test["expected_expr"], f"{where}.expected_expr")
        try:
            json.dumps([args, expected], allow_nan=False)
        except (TypeError, ValueError) as exc:
            self.issue(where, f"args and expected must be finite plain JSON values: {exc}")
            return
        if expected is None:
            self.issue(where, "expected must not be null")
            return
        spec.tests.append(CodeTestSpec(args=args, expected=expected))


def _is_nondegenerate(test: CodeTestSpec) -> bool:
    """A test is degenerate when its expected value is 0, 1, empty or one of its arguments.

    A predicate's True/False counts as non-degenerate: the baseline check (no constant passes every
    test) is what keeps predicate items honest.
    """
    expected = test.expected
    if isinstance(expected, bool):
        return True
    if expected in (0, 1, "", []):
        return False
    return all(expected != arg or isinstance(arg, bool) for arg in test.args)


def read_item(file: str, chapter: int, raw: dict[str, Any], namespace: dict[str, Any],
              references: dict[str, tuple[str, str | None]]) -> tuple[ItemSpec | None, list[SeedIssue], dict[str, Any]]:
    """One `[[item]]` table read over `namespace`: (spec or None, issues, the item's namespace after its
    `given` table)."""
    issues: list[SeedIssue] = []
    reader = _ItemReader(file, raw, namespace, issues)
    spec = reader.read(chapter, references)
    return spec, issues, reader.namespace


def load_seed(seed_dir: Path) -> list[ItemSpec]:
    """Every item of `seed_dir`, validated and with targets evaluated; each code item carries its
    entry of `code_domains.toml` (`ItemSpec.hidden_domain`, part of its content hash).

    Raises `SeedError` listing every problem found (file, item id, field, message).
    """
    base_namespace, references = seed_namespace(seed_dir)
    issues: list[SeedIssue] = []
    items: list[ItemSpec] = []
    seen: dict[str, str] = {}
    for path in chapter_files(seed_dir):
        file = path.name
        try:
            raw = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            issues.append(SeedIssue(file, None, None, f"not valid TOML: {exc}"))
            continue
        chapter = raw.get("chapter")
        file_chapter = int(CHAPTER_FILE_PATTERN.match(file).group(1))
        if chapter != file_chapter:
            issues.append(SeedIssue(file, None, "chapter", f"must be {file_chapter} (the file name's chapter), got {chapter!r}"))
            continue
        if chapter not in TRAIN_CHAPTERS + HELDOUT_CHAPTERS:
            issues.append(SeedIssue(file, None, "chapter", f"chapter {chapter} is not an item source (1-8 and 12 are)"))
            continue
        for name in sorted(set(raw) - {"chapter", "item"}):
            issues.append(SeedIssue(file, None, name, "unknown top-level key"))
        raw_items = raw.get("item", [])
        if not isinstance(raw_items, list):
            issues.append(SeedIssue(file, None, "item", "must be an array of [[item]] tables"))
            continue
        for raw_item in raw_items:
            reader = _ItemReader(file, raw_item, base_namespace, issues)
            spec = reader.read(chapter, references)
            if spec is None:
                continue
            if spec.id in seen:
                issues.append(SeedIssue(file, spec.id, "id", f"duplicate id (also in {seen[spec.id]})"))
                continue
            seen[spec.id] = file
            items.append(spec)
    for spec in items:
        if spec.counterpart is not None:
            partner = next((other for other in items if other.id == spec.counterpart), None)
            if partner is None or partner.split != "train":
                issues.append(SeedIssue(spec.source_file, spec.id, "counterpart",
                                        f"{spec.counterpart!r} is not a chapter 1-8 item"))
    if issues:
        raise SeedError(issues)
    domains = load_domains(seed_dir)
    for spec in items:
        if spec.grader == "code" and domains is not None:
            spec.hidden_domain = domains.fingerprint(spec.id)
    return items
