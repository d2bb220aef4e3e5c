"""Counterfactual variants: rendering, determinism, template/target agreement, and the variant gate.

Targets of a variant are checked against an independent evaluation: the item's own target
expressions from the chapter TOML, evaluated over the numbers *read back from the rendered
question text* (not over the draw), so a template that shows one number while the target uses
another fails.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaling_book.content.loader import load_seed
from scaling_book.content.namespace import seed_namespace
from scaling_book.content.specs import ContentError, SeedError
from scaling_book.content.variant_checks import run_variant_gate
from scaling_book.content.variants import (
    book_number,
    load_context,
    original,
    variant,
    variant_set,
)
from scaling_book.paths import SEED_DIR

CONTEXT = load_context(SEED_DIR)
ORIGINALS = {spec.id: spec for spec in load_seed(SEED_DIR)}


@pytest.fixture(scope="module")
def context():
    return CONTEXT


@pytest.fixture(scope="module")
def originals():
    return ORIGINALS


def test_book_number_writes_numbers_as_the_book_does():
    assert book_number(1.97e14, 3, "sci") == "1.97e14"
    assert book_number(4.5e10, 3, "sci") == "4.5e10"
    assert book_number(9e10, 2, "sci") == "9e10"
    assert book_number(3.125e9, 4, "sci") == "3.125e9"
    assert book_number(1.2345e14, 3, "sci") == "1.23e14"
    assert book_number(5120, 6, "comma") == "5,120"
    assert book_number(1.75, 3, "plain") == "1.75"
    assert book_number(0.4567, 2, "plain") == "0.46"
    assert book_number(4096.0, 3, "int") == "4096"


def test_the_book_values_reproduce_every_parametric_original(context, originals):
    for item_id in context.parametric_ids():
        book = original(context, item_id).spec
        assert book.targets == originals[item_id].targets, item_id
        assert [[t.args, t.expected] for t in book.tests] == [[t.args, t.expected] for t in originals[item_id].tests]
        if not context.decls[item_id].replace:
            assert book.question == originals[item_id].question, item_id


def test_rendering_is_deterministic_per_item_and_seed(context):
    fresh = load_context(SEED_DIR)
    for item_id in context.parametric_ids():
        for seed in (1, 7):
            a, b = variant(context, item_id, seed), variant(fresh, item_id, seed)
            assert (a.inputs, a.spec.question, a.spec.targets) == (b.inputs, b.spec.question, b.spec.targets)
            assert [[t.args, t.expected] for t in a.spec.tests] == [[t.args, t.expected] for t in b.spec.tests]
        assert variant(context, item_id, 1).inputs != variant(context, item_id, 2).inputs


def _independent_targets(context, item_id: str, question: str, inputs: dict[str, str]) -> list[float]:
    """The item's target expressions over the values the question shows (read back from its text)."""
    decl = context.decls[item_id]
    file, _, raw = context.raw_items[item_id]
    namespace, _ = seed_namespace(SEED_DIR)
    numbers = {}
    shown_in_template = decl.placeholders()
    for name in shown_in_template:
        assert re.search(r"(?<![\w.])" + re.escape(inputs[name]) + r"(?![\w]|\.\d)", question), (item_id, name)
    for inp in decl.inputs:
        numbers[inp.name] = float(inputs[inp.name].replace(",", "")) * inp.scale
    for name, value in numbers.items():
        if "." in name:
            chip, field_name = name.split(".", 1)
            namespace[chip] = SimpleNamespace(**{**vars(namespace[chip]), field_name: value})
    literal_givens = {k: v for k, v in raw.get("given", {}).items() if isinstance(v, int | float)}
    for name, expression in decl.derived.items():
        numbers[name] = eval(expression, {"__builtins__": {}, **namespace}, {**literal_givens, **numbers})
        if name in shown_in_template:
            assert float(inputs[name].replace(",", "")) == pytest.approx(numbers[name], rel=1e-5), (item_id, name)
    scope = dict(namespace)
    for name, expression in raw.get("given", {}).items():
        if name in numbers:
            scope[name] = numbers[name]
        else:
            scope[name] = eval(str(expression), {"__builtins__": {"min": min, "max": max}}, scope)
    expressions = raw["targets"] if "targets" in raw else [raw["target"]]
    return [float(eval(str(e), {"__builtins__": {"min": min, "max": max}}, scope)) for e in expressions]




@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_template_and_targets_agree_for_every_parametric_item(data):
    """Property: for any item and seed, the rendered question shows every input, and the targets equal
    the item's own expressions over the shown numbers; no target is within tolerance of the original."""
    context, originals = CONTEXT, ORIGINALS
    qa = [i for i in context.parametric_ids() if originals[i].grader != "code"]
    item_id = data.draw(st.sampled_from(qa))
    seed = data.draw(st.integers(min_value=1, max_value=10**6))
    drawn = variant(context, item_id, seed)
    expected = _independent_targets(context, item_id, drawn.spec.question, drawn.inputs)
    assert drawn.spec.targets == pytest.approx(expected, rel=1e-12), item_id
    for value, book in zip(drawn.spec.targets, originals[item_id].targets, strict=True):
        assert math.isfinite(value) and abs(value - book) > originals[item_id].tolerance * abs(book)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_code_variants_carry_the_reference_solutions_values(data):
    """Property: every test case of a code variant is the reference solution's value on its arguments,
    recomputed here by importing the reference module afresh."""
    context, originals = CONTEXT, ORIGINALS
    code = [i for i in context.parametric_ids() if originals[i].grader == "code"]
    item_id = data.draw(st.sampled_from(code))
    drawn = variant(context, item_id, data.draw(st.integers(min_value=1, max_value=10**6)))
    spec = drawn.spec
    module: dict = {}
    exec(compile(spec.reference_source, "reference", "exec"), module)  # noqa: S102 - seed code
    for test in spec.tests:
        assert module[spec.reference_function](*test.args) == pytest.approx(test.expected, rel=1e-9)


def test_variant_sets_have_distinct_inputs(context):
    for item_id in context.parametric_ids()[:10]:
        drawn = variant_set(context, item_id, 20)
        assert len({tuple(sorted(v.inputs.items())) for v in drawn}) == 20


def test_the_variant_gate_passes_on_the_seed_and_reports_coverage(context, originals):
    report = run_variant_gate(context, list(originals.values()), k=5)
    train = [c for ch, c in report.coverage.items() if ch <= 8]
    assert sum(c.parametric for c in train) >= 0.8 * sum(c.arithmetic for c in train)
    assert set(report.variants) == set(context.parametric_ids())


def _seed_copy(tmp_path: Path, chapter1: str) -> Path:
    seed = tmp_path / "seed"
    shutil.copytree(SEED_DIR, seed)
    (seed / "variants" / "ch01.toml").write_text(chapter1)
    return seed


@pytest.mark.parametrize(("declaration", "field"), [
    ('["ch01-two-chip-critical-d"]\ninputs.flops_per_s = { text = "9.99e99", log_uniform = [1e14, 1e15] }\n',
     "inputs.flops_per_s.text"),
    ('["ch01-two-chip-critical-d"]\ninputs.flops_per_s = { text = "1.97e14", log_uniform = [1e15, 1e14] }\n',
     "inputs.flops_per_s.log_uniform"),
    ('["ch01-two-chip-critical-d"]\ninputs.flops_per_s = { log_uniform = [1e14, 1e15], hidden = true }\n',
     "inputs.flops_per_s.hidden"),
    ('["ch01-two-chip-critical-d"]\nreplace = [{ old = "1.97e14", new = "{{nothing}}" }]\n'
     'inputs.flops_per_s = { log_uniform = [1e14, 1e15] }\n', "replace"),
    ('["ch01-dot-product-intensity"]\ninputs.N = { int = [1, 9], book = 4 }\n', None),
])
def test_the_gate_refuses_a_bad_declaration_naming_file_item_and_field(tmp_path, declaration, field):
    seed = _seed_copy(tmp_path, declaration)
    with pytest.raises(ContentError) as raised:
        context = load_context(seed)
        run_variant_gate(context, load_seed(seed), k=3)
    issue = raised.value.issues[0]
    assert issue.file == "variants/ch01.toml" and issue.item_id.startswith("ch01-")
    assert issue.field == field


def test_an_unknown_item_id_is_refused(tmp_path):
    seed = _seed_copy(tmp_path, '["ch01-no-such-item"]\ninputs.x = { int = [1, 9] }\n')
    with pytest.raises(SeedError, match="ch01-no-such-item"):
        load_context(seed)
