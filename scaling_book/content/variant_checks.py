"""The variant half of the validation gate.

For every parametric item (`seed/variants/chNN.toml`), `run_variant_gate` checks:

1. the declaration fits the item: only numeric, numeric_multi and code items vary; every shown
   input has a placeholder in the question template; only a code item may hide an input (it then
   changes the test cases, not the question);
2. rendering the book's values reproduces the original: the same targets and test cases, and the
   same question when the template is made only of input `text`s;
3. K variants (fixed seeds 1..) render, each with finite targets of the original's sign within the
   declared ratio, every target more than the tolerance away from the original, no target printed in
   the question, and no two variants equal;
4. every code item's reference solution, run in the sandbox like a submission, passes every variant's
   test cases.

It raises `GateError` naming the variants file, the item and the field of every failure, and
reports per item how many draws were rejected (and why) and the parametric coverage per chapter.
"""

from __future__ import annotations

import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from scaling_book.content.gate import GATE_WORKERS, REFERENCE_TIMEOUT_S, GateError
from scaling_book.content.parametric import PLACEHOLDER, VariantDecl
from scaling_book.content.specs import ItemSpec, SeedIssue
from scaling_book.content.variants import (
    Variant,
    VariantContext,
    VariantError,
    original,
    template,
    variant_set,
)

GATE_VARIANTS = 20
ARITHMETIC_GRADERS = ("numeric", "numeric_multi", "code")


@dataclass
class ChapterCoverage:
    """Arithmetic items (numeric, numeric_multi, code) of a chapter, how many are parametric, and how
    many are declared fixed (with a reason)."""

    arithmetic: int = 0
    parametric: int = 0
    fixed: int = 0

    @property
    def share(self) -> float:
        return self.parametric / self.arithmetic if self.arithmetic else 0.0


@dataclass
class VariantGateReport:
    k: int
    variants: dict[str, list[Variant]] = field(default_factory=dict)
    rejected: dict[str, Counter] = field(default_factory=dict)
    coverage: dict[int, ChapterCoverage] = field(default_factory=dict)
    references_run: int = 0

    def rejected_total(self, item_id: str) -> int:
        return sum(self.rejected.get(item_id, Counter()).values())


def coverage(context: VariantContext, specs: list[ItemSpec]) -> dict[int, ChapterCoverage]:
    """Parametric coverage of the arithmetic items per chapter."""
    out: dict[int, ChapterCoverage] = {}
    for spec in specs:
        if spec.grader not in ARITHMETIC_GRADERS:
            continue
        entry = out.setdefault(spec.chapter, ChapterCoverage())
        entry.arithmetic += 1
        decl = context.decls.get(spec.id)
        if decl is not None:
            entry.parametric += decl.parametric
            entry.fixed += not decl.parametric
    return dict(sorted(out.items()))


def _check_declaration(context: VariantContext, decl: VariantDecl, spec: ItemSpec) -> list[SeedIssue]:
    def issue(field_name, message):
        return SeedIssue(decl.file, decl.item_id, field_name, message)

    if spec.grader not in ARITHMETIC_GRADERS:
        return [issue(None, f"a {spec.grader} item stays fixed; only numeric, numeric_multi and code items vary")]
    issues = []
    try:
        text = template(decl, spec.question)
    except VariantError as exc:
        return exc.issues
    used = set(PLACEHOLDER.findall(text))
    for name in list(used):
        if name in decl.derived:
            used |= set(re.findall(r"[A-Za-z_]\w*", decl.derived[name]))
    for inp in decl.inputs:
        if inp.hidden and spec.grader != "code":
            issues.append(issue(f"inputs.{inp.name}.hidden", "only a code item may hide a varying input"))
        if not inp.hidden and inp.name not in used:
            issues.append(issue(f"inputs.{inp.name}", "varies but the question does not show it (give `text` "
                                                      "or a `replace` placeholder)"))
    if decl.test_args and spec.grader != "code":
        issues.append(issue("test_args", "only a code item has test arguments"))
    if issues:
        return issues
    book = original(context, decl.item_id).spec
    if book.targets != spec.targets:
        issues.append(issue("inputs", f"the book's values give targets {book.targets}, the item {spec.targets}"))
    if [[t.args, t.expected] for t in book.tests] != [[t.args, t.expected] for t in spec.tests]:
        issues.append(issue("inputs", "the book's values do not reproduce the item's test cases"))
    if not decl.replace and book.question != spec.question:
        issues.append(issue("inputs", "the book's values, rendered, do not reproduce the question (check `sig`, "
                                      "`style` and `scale`)"))
    return issues


def _check_code(spec: ItemSpec, variants: list[Variant], decl: VariantDecl) -> list[SeedIssue]:
    from scaling_book.grading.code import test_passes
    from scaling_book.grading.sandbox import run_function

    tests = [{"args": t.args, "expected": t.expected} for v in variants for t in v.spec.tests]
    result = run_function(spec.reference_source, spec.reference_function, [t["args"] for t in tests],
                          REFERENCE_TIMEOUT_S)
    if result.status != "ok":
        return [SeedIssue(decl.file, decl.item_id, "reference", f"did not run on the variants: {result.status}: "
                                                                 f"{result.detail}")]
    passes = test_passes(result.values, tests, spec.code_compare, spec.tolerance)
    failed = [t for t, ok in zip(tests, passes, strict=False) if not ok]
    if failed or len(passes) < len(tests):
        return [SeedIssue(decl.file, decl.item_id, "test", f"the reference fails {len(failed)} of {len(tests)} "
                                                            f"variant test cases, e.g. {failed[:1]}")]
    return []


def run_variant_gate(context: VariantContext, specs: list[ItemSpec], k: int = GATE_VARIANTS) -> VariantGateReport:
    """Render and check `k` variants of every parametric item. Raises `GateError`."""
    by_id = {s.id: s for s in specs}
    report = VariantGateReport(k=k, coverage=coverage(context, specs))
    failures: list[SeedIssue] = []
    code_jobs = []
    for item_id, decl in context.decls.items():
        spec = by_id.get(item_id)
        if spec is None:
            failures.append(SeedIssue(decl.file, item_id, None, "no such item"))
            continue
        if not decl.parametric:
            if spec.grader not in ARITHMETIC_GRADERS:
                failures.append(SeedIssue(decl.file, item_id, "fixed", "only arithmetic items need a `fixed` reason"))
            continue
        issues = _check_declaration(context, decl, spec)
        if issues:
            failures.extend(issues)
            continue
        try:
            drawn = variant_set(context, item_id, k)
        except VariantError as exc:
            failures.extend(exc.issues)
            continue
        report.variants[item_id] = drawn
        report.rejected[item_id] = sum((v.rejected for v in drawn), Counter())
        if spec.grader == "code":
            code_jobs.append((spec, drawn, decl))
    with ThreadPoolExecutor(max_workers=GATE_WORKERS) as pool:
        for issues in pool.map(lambda job: _check_code(*job), code_jobs):
            failures.extend(issues)
            report.references_run += 1
    if failures:
        raise GateError(failures)
    return report


def definition_row(context: VariantContext, decl: VariantDecl):
    """The store rows of one parametric declaration (`VariantDefinition` with its inputs and placeholders)."""
    import json

    from scaling_book.store.models import (
        VariantDefinition,
        VariantInputRow,
        VariantPlaceholder,
    )

    _, _, raw = context.raw_items[decl.item_id]
    text = template(decl, raw["question"].strip())
    row = VariantDefinition(item_id=decl.item_id, source_file=decl.file, template=text,
                            constraints_json=json.dumps(decl.constraints))
    for inp in [*decl.inputs, *(inp for inp in decl.test_args.values())]:
        row.inputs.append(VariantInputRow(
            name=inp.name, distribution=inp.distribution, low=inp.low, high=inp.high,
            choices_json=json.dumps(list(inp.choices)) if inp.distribution == "choices" else None,
            sig=inp.sig, style=inp.style, scale=inp.scale, hidden=int(inp.hidden)))
    for name, expression in decl.derived.items():
        row.inputs.append(VariantInputRow(name=name, distribution="derived", expression=expression, sig=6,
                                          style="int", scale=1.0, hidden=0))
    row.placeholders = [VariantPlaceholder(name=name) for name in sorted(set(PLACEHOLDER.findall(text)))]
    return row


def store_definitions(session, context: VariantContext) -> None:
    """Replace the store's variant definitions with the parametric declarations of `context`, in the
    caller's transaction. Raises `GateError` naming the file and item of a row the store refuses."""
    from sqlalchemy import delete
    from sqlalchemy.exc import IntegrityError

    from scaling_book.store.models import (
        VariantDefinition,
        VariantInputRow,
        VariantPlaceholder,
    )

    for table in (VariantPlaceholder, VariantInputRow, VariantDefinition):
        session.execute(delete(table))
    refused = []
    for item_id in context.parametric_ids():
        decl = context.decls[item_id]
        savepoint = session.begin_nested()
        try:
            row = definition_row(context, decl)
            session.add(row)
            session.flush()
            savepoint.commit()
        except IntegrityError as error:
            savepoint.rollback()
            refused.append(SeedIssue(decl.file, item_id, None, f"refused by the store: {error.orig}"))
    if refused:
        raise GateError(refused)
