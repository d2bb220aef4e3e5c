"""Reward precision per grader: hostile inputs tried, false positives (must be 0), false negatives.

    uv run python benchmarks/precision.py [--export build/export] [--no-code-execution]

Over every item of the export: hostile answers that are wrong by construction (the right value or
formula wrapped in a negation, a comparison, a function, a second operand, a unit of another dimension,
an unknown or case-changed unit; a hedged or negated letter; a non-smooth or perturbed formula; a code
block that does not define the function) and correct answers written in the documented forms. A false
positive is a hostile answer that earns any credit for the wrapped part; a false negative is a correct
answer that does not earn full credit (its reasons are tallied). Needs an export (`scaling-book build`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from scaling_book.grading import grade  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "tests"))
from test_precision_properties import (  # noqa: E402
    NEGATIONS,
    UNKNOWN_WORDS,
    WRAPS,
    _case_flips,
    _compatible,
    _other_dimension,
    _render,
)


class Tally:
    def __init__(self) -> None:
        self.hostile = self.fp = self.correct = self.fn = 0
        self.fp_examples: list[str] = []
        self.fn_reasons: Counter[str] = Counter()

    def hostile_result(self, paid: bool, example: str) -> None:
        self.hostile += 1
        if paid:
            self.fp += 1
            self.fp_examples.append(example)

    def correct_result(self, full: bool, reason: str) -> None:
        self.correct += 1
        if not full:
            self.fn += 1
            self.fn_reasons[re.sub(r"'[^']*'", "'…'", reason)[:110]] += 1


def _answer(targets: list[float], position: int, part: str) -> str:
    parts = [f"{t:.12g}" for t in targets]
    parts[position] = part
    return "<answer>" + "; ".join(parts) + "</answer>"


def bench_numeric(infos: list[dict], tally: Tally) -> None:
    for info in infos:
        targets, n = info["targets"], len(info["targets"])
        ceiling = (n - 1) / n + 1e-12
        for pos, target in enumerate(targets):
            declared = info["units"][pos]
            v, w = f"{target:.12g}", f"{target * 1.37:.12g}"
            hostile = [t.format(v=v, w=w) for t in NEGATIONS]
            hostile += [f"{v} {u}" for u in _other_dimension(declared)]
            hostile += [f"{v} {u}" for u in UNKNOWN_WORDS]
            hostile += [f"{v} {u}" for u in _case_flips(declared)]
            for text in hostile:
                g = grade(info, _answer(targets, pos, text))
                tally.hostile_result(g.correctness > ceiling or g.exact, f"{info['item_id']}: {text!r} -> {g.reason}")
            for unit, factor in _compatible(declared):
                for form in range(8):
                    number = _render(target / factor, form)
                    text = f"{number}%" if unit == "%" else f"{number} {unit}".strip()
                    for wrap in (WRAPS[form % len(WRAPS)], WRAPS[(form + 5) % len(WRAPS)]):
                        g = grade(info, _answer(targets, pos, wrap.format(text)))
                        tally.correct_result(g.correctness == 1.0, g.reason)


def bench_mcq(infos: list[dict], tally: Tally) -> None:
    for info in infos:
        gold = info["answer_letter"]
        letters = sorted(json.loads(info["choices"]))
        other = next(x for x in letters if x != gold)
        hostile = [f"not {gold}", f"{gold} or {other}", f"{other} or {gold}", f"{gold}/{other}", f"{gold} and {other}",
                   f"either {gold} or {other}", ", ".join(letters), f"{gold}?", f"not {other}, not {gold}",
                   f"the answer is {gold} or {other}", f"{gold}. x, {other}. y", "all of the above",
                   f"{gold} ٣", f"Option {gold} is wrong.", f"Option {gold} is incorrect; {other}",
                   f"{gold}? No, {other}.", f"{gold} — or {other}", f"{gold}.{other}", f"{gold}...{other}",
                   f"Option {other}, option {gold}", f"The answer is {gold}, unless it's {other}", f"rule out {gold}"]
        for text in hostile:
            g = grade(info, f"<answer>{text}</answer>")
            tally.hostile_result(g.correctness > 0, f"{info['item_id']}: {text!r} -> {g.reason}")
        full_width = chr(ord(gold) - ord("A") + ord("Ａ"))
        for text in [gold, f"({gold})", f"**{gold}**", f"\\boxed{{{gold}}}", f"Answer: {gold}",
                     f"The answer is {gold}", f"{gold}.", full_width, f"Option {gold}",
                     f"{gold}) {json.loads(info['choices'])[gold]}"]:
            g = grade(info, f"<answer>{text}</answer>")
            tally.correct_result(g.correctness == 1.0, g.reason)


_REL = re.compile(r"^(.*?)(<=|>=|<|>)(.*)$")


def _declares_loose(info: dict, op: str) -> bool:
    """Whether the item itself lists an equivalent with the other strictness (then it is not hostile)."""
    other = {"<": "<=", ">": ">=", "<=": "<", ">=": ">"}[op]
    return any(re.search(rf"(?<![<>]){re.escape(other)}(?!=)", e) for e in info["formula_equivalents"])


def bench_formula(infos: list[dict], tally: Tally) -> None:
    for info in infos:
        gold, symbols = info["formula_answer"], info["formula_symbols"]
        s0 = symbols[0]
        rel = _REL.match(gold)
        if rel:
            lhs, op, rhs = (x.strip() for x in rel.groups())
            flipped = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}[op]
            loose = {"<": "<=", ">": ">=", "<=": "<", ">=": ">"}[op]
            hostile = [f"min({lhs}, 1e6) {op} {rhs}", f"{lhs} + {s0}/1e12 {op} {rhs}", f"{lhs} {flipped} {rhs}",
                       *([f"{lhs} {loose} {rhs}"] if not _declares_loose(info, op) else []), f"abs({lhs}) {op} {rhs}", f"({lhs})*(1 + 1e-9) {op} {rhs}",
                       f"{lhs} {op} max({rhs}, 1)", f"floor({lhs}) {op} {rhs}", f"{rhs} {op} {lhs}",
                       f"{lhs} + exp(-1000*{s0}) {op} {rhs}", f"{lhs} {op} ({rhs})*1.0000000000000000000001",
                       f"{lhs} - ({rhs}) {op} exp(-1000*{s0})"]
        else:
            hostile = [f"min({gold}, 1e6)", f"max({gold}, 1)", f"abs({gold})", f"{gold} + {s0}/1e12",
                       f"({gold})*(1 + 1e-9)", f"{s0} = {gold}", f"floor({gold})", f"ceiling({gold})",
                       f"{gold} + max(0, {s0} - 5000)", f"({gold}) + sqrt({s0})/1e15", f"2*({gold})",
                       f"({gold})**(1.0000001)", f"({gold})*{s0}/{s0}**1.000001", f"({gold})*(1 + log({s0})/1e12)",
                       f"{gold} + exp(-1000*{s0})", f"({gold})*(1 + 1/(1 + exp(1000*{s0})))",
                       f"({gold})**(1 + 1e-25)", f"({gold})*1.0000000000000000000001"]
        for text in hostile:
            g = grade(info, f"<answer>{text}</answer>")
            tally.hostile_result(g.correctness > 0, f"{info['item_id']}: {text!r} -> {g.reason}")
        latex = "$" + re.sub(r"(?<!\*)\*(?!\*)", r" \\cdot ", gold) + "$"
        for text in [gold, *info["formula_equivalents"], gold.replace(" ", ""), latex,
                     gold.replace("**", "^"), f"answer = {gold}" if not rel else gold]:
            g = grade(info, f"<answer>{text}</answer>")
            tally.correct_result(g.correctness == 1.0, g.reason)


def bench_code(infos: list[dict], tally: Tally, execute: bool) -> None:
    for info in infos:
        fn = info["code_function"]
        hostile_format = ["pass", f"def not_{fn}(*args):\n    return 0", f"class K:\n    def {fn}(self):\n        return 0",
                          f"{fn} = 0", f"def {fn}(*args:\n    return 0", f"if False:\n    def {fn}(*a):\n        return 0"]
        for body in hostile_format:
            g = grade(info, f"```python\n{body}\n```", allow_code_execution=False)
            tally.hostile_result(g.formatted, f"{info['item_id']}: format {body!r}")
        if execute:
            for constant in ("0", "1"):
                g = grade(info, f"```python\ndef {fn}(*args):\n    return {constant}\n```")
                tally.hostile_result(g.correctness > 0, f"{info['item_id']}: return {constant} -> {g.reason}")
        g = grade(info, f"```python\ndef {fn}(*args):\n    return 0\n```", allow_code_execution=False)
        tally.correct_result(g.formatted, "well-formed submission not counted as formatted")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", type=Path, default=REPO_ROOT / "build" / "export")
    parser.add_argument("--no-code-execution", action="store_true")
    args = parser.parse_args()
    import pyarrow.parquet as pq

    files = sorted((args.export / "all").glob("*.parquet"))
    if not files:
        sys.exit(f"no export under {args.export}: run `uv run scaling-book build` first")
    infos = [row["info"] for f in files for row in pq.read_table(f).to_pylist()]
    by = {k: [i for i in infos if i["grader"] == k] for k in ("numeric", "numeric_multi", "mcq", "formula", "code")}
    tallies = {k: Tally() for k in by}
    bench_numeric(by["numeric"], tallies["numeric"])
    bench_numeric(by["numeric_multi"], tallies["numeric_multi"])
    bench_mcq(by["mcq"], tallies["mcq"])
    bench_formula(by["formula"], tallies["formula"])
    bench_code(by["code"], tallies["code"], execute=not args.no_code_execution)
    print(f"{'grader':14s} {'items':>5s} {'hostile':>8s} {'false +':>8s} {'correct':>8s} {'false -':>8s}")
    for k, t in tallies.items():
        print(f"{k:14s} {len(by[k]):5d} {t.hostile:8d} {t.fp:8d} {t.correct:8d} {t.fn:8d}")
    for k, t in tallies.items():
        for ex in t.fp_examples[:10]:
            print(f"  FALSE POSITIVE {k}: {ex[:200]}")
        for reason, count in t.fn_reasons.most_common(8):
            print(f"  false negative {k} x{count}: {reason}")
    sys.exit(1 if any(t.fp for t in tallies.values()) else 0)


if __name__ == "__main__":
    main()
