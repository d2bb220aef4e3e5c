"""The seed format's types: item specs, their code test cases, and the content errors that name the
file, the item id and the field of every problem (`SeedIssue`, raised together as `ContentError`).

`ItemSpec` is what `scaling_book.content.loader` reads from `seed/` and what the store maps to rows
(`scaling_book.store.items.replace_items`, which takes any object with these attributes).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from scaling_book.store.models import HELDOUT_CHAPTERS


@dataclass(frozen=True)
class SeedIssue:
    """One problem in `seed/`: where it is and what is wrong."""

    file: str
    item_id: str | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.item_id:
            where += f", item {self.item_id}"
        if self.field:
            where += f", field {self.field}"
        return f"{where}: {self.message}"


class ContentError(Exception):
    """Content that must not be exported, with every `SeedIssue` found (file, item id, field)."""

    def __init__(self, issues: list[SeedIssue]):
        self.issues = issues
        super().__init__("\n".join(str(issue) for issue in issues))


class SeedError(ContentError):
    """Raised with every `SeedIssue` found in one load of `seed/`, or refused by the store."""


@dataclass
class CodeTestSpec:
    args: list[Any]
    expected: Any


@dataclass
class ItemSpec:
    """One validated item, ready for the store. Targets are evaluated floats."""

    id: str
    chapter: int
    section: str
    provenance: str
    grader: str
    question: str
    source_file: str
    tolerance: float | None = None
    notes: str | None = None
    book_value: str | None = None
    erratum: str | None = None
    counterpart: str | None = None
    method_stated: bool = False
    given_expressions: dict[str, Any] = field(default_factory=dict)
    targets: list[float] = field(default_factory=list)
    target_expressions: list[str] = field(default_factory=list)
    units: list[str] = field(default_factory=list)
    choices: dict[str, str] = field(default_factory=dict)
    answer_letter: str | None = None
    formula_answer: str | None = None
    formula_symbols: list[str] = field(default_factory=list)
    formula_equivalents: list[str] = field(default_factory=list)
    code_function: str | None = None
    code_signature: str | None = None
    code_docstring: str | None = None
    code_compare: str | None = None
    reference_module: str | None = None
    reference_function: str | None = None
    reference_source: str | None = None
    tests: list[CodeTestSpec] = field(default_factory=list)
    hidden_domain: dict[str, Any] | None = None
    """A code item's entry in `seed/code_domains.toml` (`Domains.fingerprint`), from which its hidden
    test cases are drawn; None for other items (and code items without hidden cases)."""

    @property
    def split(self) -> str:
        return "heldout" if self.chapter in HELDOUT_CHAPTERS else "train"

    @property
    def kind(self) -> str:
        return "code" if self.grader == "code" else "qa"

    def content_hash(self) -> str:
        """sha256 of everything a model sees or a grader uses: changes whenever the item changes (for a
        code item, also when its domain in `seed/code_domains.toml`, which draws its hidden tests, or its
        reference module in `seed/reference_solutions/`, which computes their expected values, does)."""
        payload = {
            "id": self.id, "chapter": self.chapter, "section": self.section, "grader": self.grader,
            "question": self.question, "tolerance": self.tolerance, "targets": self.targets,
            "units": self.units, "choices": self.choices, "answer_letter": self.answer_letter,
            "formula_answer": self.formula_answer, "formula_symbols": self.formula_symbols,
            "formula_equivalents": self.formula_equivalents, "code_function": self.code_function,
            "code_signature": self.code_signature, "code_docstring": self.code_docstring,
            "code_compare": self.code_compare, "tests": [[t.args, t.expected] for t in self.tests],
        }
        if self.hidden_domain is not None:  # what the hidden tests are drawn from grades the item too
            payload["hidden_domain"] = self.hidden_domain
        if self.reference_source is not None:  # and their expected values are what its module computes
            payload["reference_source"] = self.reference_source
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(blob.encode()).hexdigest()
