"""Property-based precision suite (hypothesis) over the real numeric items of the export.

For a random item, a random target position and its correct value: random *correct* renderings (any
unit of the item's dimension, every scientific-notation form, markup, labels, approximation markers)
must pay full credit; random *wrong* wrappings (negation and hedge words, comparison operators,
function names, a second operand, a unit of another dimension, an unknown unit word, a unit whose
case changes its magnitude) must score 0 on that position. Fixed seed (derandomized), no deadline.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scaling_book.grading import grade
from scaling_book.grading.units import conversion

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Units an answer might be written in; each item keeps those of its own dimension.
UNIT_POOL = [
    "s", "ms", "us", "µs", "ns", "seconds", "milliseconds", "microseconds", "min", "minutes", "hours", "days",
    "B", "kB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "bytes", "bits", "b", "Mb", "Gb",
    "FLOPs", "kFLOPs", "GFLOPs", "TFLOPs", "PFLOPs", "EFLOPs", "FLOPs/s", "TFLOPs/s", "PFLOPs/s",
    "GB/s", "TB/s", "MB/s", "Gb/s", "GiB/s", "FLOPs/byte", "kFLOPs/byte", "FLOPs/kB", "FLOPs/bit",
    "tokens", "tokens/s/chip", "tokens per second per chip", "tokens/ms/chip", "tokens/chip",
    "FLOPs/token", "GFLOPs/token", "FLOPs/cycle", "kFLOPs/cycle", "GHz", "MHz", "Hz",
    "params", "parameters", "chips", "GPUs", "pods", "sequences", "elements", "FLOPs/USD", "FLOPs per dollar",
    "bytes/chip", "GB/chip", "OPs/byte", "ways", "ratio", "%", "ratio",
]
#: Unit words that are no unit at all (or change the claim).
UNKNOWN_WORDS = ["bananas", "or more", "or less", "at most", "faster", "slower", "max", "approx", "ish", "plus",
                 "minus", "times", "squared", "per GPU per GPU per banana"]
NEGATIONS = ["not {v}", "never {v}", "no {v}", "> {v}", "< {v}", ">= {v}", "<= {v}", "≥ {v}", "≤ {v}", "!= {v}",
             "at least {v}", "at most {v}", "more than {v}", "less than {v}", "over {v}", "under {v}",
             "nearly {v}", "almost {v}", "just under {v}", "up to {v}", "sqrt({v})", "log({v})", "exp({v})",
             "max({v}, 1)", "min({v}, 1)", "abs({v})", "\\sqrt{{{v}}}", "twice {v}", "half of {v}", "-{v}",
             "{v} * 2", "{v} + 1", "{v} - 1", "{v} / 3", "2 × {v}", "{v} × 3", "{v}^2", "{v}!", "{v}?",
             "{v} or {w}", "{v} (or {w})", "{v}-{w}", "{v} to {w}", "x < {v}", "not = {v}", "{v} or more",
             "\\frac{{1}}{{3}} \\times {v}", "1/3 × {v}", "{v} (i.e. {w})",
             "x (at least) = {v}", "at_least = {v}", "upper_bound: {v}", "Wrong: {v}", "Maybe: {v}",
             "NOT_{w}: {v}", "~~{v}~~", "{v} per"]


def _rows(request) -> list[dict]:
    import pyarrow.parquet as pq

    files = sorted((REPO_ROOT / "build" / "export" / "all").glob("*.parquet"))
    if files:
        return [row for f in files for row in pq.read_table(f).to_pylist()]
    return request.getfixturevalue("exported_rows")


@pytest.fixture(scope="module")
def numeric_infos(request) -> list[dict]:
    return [r["info"] for r in _rows(request) if r["info"]["grader"] in ("numeric", "numeric_multi")]


def _compatible(declared: str) -> list[tuple[str, float]]:
    out = [("", 1.0)]
    for u in dict.fromkeys(UNIT_POOL + [declared]):
        c = conversion(u, declared)
        if c.factor is not None:
            out.append((u, c.factor))
    return out


def _other_dimension(declared: str) -> list[str]:
    return [u for u in dict.fromkeys(UNIT_POOL) if "wrong dimension" in conversion(u, declared).reason]


def _case_flips(declared: str) -> list[str]:
    """Units written like ``declared`` with one letter's case flipped, that still parse but mean a
    different magnitude (GB/s -> Gb/s, ms -> Ms, MiB -> Mib)."""
    out = []
    for i, ch in enumerate(declared):
        if ch.isalpha():
            flipped = declared[:i] + ch.swapcase() + declared[i + 1:]
            c = conversion(flipped, declared)
            if c.factor is not None and not (0.5 <= c.factor <= 2.0):
                out.append(flipped)
    return out


def _render(value: float, form: int) -> str:
    mantissa, exp = f"{value:.12e}".split("e")
    exp_i = int(exp)
    m = mantissa.rstrip("0").rstrip(".")
    return [
        f"{value:.12g}",
        f"{m}e{exp_i}",
        f"{m}E{exp_i:+d}",
        f"{m}×10^{exp_i}",
        f"{m} x 10^{{{exp_i}}}",
        f"{m} \\times 10^{{{exp_i}}}",
        f"{m}*10**{exp_i}",
        f"{m} \\cdot 10^{{{exp_i}}}",
    ][form]


WRAPS = ["{}", "**{}**", "\\boxed{{{}}}", "${}$", "`{}`", "~{}", "≈ {}", "about {}", "Answer: {}", "x = {}",
         "approximately {}", "\\text{{{}}}", "{}."]


def _answer(info: dict, position: int, part: str) -> str:
    """The answer block with ``part`` at ``position`` and the other targets written plainly."""
    targets = info["targets"]
    parts = [f"{t:.12g}" for t in targets]
    parts[position] = part
    return "<answer>" + "; ".join(parts) + "</answer>"


def _credit_ceiling(info: dict) -> float:
    """Most an answer with one position wrong can score: (n - 1) / n."""
    n = len(info["targets"])
    return (n - 1) / n


SETTINGS = settings(max_examples=300, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@SETTINGS
@given(data=st.data())
def test_correct_renderings_pay(numeric_infos, data):
    info = data.draw(st.sampled_from(numeric_infos), label="item")
    position = data.draw(st.integers(0, len(info["targets"]) - 1), label="position")
    declared = info["units"][position]
    unit, factor = data.draw(st.sampled_from(_compatible(declared)), label="unit")
    value = info["targets"][position] / factor
    number = _render(value, data.draw(st.integers(0, 7), label="form"))
    text = f"{number} {unit}".strip() if unit != "%" else f"{number}%"
    text = data.draw(st.sampled_from(WRAPS), label="wrap").format(text)
    g = grade(info, _answer(info, position, text))
    assert g.correctness == 1.0, (info["item_id"], text, g.reason)


@SETTINGS
@given(data=st.data())
def test_wrong_wrappings_score_zero(numeric_infos, data):
    info = data.draw(st.sampled_from(numeric_infos), label="item")
    position = data.draw(st.integers(0, len(info["targets"]) - 1), label="position")
    declared = info["units"][position]
    target = info["targets"][position]
    v = f"{target:.12g}"
    w = f"{target * 1.37:.12g}"
    kind = data.draw(st.sampled_from(["negation", "dimension", "unknown", "case"]), label="kind")
    if kind == "negation":
        text = data.draw(st.sampled_from(NEGATIONS), label="wrapping").format(v=v, w=w)
    elif kind == "dimension":
        others = _other_dimension(declared)
        text = f"{v} {data.draw(st.sampled_from(others), label='unit')}"
    elif kind == "unknown":
        text = f"{v} {data.draw(st.sampled_from(UNKNOWN_WORDS), label='word')}"
    else:
        flips = _case_flips(declared)
        if not flips:
            return
        text = f"{v} {data.draw(st.sampled_from(flips), label='unit')}"
    g = grade(info, _answer(info, position, text))
    assert g.correctness <= _credit_ceiling(info) + 1e-12 and not g.exact, (info["item_id"], text, g.reason)
    if len(info["targets"]) == 1:
        assert g.correctness == 0.0, (info["item_id"], text, g.reason)
