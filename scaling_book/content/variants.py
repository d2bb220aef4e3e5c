"""Counterfactual variants: the same item asked with fresh numbers.

`variant(context, item_id, seed)` draws the item's declared inputs (`seed/variants/chNN.toml`, read
by `scaling_book.content.parametric`), writes each the way the book writes numbers (significant
figures, `1.97e14` style, display scale), puts them into the question template, and re-reads the
item through the seed loader with the *rendered* values bound, so targets, tolerances and code test
cases come from exactly the numbers the question shows. Code test cases whose arguments were drawn
get their expected values from the item's reference solution. `seed=None` renders the book's values,
which reproduces the original item (the variant gate checks that it does).

A draw is rejected (and the next attempt tried, deterministically) when a constraint fails, a
target is not finite or leaves the plausible range (sign of the original, within `max_ratio` of it),
a target lies within the tolerance of the original's (the book number would pay), or the question
prints a target. `Variant.rejected` counts those attempts per reason.
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from scaling_book.content.loader import read_item
from scaling_book.content.namespace import chapter_files, seed_namespace
from scaling_book.content.parametric import (
    PLACEHOLDER,
    VariantDecl,
    VariantInput,
    load_variant_decls,
)
from scaling_book.content.specs import ItemSpec, SeedError, SeedIssue

MAX_ATTEMPTS = 60
NUMBER_IN_TEXT = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?")


class VariantError(SeedError):
    """A declaration that cannot be rendered (names the variants file, the item and the field)."""


@dataclass
class Variant:
    """One rendered variant: `spec` is a complete item (id `<parent>@v<seed>`, or the parent's id for
    the original), `inputs` the drawn inputs as the question shows them."""

    parent_id: str
    seed: int | None
    inputs: dict[str, str]
    spec: ItemSpec
    rejected: Counter = field(default_factory=Counter)

    def info(self) -> dict[str, Any]:
        """What a variant row carries in `info`: parent id, seed, drawn inputs (JSON text)."""
        return {"parent_id": self.parent_id, "variant_seed": -1 if self.seed is None else self.seed,
                "variant_inputs": json.dumps(self.inputs, sort_keys=True)}


@dataclass
class VariantContext:
    """Everything rendering needs, read once from a seed folder."""

    seed_dir: Path
    namespace: dict[str, Any]
    references: dict[str, tuple[str, str | None]]
    raw_items: dict[str, tuple[str, int, dict[str, Any]]]
    decls: dict[str, VariantDecl]
    _reference_cache: dict[str, dict[str, Any]] = field(default_factory=dict)
    _originals: dict[str, Variant] = field(default_factory=dict)

    def parametric_ids(self) -> list[str]:
        return [i for i, d in self.decls.items() if d.parametric]

    def reference(self, spec: ItemSpec):
        """The reference function of a code item, imported in this process (trusted seed code)."""
        module = self._reference_cache.get(spec.reference_module)
        if module is None:
            module = {"__name__": f"scaling_book_reference_{spec.chapter:02d}"}
            exec(compile(spec.reference_source, spec.reference_module, "exec"), module)  # noqa: S102
            self._reference_cache[spec.reference_module] = module
        return module[spec.reference_function]


def load_context(seed_dir: Path) -> VariantContext:
    """Read `seed_dir` (chapters, hardware, derive, references, variants). Raises `SeedError`."""
    namespace, references = seed_namespace(seed_dir)
    raw_items: dict[str, tuple[str, int, dict[str, Any]]] = {}
    for path in chapter_files(seed_dir):
        raw = tomllib.loads(path.read_text())
        for item in raw.get("item", []):
            raw_items[item.get("id")] = (path.name, raw.get("chapter"), item)
    decls = load_variant_decls(seed_dir)
    unknown = [SeedIssue(d.file, i, None, "no such item in the chapter files") for i, d in decls.items()
               if i not in raw_items]
    if unknown:
        raise SeedError(unknown)
    return VariantContext(Path(seed_dir), namespace, references, raw_items, decls)


# ----------------------------------------------------------------------------------------------
# numbers as the book writes them
# ----------------------------------------------------------------------------------------------

def book_number(value: float, sig: int, style: str) -> str:
    """`value` with at most `sig` significant figures: `sci` -> "1.97e14", `plain` -> "0.45",
    `int` -> "4096" (rounded to an integer)."""
    if style == "int":
        return str(int(round(value)))
    if style == "comma":
        return f"{int(round(value)):,}"
    if style == "sci":
        mantissa, exponent = f"{value:.{sig - 1}e}".split("e")
        if "." in mantissa:
            mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{int(exponent)}"
    rounded = float(f"{value:.{sig}g}")
    text = f"{rounded:.{max(0, sig - 1 - math.floor(math.log10(abs(rounded))))}f}" if rounded else "0"
    return text.rstrip("0").rstrip(".") if "." in text else text


def shown_value(inp: VariantInput, shown: str) -> float | int:
    """The namespace value of an input shown as `shown` (display units times `scale`)."""
    value = float(shown.replace(",", "")) * inp.scale
    return int(value) if inp.style in ("int", "comma") and value == int(value) else value


def draw(inp: VariantInput, rng: random.Random) -> str:
    """One draw of `inp`, rendered."""
    if inp.distribution == "choices":
        return book_number(rng.choice(inp.choices), inp.sig, inp.style)
    if inp.distribution == "int":
        steps = int((inp.high - inp.low) // inp.step)
        return book_number(int(inp.low) + inp.step * rng.randint(0, steps), inp.sig, inp.style)
    if inp.distribution == "log_uniform":
        value = math.exp(rng.uniform(math.log(inp.low), math.log(inp.high)))
    else:
        value = rng.uniform(inp.low, inp.high)
    return book_number(value, inp.sig, inp.style)


def _literal(text: str) -> re.Pattern:
    return re.compile(r"(?<![\w.])" + re.escape(text) + r"(?![\w]|\.\d)")


def template(decl: VariantDecl, question: str) -> str:
    """The question with `{{name}}` placeholders: `replace` pairs first, then each input's `text`.
    Raises `VariantError` when an `old` or `text` does not occur in the question."""
    issues = []
    for old, new in decl.replace:
        if old not in question:
            issues.append(SeedIssue(decl.file, decl.item_id, "replace", f"{old!r} does not occur in the question"))
        question = question.replace(old, new)
    for inp in decl.inputs:
        if inp.text is None:
            continue
        pattern = _literal(inp.text)
        if not pattern.search(question):
            issues.append(SeedIssue(decl.file, decl.item_id, f"inputs.{inp.name}.text",
                                    f"{inp.text!r} does not occur in the question"))
        question = pattern.sub("{{" + inp.name + "}}", question)
    if issues:
        raise VariantError(issues)
    return question


def fill(text: str, shown: dict[str, str]) -> str:
    return PLACEHOLDER.sub(lambda m: shown[m.group(1)], text)


# ----------------------------------------------------------------------------------------------
# rendering
# ----------------------------------------------------------------------------------------------

def book_inputs(context: VariantContext, decl: VariantDecl) -> dict[str, str]:
    """The declared inputs at the book's values, rendered."""
    file, chapter, raw = context.raw_items[decl.item_id]
    spec, issues, namespace = read_item(file, chapter, raw, context.namespace, context.references)
    shown = {}
    for inp in decl.inputs:
        if inp.is_hardware:
            chip, name = inp.name.split(".", 1)
            value = getattr(context.namespace[chip], name)
        elif inp.name in namespace:
            value = namespace[inp.name]
        elif inp.book is not None:
            value = inp.book
        else:
            raise VariantError([SeedIssue(decl.file, decl.item_id, f"inputs.{inp.name}",
                                          "not a given of the item: state its `book` value")])
        shown[inp.name] = book_number(value / inp.scale, inp.sig, inp.style)
    return shown


def render(context: VariantContext, decl: VariantDecl, shown: dict[str, str],
           test_args: dict[tuple[int, int], str] | None = None) -> tuple[ItemSpec, dict[str, Any]]:
    """The item with `shown` inputs bound (and drawn code-test arguments `{(test, position): shown}`):
    (spec, the item's namespace with `targets`). Raises `VariantError`."""
    file, chapter, raw = context.raw_items[decl.item_id]
    raw = copy.deepcopy(raw)
    namespace = dict(context.namespace)
    given = dict(raw.get("given", {}))
    for inp in decl.inputs:
        value = shown_value(inp, shown[inp.name])
        if inp.is_hardware:
            chip, name = inp.name.split(".", 1)
            namespace[chip] = SimpleNamespace(**{**vars(namespace[chip]), name: value})
        else:
            given[inp.name] = value
    if decl.derived:
        values = {**{k: v for k, v in given.items() if isinstance(v, int | float)},
                  **{i.name: shown_value(i, shown[i.name]) for i in decl.inputs if not i.is_hardware}}
        shown = dict(shown)
        for name, expression in decl.derived.items():
            value = eval(expression, {"__builtins__": {}, **namespace}, values)  # noqa: S307
            values[name] = given[name] = value
            shown[name] = book_number(value, 6, "int" if float(value).is_integer() else "sci")
    if given:
        raw["given"] = given
    raw["question"] = fill(template(decl, raw["question"]), shown)
    spec, issues, item_namespace = read_item(file, chapter, raw, namespace, context.references)
    if issues or spec is None:
        raise VariantError([SeedIssue(f"variants/ch{chapter:02d}.toml", decl.item_id, i.field, i.message)
                            for i in issues])
    if test_args:
        reference = context.reference(spec)
        for (position, arg), text in test_args.items():
            inp = decl.test_args[arg]
            spec.tests[position].args[arg] = shown_value(inp, text)
        for position in sorted({p for p, _ in test_args}):
            test = spec.tests[position]
            test.expected = reference(*copy.deepcopy(test.args))
    return spec, {**item_namespace, "targets": spec.targets, "_shown": shown}


def _printed(question: str, targets: list[float], tolerance: float) -> bool:
    for match in NUMBER_IN_TEXT.finditer(question):
        number = float(match.group().replace(",", ""))
        if any(t and abs(number - t) <= tolerance * abs(t) for t in targets):
            return True
    return False


def _rejection(context: VariantContext, decl: VariantDecl, spec: ItemSpec, namespace: dict[str, Any],
               original: ItemSpec) -> str | None:
    """Why a rendered draw is refused, or None."""
    for expression in decl.constraints:
        if not eval(expression, {"__builtins__": {"abs": abs, "min": min, "max": max}}, namespace):  # noqa: S307
            return f"constraint {expression}"
    tolerance = spec.tolerance or 0.0
    for value, book in zip(spec.targets, original.targets, strict=True):
        if not math.isfinite(value) or (value > 0) != (book > 0) or value == 0:
            return "target outside the plausible range"
        if not 1 / decl.max_ratio <= value / book <= decl.max_ratio:
            return "target outside the plausible range"
        if abs(value - book) <= tolerance * abs(book):
            return "target within tolerance of the original"
    if spec.targets and _printed(spec.question, spec.targets, max(tolerance, 1e-9)) \
            and not _printed(original.question, original.targets, max(tolerance, 1e-9)):
        return "question prints the answer"
    if spec.grader == "code":
        try:
            json.dumps([t.expected for t in spec.tests], allow_nan=False)
        except (TypeError, ValueError):
            return "reference value not finite"
        if all(_same(t.expected, o.expected, original.tolerance) for t, o in zip(spec.tests, original.tests)):
            return "tests equal the original"
        from scaling_book.grading.code import knowledge_free_baseline

        tests = [{"args": t.args, "expected": t.expected} for t in spec.tests]
        if knowledge_free_baseline(tests, spec.code_compare, spec.tolerance)[0] >= 1.0:
            return "a knowledge-free constant passes every test"
    return None


def _same(a: Any, b: Any, tolerance: float | None) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y, tolerance) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int | float) or not isinstance(b, int | float):
        return a == b
    return abs(a - b) <= (tolerance or 1e-9) * abs(b)


def original(context: VariantContext, item_id: str) -> Variant:
    """The variant with the book's values (the original item, rendered through the template)."""
    if item_id not in context._originals:
        decl = context.decls[item_id]
        shown = book_inputs(context, decl)
        spec, _ = render(context, decl, shown)
        context._originals[item_id] = Variant(item_id, None, shown, spec)
    return copy.deepcopy(context._originals[item_id])


def variant(context: VariantContext, item_id: str, seed: int | None) -> Variant:
    """The variant of `item_id` for `seed` (None: the original). Deterministic per (item, seed).
    Raises `VariantError` when no draw is accepted in `MAX_ATTEMPTS` attempts."""
    if seed is None:
        return original(context, item_id)
    decl = context.decls[item_id]
    base = original(context, item_id).spec
    rejected: Counter = Counter()
    for attempt in range(MAX_ATTEMPTS):
        rng = random.Random(f"{item_id}/{seed}/{attempt}")
        shown = {inp.name: draw(inp, rng) for inp in decl.inputs}
        drawn_args = {(t, arg): draw(inp, rng) for t in range(len(base.tests)) for arg, inp in decl.test_args.items()}
        try:
            spec, namespace = render(context, decl, shown, drawn_args)
        except (VariantError, ArithmeticError, ValueError, TypeError) as exc:
            rejected[f"not evaluable: {type(exc).__name__}"] += 1
            continue
        reason = _rejection(context, decl, spec, namespace, base)
        if reason is not None:
            rejected[reason] += 1
            continue
        spec.id = f"{item_id}@v{seed}"
        inputs = dict(namespace["_shown"]) | {f"test{t}.arg{a}": text for (t, a), text in drawn_args.items()}
        return Variant(item_id, seed, inputs, spec, rejected)
    raise VariantError([SeedIssue(decl.file, item_id, None,
                                  f"seed {seed}: no accepted draw in {MAX_ATTEMPTS} attempts ({dict(rejected)})")])


def variant_set(context: VariantContext, item_id: str, k: int, first_seed: int = 1) -> list[Variant]:
    """`k` variants of one item with distinct inputs and questions: seeds `first_seed`, `first_seed+1`...
    skipping a seed whose draw collides with an earlier one (counted as rejected on the next variant)."""
    out: list[Variant] = []
    seen: set[str] = set()
    collisions = 0
    seed = first_seed
    while len(out) < k:
        drawn = variant(context, item_id, seed)
        key = json.dumps(drawn.inputs, sort_keys=True)
        seed += 1
        if key in seen or _rendered_key(drawn.spec) in {_rendered_key(v.spec) for v in out}:
            collisions += 1
            if collisions > 10 * k:
                decl = context.decls[item_id]
                raise VariantError([SeedIssue(decl.file, item_id, None, f"{collisions} colliding draws")])
            continue
        if collisions:
            drawn.rejected["collides with an earlier variant"] += collisions
            collisions = 0
        seen.add(key)
        out.append(drawn)
    return out


def _rendered_key(spec: ItemSpec) -> str:
    """What a model sees and a grader uses: two variants collide when these are equal."""
    return json.dumps([spec.question, [[t.args, t.expected] for t in spec.tests]], default=str)


def epoch_seed(epoch: int, index: int) -> int:
    """The variant seed of draw `index` in training epoch `epoch` (disjoint from the export's seeds)."""
    return 1_000_000 * (epoch + 1) + index
