"""The executable half of the validation gate.

The store's constraints already refused every statically bad row (ids, provenance, finite targets,
tolerances, mcq answers among the item's choices). The gate runs what a constraint cannot:

5. every formula answer and declared equivalent vets and parses under the formula grader's parser;
6. every code item's reference solution, run in the sandbox like a model's submission, passes every
   one of its test cases;
7. no knowledge-free constant passes all of a code item's tests; the best fraction one passes is
   stored as the item's baseline (the code grader subtracts it);
8. hidden tests: with `seed/code_domains.toml` (`scaling_book.content.domains`), each code item gets
   `cases` extra argument lists drawn with a recorded seed; the reference's values on them (from the
   same sandboxed run as its visible tests) are stored as hidden test cases, and the baseline of 7 is
   measured over visible + hidden;
9. mutation check: every mutant of the reference (`scaling_book.content.mutants`) must fail at least
   one test, visible or hidden; a survivor fails the gate.

`run_gate(session)` writes the baselines and hidden cases into the caller's transaction and returns a
`GateReport`; it raises `GateError` naming every failing item and field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from scaling_book.content.domains import Domains, draw_cases
from scaling_book.content.specs import ContentError, SeedIssue
from scaling_book.store.items import all_items
from scaling_book.store.models import Baseline, CodeTestCase, Item

REFERENCE_TIMEOUT_S = 20.0
MUTANT_TIMEOUT_S = 10.0
#: Extra argument lists (drawn like the hidden cases, another seed) that tell an equivalent mutant (one
#: computing the same function, e.g. two factors of a product swapped) from one the tests miss.
PROBE_CASES = 200
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
    hidden_cases: dict[str, int] = field(default_factory=dict)
    """Hidden test cases stored per code item (absent: the item has no domain)."""
    mutants_run: int = 0
    survivors: list[tuple[str, str]] = field(default_factory=list)
    """(item id, mutant) pairs that passed every test yet differ from the reference on a probe (a gate failure)."""
    equivalent_mutants: list[tuple[str, str]] = field(default_factory=list)
    """(item id, mutant) pairs that agree with the reference on every probe too (not counted)."""


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
    hidden_args: list[list] = field(default_factory=list)
    probe_args: list[list] = field(default_factory=list)

    @classmethod
    def of(cls, item: Item, hidden_args: list[list], probe_args: list[list]) -> _CodeCheck:
        task = item.code_task
        tests = [{"args": json.loads(t.args_json), "expected": json.loads(t.expected_json)}
                 for t in task.tests if not t.hidden]
        return cls(item.id, item.source_file, task.reference_source, task.reference_function, task.compare,
                   task.tolerance, tests, hidden_args, probe_args)


@dataclass
class _CodeOutcome:
    failures: list[SeedIssue]
    baseline: tuple[float, str]
    seconds: float
    hidden: list[dict]
    mutants_run: int = 0
    survivors: list[str] = field(default_factory=list)
    equivalent: list[str] = field(default_factory=list)


def _parameters(signature: str) -> list[str]:
    """Parameter names of a `def` line (``def f(a: int, b: float) -> float:``)."""
    import ast

    tree = ast.parse(signature.strip() + ("\n    pass" if signature.strip().endswith(":") else ":\n    pass"))
    return [a.arg for a in tree.body[0].args.args]


def _draw_hidden(item: Item, domains: Domains | None) -> tuple[list[list], list[list], int | None, list[SeedIssue]]:
    """The hidden argument lists of a code item, its probe lists (for the mutation check), the seed
    the hidden lists were drawn with, and any problem."""
    if domains is None or item.id not in domains.items:
        return [], [], None, []
    seed = domains.seed_of(item.id)
    parameters = _parameters(item.code_task.signature)
    try:
        hidden = draw_cases(domains.items[item.id], parameters, domains.cases, seed)
        probes = draw_cases(domains.items[item.id], parameters, PROBE_CASES, seed + 1)
    except ContentError as exc:
        return [], [], seed, list(exc.issues)
    return hidden, probes, seed, []


def _check_code(check: _CodeCheck) -> _CodeOutcome:
    from scaling_book.content.mutants import mutants
    from scaling_book.grading.code import knowledge_free_baseline, test_passes
    from scaling_book.grading.sandbox import CallError, run_function

    visible = check.tests
    all_args = [t["args"] for t in visible] + check.hidden_args + check.probe_args
    result = run_function(check.reference_source, check.reference_function, all_args, REFERENCE_TIMEOUT_S)
    tests = visible
    failures: list[SeedIssue] = []
    if result.status != "ok":
        failures.append(SeedIssue(check.source_file, check.item_id, "reference",
                                    f"reference solution {check.reference_function} did not run: "
                                    f"{result.status}: {result.detail}"))
    else:
        passes = test_passes(result.values[: len(visible)], tests, check.compare, check.tolerance)
        for position, (passed, test, value) in enumerate(zip(passes, tests, result.values or [], strict=False)):
            if not passed:
                failures.append(SeedIssue(check.source_file, check.item_id, f"test[{position}]",
                                            f"reference returned {value!r}, expected {test['expected']!r}"))
        if (len(passes) < len(tests) or not all(passes)) and not failures:
            failures.append(SeedIssue(check.source_file, check.item_id, "test",
                                        "reference did not pass every test"))
    hidden: list[dict] = []
    if result.status == "ok" and check.hidden_args:
        values = result.values[len(visible): len(visible) + len(check.hidden_args)]
        for position, (args, value) in enumerate(zip(check.hidden_args, values, strict=True)):
            if isinstance(value, CallError) or (isinstance(value, float) and value != value):
                failures.append(SeedIssue("code_domains.toml", check.item_id, f"hidden[{position}]",
                                          f"reference returned {value!r} for drawn arguments {args!r}"))
            hidden.append({"args": args, "expected": value})
    full = visible + hidden
    best_fraction, best_constant = knowledge_free_baseline(full, check.compare, check.tolerance)
    if best_fraction >= 1.0:
        failures.append(SeedIssue(check.source_file, check.item_id, "test",
                                    f"the knowledge-free constant {best_constant} passes every test"))
    outcome = _CodeOutcome(failures, (best_fraction, best_constant), result.duration_s, hidden)
    if failures or result.status != "ok":
        return outcome
    probes = [{"args": args, "expected": value}
              for args, value in zip(check.probe_args, result.values[len(full):], strict=True)]
    for description, source in mutants(check.reference_source, check.reference_function, check.compare):
        run = run_function(source, check.reference_function, [t["args"] for t in full + probes], MUTANT_TIMEOUT_S)
        outcome.mutants_run += 1
        if run.status != "ok" or not all(test_passes(run.values, full, check.compare, check.tolerance)):
            continue  # killed
        if probes and all(test_passes(run.values[len(full):], probes, check.compare, check.tolerance)):
            outcome.equivalent.append(description)  # the same function on every probe: not a wrong variant
        else:
            outcome.survivors.append(description)
    return outcome


def run_gate(session: Session, on_progress: Callable[[str], None] | None = None,
             domains: Domains | None = None) -> GateReport:
    """Run checks 5-9 over every item in the store; store baselines and hidden test cases (drawn from
    `domains`, see `scaling_book.content.domains.load_domains`); raise `GateError` on any failure."""
    from scaling_book.grading.sandbox import isolation_mode

    items = all_items(session)
    report = GateReport(isolation_mode=isolation_mode())
    failures: list[SeedIssue] = []
    for item in items:
        if item.grader == "formula":
            failures.extend(_check_formula(item))
            report.formulas_checked += 1
    code_items = [item for item in items if item.grader == "code"]
    checks, seeds = [], []
    for item in code_items:
        hidden_args, probe_args, seed, issues = _draw_hidden(item, domains)
        failures.extend(issues)
        checks.append(_CodeCheck.of(item, hidden_args, probe_args))
        seeds.append(seed)
    if domains is not None:
        code_ids = {item.id for item in code_items}
        failures.extend(SeedIssue(domains.source_file, item_id, "-", "not a code item")
                        for item_id in domains.items if item_id not in code_ids)
    with ThreadPoolExecutor(max_workers=GATE_WORKERS) as pool:
        outcomes = list(pool.map(_check_code, checks))
    for item, check, seed, outcome in zip(code_items, checks, seeds, outcomes, strict=True):
        failures.extend(outcome.failures)
        baseline, seconds = outcome.baseline, outcome.seconds
        report.references_run += 1
        report.test_cases_run += len(check.tests) + len(outcome.hidden)
        report.reference_seconds[item.id] = seconds
        report.mutants_run += outcome.mutants_run
        report.equivalent_mutants.extend((item.id, d) for d in outcome.equivalent)
        for description in outcome.survivors:
            report.survivors.append((item.id, description))
            failures.append(SeedIssue(item.source_file, item.id, "test",
                                      f"mutant '{description}' of the reference passes every test"))
        task = item.code_task
        task.tests = [t for t in task.tests if not t.hidden]
        start = len(task.tests)
        for offset, case in enumerate(outcome.hidden):
            task.tests.append(CodeTestCase(position=start + offset, args_json=json.dumps(case["args"]),
                                           expected_json=json.dumps(case["expected"]), hidden=True))
        task.hidden_seed = seed if outcome.hidden else None
        if outcome.hidden:
            report.hidden_cases[item.id] = len(outcome.hidden)
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
