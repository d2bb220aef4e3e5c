"""The executable half of the validation gate.

The store's constraints already refused every statically bad row (ids, provenance, finite targets,
tolerances, mcq answers among the item's choices). The gate runs what a constraint cannot:

5. every formula answer and declared equivalent vets and parses under the formula grader's parser;
6. every code item's reference solution, run in the sandbox like a model's submission, passes every
   one of its test cases;
7. no knowledge-free constant passes all of a code item's tests; the best fraction one passes is
   stored as the item's baseline (the code grader subtracts it).

`run_gate(session)` writes the baselines into the caller's transaction and returns a `GateReport`;
it raises `GateError` naming every failing item and field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from scaling_book.content.specs import ContentError, SeedIssue
from scaling_book.store.items import all_items
from scaling_book.store.models import Baseline, Item

REFERENCE_TIMEOUT_S = 20.0
GATE_WORKERS = 4


class GateError(ContentError):
    """Raised with every failed executable check of a gate run; nothing may be exported."""


@dataclass
class GateReport:
    """What the gate checked: counts, the sandbox mode, and each code item's baseline."""

    formulas_checked: int = 0
    references_run: int = 0
    test_cases_run: int = 0
    isolation_mode: str = ""
    baselines: dict[str, tuple[float, str]] = field(default_factory=dict)
    reference_seconds: dict[str, float] = field(default_factory=dict)


def _check_formula(item: Item) -> list[SeedIssue]:
    from scaling_book.grading.formula import FormulaError, check_parses

    symbols = [s.name for s in item.formula_symbols]
    failures = []
    candidates = [("answer", item.formula.expression)] + [
        (f"equivalents[{e.position}]", e.expression) for e in item.formula_equivalents
    ]
    for field_name, expression in candidates:
        try:
            check_parses(expression, symbols)
        except FormulaError as exc:
            failures.append(SeedIssue(item.source_file, item.id, field_name, f"does not parse: {exc}"))
    return failures


@dataclass(frozen=True)
class _CodeCheck:
    """A code item's data, detached from the session so worker threads never touch the ORM."""

    item_id: str
    source_file: str
    reference_source: str
    reference_function: str
    compare: str
    tolerance: float | None
    tests: list[dict]

    @classmethod
    def of(cls, item: Item) -> _CodeCheck:
        task = item.code_task
        tests = [{"args": json.loads(t.args_json), "expected": json.loads(t.expected_json)} for t in task.tests]
        return cls(item.id, item.source_file, task.reference_source, task.reference_function, task.compare,
                   task.tolerance, tests)


def _check_code(check: _CodeCheck) -> tuple[list[SeedIssue], tuple[float, str], float]:
    from scaling_book.grading.code import knowledge_free_baseline, test_passes
    from scaling_book.grading.sandbox import run_function

    tests = check.tests
    result = run_function(check.reference_source, check.reference_function, [t["args"] for t in tests],
                          REFERENCE_TIMEOUT_S)
    failures: list[SeedIssue] = []
    if result.status != "ok":
        failures.append(SeedIssue(check.source_file, check.item_id, "reference",
                                    f"reference solution {check.reference_function} did not run: "
                                    f"{result.status}: {result.detail}"))
    else:
        passes = test_passes(result.values, tests, check.compare, check.tolerance)
        for position, (passed, test, value) in enumerate(zip(passes, tests, result.values or [], strict=False)):
            if not passed:
                failures.append(SeedIssue(check.source_file, check.item_id, f"test[{position}]",
                                            f"reference returned {value!r}, expected {test['expected']!r}"))
        if (len(passes) < len(tests) or not all(passes)) and not failures:
            failures.append(SeedIssue(check.source_file, check.item_id, "test",
                                        "reference did not pass every test"))
    best_fraction, best_constant = knowledge_free_baseline(tests, check.compare, check.tolerance)
    if best_fraction >= 1.0:
        failures.append(SeedIssue(check.source_file, check.item_id, "test",
                                    f"the knowledge-free constant {best_constant} passes every test"))
    return failures, (best_fraction, best_constant), result.duration_s


def run_gate(session: Session, on_progress: Callable[[str], None] | None = None) -> GateReport:
    """Run checks 5-7 over every item in the store; store baselines; raise `GateError` on any failure."""
    from scaling_book.grading.sandbox import isolation_mode

    items = all_items(session)
    report = GateReport(isolation_mode=isolation_mode())
    failures: list[SeedIssue] = []
    for item in items:
        if item.grader == "formula":
            failures.extend(_check_formula(item))
            report.formulas_checked += 1
    code_items = [item for item in items if item.grader == "code"]
    checks = [_CodeCheck.of(item) for item in code_items]
    with ThreadPoolExecutor(max_workers=GATE_WORKERS) as pool:
        outcomes = list(pool.map(_check_code, checks))
    for item, check, (item_failures, baseline, seconds) in zip(code_items, checks, outcomes, strict=True):
        failures.extend(item_failures)
        report.references_run += 1
        report.test_cases_run += len(check.tests)
        report.reference_seconds[item.id] = seconds
        if on_progress:
            on_progress(item.id)
        if baseline[0] < 1.0:
            report.baselines[item.id] = baseline
            item.code_task.baseline = Baseline(
                item_id=item.id, best_fraction=baseline[0], best_constant=baseline[1], measured_at=datetime.now(UTC)
            )
    if failures:
        raise GateError(failures)
    session.flush()
    return report
