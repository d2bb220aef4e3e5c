"""Reward precision against the red-team's false positives (grader version 2.1.0), on the real items.

Every hostile input the red-team filed scores its right value: 0. Each family is fixed as a family
(mcq: two letters anywhere, or a rejecting/hedging word; numeric: a label that is not a plain name, a
struck-through value; formula: an exp/log/non-integer power the gold does not use, unproved, and float
literals longer than a double; a grader crash earns no format reward), so a few siblings of each filed
input are checked too, and the documented correct forms must still pay. Items are read from the export
as built (no overrides): ``ch12-gb200-nvl72-dp-batch`` asks for 625 tokens, ``ch02-3d-torus-generations``
is D ("v4 and v5p"), ``ch01-roofline-below-ridge`` is A.
"""

from __future__ import annotations

import json

import pytest

from scaling_book.grading import grade


@pytest.fixture(scope="module")
def items(export_infos) -> dict[str, dict]:
    return export_infos


def ans(text: str) -> str:
    return f"Working...\n<answer>{text}</answer>"


def test_the_items_are_as_the_red_team_filed_them(items):
    assert items["ch12-gb200-nvl72-dp-batch"]["targets"] == [625.0]
    assert items["ch02-3d-torus-generations"]["answer_letter"] == "D"
    assert json.loads(items["ch02-3d-torus-generations"]["choices"])["D"] == "v4 and v5p"
    assert items["ch01-roofline-below-ridge"]["answer_letter"] == "A"


# ------------------------------------------------------------------------------------------------
# 1. mcq: more than one letter anywhere, or a rejecting / hedging word, is ambiguous
# ------------------------------------------------------------------------------------------------

TORUS = "ch02-3d-torus-generations"


@pytest.mark.parametrize("written", [
    # filed: lists and hedges
    "Option A, option B, option C or option D",
    "Option B or option D",
    "The answer is B or the answer is D",
    "choose B, or choose D",
    # filed: rejections and retractions of D
    "Option D is wrong; B",
    "Option D is incorrect.",
    "Answer: D is wrong, the right one is B",
    "Choice D? No, B.",
    "The answer is D — no wait, B",
    "The answer is D, unless it's B",
    # filed: a bare second letter after a delimited first one
    "D) or B",
    "D. Or possibly B",
    "D — or B",
    "D: but B is also plausible",
    "D) v4 and v5p, or maybe B",
    # filed: two letters joined by punctuation
    "D - B",
    "D...B",
    "D.B",
    # siblings
    "not B; D",
    "B is wrong, so D",
    "D, B",
    "D (or B)",
    "D) v4 and v5p / v3, v4 and v5p",   # a second option by its text
    "D is false",
    "rule out D",
    "Option D, maybe",
    "D? Perhaps.",
])
def test_mcq_hostile_forms_score_zero(items, written):
    g = grade(items[TORUS], ans(written))
    assert g.correctness == 0.0, g.reason
    assert "ambiguous" in g.reason, g.reason


def test_mcq_rejecting_the_right_letter_scores_zero(items):
    g = grade(items["ch01-roofline-below-ridge"], ans("Option A is wrong."))
    assert g.correctness == 0.0 and "wrong" in g.reason, g.reason


@pytest.mark.parametrize("written", ["D", "(D)", "Option D", "**D**", "The answer is D.", "D) v4 and v5p",
                                     "D) 3D torus", "D (v4 and v5p)", "Answer: D", "D: v4 and v5p."])
def test_mcq_correct_forms_still_pay(items, written):
    g = grade(items[TORUS], ans(written))
    assert (g.correctness, g.formatted) == (1.0, True), g.reason


def test_mcq_the_right_letter_with_its_own_option_text_pays_on_every_item(items):
    # option texts hold letters ("2 x B200", "C[I, K]{U_X}", "A TPU v5p ...") and words ("not
    # capacity"): quoted after their own letter they are the option, not another choice or a negation
    mcq = [info for info in items.values() if info["grader"] == "mcq"]
    assert len(mcq) >= 10
    for info in mcq:
        letter = info["answer_letter"]
        text = json.loads(info["choices"])[letter]
        for written in (f"{letter}) {text}", f"({letter}) {text}", f"**{letter}**: {text}"):
            g = grade(info, ans(written))
            assert g.correctness == 1.0, (info["item_id"], written, g.reason)


# ------------------------------------------------------------------------------------------------
# 2. numeric: a label is a plain name; a struck-through value is retracted
# ------------------------------------------------------------------------------------------------

BATCH = "ch12-gb200-nvl72-dp-batch"


@pytest.mark.parametrize("written", [
    # filed: words in the label's parentheses
    "B (at least) = 625", "B (more than) = 625", "B(not) = 625", "B (upper bound) = 625",
    # filed: refused words joined by underscores
    "at_least = 625", "more_than: 625", "not_less_than = 625", "lower_bound = 625", "upper_bound: 625",
    # filed: negating and hedging labels
    "Wrong: 625", "Incorrect = 625", "NOT_625: 625", "Maybe: 625", "Guess: 625",
    # filed: strikethrough
    "~~625~~",
    # siblings
    "B_upper = 625", "Perhaps ≈ 625", "Answer: not = 625", "B (approximately) = 625", "B (tokens) = 625",
    "~~1250~~ 625", "false: 625", "B_lower_bound = 625",
])
def test_numeric_label_and_marker_tricks_score_zero(items, written):
    g = grade(items[BATCH], ans(written))
    assert g.correctness == 0.0, g.reason


@pytest.mark.parametrize("written", ["625", "625 tokens", "B = 625", "B: 625", "B_min = 625", "B_{min} = 625",
                                     r"$B_{\text{crit}} \approx 625$", r"\(B^* = 625\)", "Answer: B = 625",
                                     "B(n) = 625", "The answer is 625 tokens", "~625", "B_1 = 625"])
def test_numeric_plain_labels_still_pay(items, written):
    g = grade(items[BATCH], ans(written))
    assert g.correctness == 1.0, g.reason


# ------------------------------------------------------------------------------------------------
# 3. formula: a perturbation sympy cannot prove away pays nothing
# ------------------------------------------------------------------------------------------------

SWITCH = "ch12-sharp-switch-traffic"      # B*n
PCIE = "ch02-pcie-flops-bound-condition"  # B > C/W


@pytest.mark.parametrize("item_id,written", [
    (SWITCH, "B*n + exp(-1000*B)"),
    (SWITCH, "B*n + exp(B - 10**8)"),          # grows only beyond the sampled range of B
    (SWITCH, "(B*n)**(1 + 1e-25)"),
    (SWITCH, "B*n + sqrt(B)*1e-25"),
    (SWITCH, "B*n*(1 + 1/(1+exp(10**3*B)))"),
    (SWITCH, "B*n + log(1 + exp(-1000*n))"),
    (PCIE, "B > C/W + exp(-10**40*B)"),
    (PCIE, "B - C/W > exp(-1000*B)"),
    (PCIE, "B>C/W*1.0000000000000000000001"),  # a float that rounds to 1.0
    (SWITCH, "B*n*1.00000000000000001"),
])
def test_formula_perturbations_score_zero(items, item_id, written):
    g = grade(items[item_id], ans(written))
    assert g.correctness == 0.0, g.reason


@pytest.mark.parametrize("item_id,written", [
    (SWITCH, "B*n"), (SWITCH, "sqrt(B**2)*n"), (SWITCH, "exp(log(B*n))"), (SWITCH, "B*n*1.0"),
    (SWITCH, "(B*n)**1.0"), (PCIE, "B > C/W"), (PCIE, "B*W > C"), (PCIE, "B > 1.0*C/W"),
])
def test_formula_provable_equivalents_still_pay(items, item_id, written):
    g = grade(items[item_id], ans(written))
    assert g.correctness == 1.0, g.reason


def test_every_formula_gold_and_equivalent_still_pays(items):
    for info in items.values():
        if info["grader"] != "formula":
            continue
        for written in [info["formula_answer"], *(info.get("formula_equivalents") or [])]:
            g = grade(info, ans(written))
            assert g.correctness == 1.0, (info["item_id"], written, g.reason)


# ------------------------------------------------------------------------------------------------
# 4. a grader crash earns no format reward
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("written", ["625 tokens per", "625 per", "625 per per"])
def test_a_dangling_per_earns_neither_credit_nor_format(items, written):
    g = grade(items[BATCH], ans(written))
    assert (g.correctness, g.formatted) == (0.0, False), g.reason


def test_any_grader_exception_is_unformatted(items, monkeypatch):
    import scaling_book.grading.numeric as numeric

    def crash(info, answer):
        raise RuntimeError("boom")

    monkeypatch.setattr(numeric, "grade_numeric", crash)
    g = grade(items[BATCH], ans("625"))
    assert (g.correctness, g.formatted) == (0.0, False)
    assert "grader error (numeric): RuntimeError: boom" in g.reason


# ------------------------------------------------------------------------------------------------
# 5. a malformed unit tail scores 0 with its reason, never a crash inside pint (grader version 2.2.1)
# ------------------------------------------------------------------------------------------------

#: Unit tails pint's parser asserted on (a dangling operator), recursed on (thousands of factors), or
#: read as something else ("tokens per per s" was tokens/s).
MALFORMED_TAILS = [
    "per", "per per", "per per per", "tokens per", "tokens per per s", "tokens per / s", "tokens/per",
    "tokens s per", "tokens per s per", "s * per", "s·per", "μs per", "µs per", "percent per", "% per",
    "/", "s /", "/ s", "GB//s", "GB/ /s", "GB * * s", "*", "·", "GB·", "s^2", "^", "GB/s" + " per" * 200,
    "GB " * 300 + "s", "tokens " * 9,
]


@pytest.mark.parametrize("tail", MALFORMED_TAILS, ids=lambda t: t[:24])
def test_a_malformed_unit_tail_scores_zero_with_its_reason(items, tail):
    g = grade(items[BATCH], ans(f"625 {tail}"))
    assert (g.correctness, g.exact, g.formatted) == (0.0, False, False), g.reason
    assert g.reason.startswith("answer '625") and "grader error" not in g.reason, g.reason


@pytest.mark.parametrize("tail", MALFORMED_TAILS, ids=lambda t: t[:24])
def test_unit_conversion_of_a_malformed_tail_refuses_without_raising(tail):
    from scaling_book.grading.units import UnitError, conversion, parse_unit

    for declared in ("tokens", "tokens/s", "GB/s", "s", ""):
        conv = conversion(tail, declared)
        assert conv.factor is None and "unknown unit" in conv.reason
    with pytest.raises(UnitError):
        parse_unit(tail)


def test_a_malformed_unit_in_one_part_costs_only_that_part():
    # two targets, the second answered exactly: credit (0 + 1) / 2, not a grader error for both
    info = {"grader": "numeric_multi", "targets": [625.0, 2.0], "tolerance": 0.01, "units": ["tokens", "s"]}
    g = grade(info, ans("625 tokens per; 2 s"))
    assert g.correctness == 0.5 and "grader error" not in g.reason, g.reason


@pytest.mark.parametrize("written", ["625 tokens", "625 tokens.", "0.625 thousand tokens"])
def test_well_formed_units_still_read(items, written):
    assert grade(items[BATCH], ans(written)).correctness == 1.0


def test_a_unit_of_several_factors_still_converts():
    from scaling_book.grading.units import conversion

    # 1 GB per ms per chip is 1e9 bytes / 1e-3 s = 1e12 bytes/s, i.e. 1000 GB/s, per chip
    assert conversion("GB per ms per chip", "GB/s/chip").factor == pytest.approx(1000.0)


# A fresh red team after the unit-tail fix: digit groups that start with 0 (the European decimal comma,
# "0,128" is 0.128) and labels that name a scale or another unit than the item's. Each answer denotes a
# value other than the item's target (or another dimension), so it earns nothing.
@pytest.mark.parametrize("item_id,written", [
    ("ch02-v5e-vmem-capacity", "0,128"),                       # 0.128, not 128
    ("ch01-int8-weights-critical-batch", "0,120.122"),
    ("ch12-gb200-nvl72-dp-batch", "0 625"),                    # two numbers
    ("ch02-v5e-vmem-capacity", "0'128"),
    ("ch01-int8-weights-critical-batch", "0_120.122"),
    ("ch01-int8-weights-critical-batch", "1_20.122"),          # groups of 3 only
    ("ch01-int8-weights-critical-batch", "ktokens = 120.122"),  # 120k tokens
    ("ch01-int8-weights-critical-batch", "GB: 120.122"),        # another dimension
    ("ch01-int8-weights-critical-batch", "seconds: 120.122"),
    ("ch01-int8-weights-critical-batch", "N_thousands = 120.122"),
    ("ch01-int8-weights-critical-batch", "millions: 120.122"),
    ("ch01-int8-weights-critical-batch", "billion = 120.122"),
    ("ch01-int8-weights-critical-batch", "value_x1000 = 120.122"),
    ("ch01-int8-weights-critical-batch", "Answer_in_ms: 120.122"),
    ("ch07-int8-weight-load-time-4x4", "T_us = 1.41861"),      # microseconds, the item asks for ms
])
def test_leading_zero_groups_and_scaled_or_foreign_unit_labels_earn_nothing(items, item_id, written):
    g = grade(items[item_id], f"Working.\n<answer>{written}</answer>")
    assert g.correctness == 0.0 and g.reason


@pytest.mark.parametrize("item_id,written", [
    ("ch01-int8-weights-critical-batch", "tokens = 120.122"),   # the item's own unit as a label
    ("ch01-int8-weights-critical-batch", "B_crit = 120.122"),
    ("ch12-gb200-nvl72-dp-batch", "625"),
    ("ch07-int8-weight-load-time-4x4", "T_flops = 1.41861"),  # a subscript of another dimension names it
])
def test_labels_in_the_items_own_unit_still_pay(items, item_id, written):
    assert grade(items[item_id], f"Working.\n<answer>{written}</answer>").correctness == 1.0
