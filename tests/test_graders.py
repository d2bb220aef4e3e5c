"""Each grader pays for a correct answer written several ways and refuses wrong ones.

Every expected value is worked out by hand in the test. Items are small hand-written `info` dicts in
the exported row format (see /work/brief/interfaces.md); one test scores a rollout end to end through
the taskset's rubric.
"""

from __future__ import annotations

import json
import math

import pytest

from scaling_book.grading import GRADER_VERSION, Grade, grade
from scaling_book.grading.code import knowledge_free_baseline, test_passes
from scaling_book.grading.extract import extract_answer, extract_code
from scaling_book.grading.number import parse_number


def numeric_item(target: float, tolerance: float, unit: str = "") -> dict:
    return {"grader": "numeric", "targets": [target], "tolerance": tolerance, "units": [unit]}


def ans(text: str) -> str:
    return f"Some reasoning first.\n<answer>{text}</answer>"


# ------------------------------------------------------------------------------------------------
# extraction
# ------------------------------------------------------------------------------------------------


def test_extract_answer_takes_the_last_block_and_ignores_reasoning():
    response = "<think><answer>1</answer></think>draft <answer>100</answer> final <ANSWER> 240 </ANSWER>"
    assert extract_answer(response) == "240"


def test_reasoning_up_to_the_last_closing_tag_is_never_graded():
    from scaling_book.grading.extract import visible_reply

    item = numeric_item(240.0, 0.01)
    # The chat template opened <think> in the prompt: only the closing tag is in the reply.
    draft_then_final = "Draft: <answer>120</answer>\n</think>\nFinal: <answer>240</answer>"
    assert extract_answer(draft_then_final) == "240"
    # The draft's 120 is reasoning; the visible reply has no answer block: no credit, no format reward.
    no_visible_answer = grade(item, "Draft: <answer>120</answer>\n</think>\nFinal: 240")
    assert (no_visible_answer.correctness, no_visible_answer.formatted) == (0.0, False)
    paid_before = grade(item, "x <answer>240</answer> y</think>no answer here")
    assert (paid_before.correctness, paid_before.formatted) == (0.0, False)
    # The LAST closing tag counts, whichever of the three names, in any case.
    assert visible_reply("a</think>b</REASONING>c") == "c"
    assert visible_reply("<thinking>plan</thinking> done") == " done"
    # An opening tag never closed: the reply ended inside its reasoning, nothing is visible.
    assert visible_reply("<think>so the answer is <answer>240</answer>") == ""
    assert grade(item, "<think>so the answer is <answer>240</answer>").correctness == 0.0
    assert visible_reply("</think>") == ""
    assert visible_reply(None) == ""
    code_item_reply = "<think>```python\ndef f():\n    return 1\n```</think>```python\ndef f():\n    return 2\n```"
    assert extract_code(code_item_reply) == "def f():\n    return 2\n"


def test_extract_answer_none_without_block_or_with_empty_block():
    assert extract_answer("The answer is 240.") is None
    assert extract_answer("<answer>   </answer>") is None
    assert extract_answer(None) is None


def test_extract_code_takes_the_last_python_block():
    response = "```python\ndef f():\n    return 1\n```\ntext\n```py\ndef f():\n    return 2\n```\n```\nnot python\n```"
    assert extract_code(response) == "def f():\n    return 2\n"
    assert extract_code("```js\nx\n```") is None


def test_extract_answer_is_linear_in_unclosed_answer_tags():
    # 100,000 unclosed "<answer>" tags (800 KB): the regex findall rescanned to the end from each one
    # (about 10^10 steps); the scan finds none closed and stops.
    import time

    start = time.monotonic()
    assert extract_answer("<answer>" * 100_000) is None
    assert time.monotonic() - start < 10.0   # linear: milliseconds; the quadratic scan took minutes
    # and the rule is unchanged: the last closed block; an unclosed tag swallows up to the next close
    assert extract_answer("<answer>1</answer> text <answer>2") == "1"
    assert extract_answer("<answer>1</answer><answer>2 <answer>3</answer>") == "2 <answer>3"


def test_numeric_and_mcq_answer_blocks_longer_than_the_cap_fail_closed():
    # 1,000 nested \boxed{} around 240: 8,000 + 3 + 1,000 = 9,003 characters > 4,000
    long_number = "\\boxed{" * 1000 + "240" + "}" * 1000
    g = grade(numeric_item(240.0, 0.02), ans(long_number))
    assert g.correctness == 0.0 and "limit is 4000" in g.reason
    g = grade(MCQ, ans("D) " + "mesh " * 800))  # 3 + 4,000 characters
    assert g.correctness == 0.0 and "limit is 4000" in g.reason


# ------------------------------------------------------------------------------------------------
# numeric: written forms (target 240, tolerance 2 %)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("written", [
    "240", "240 FLOPs/byte", "240.0", "2.4e2", "2.4E+2", "2.4×10^2", "2.4 x 10^2", "2.4 * 10**2",
    r"$2.4 \times 10^{2}$", r"2.4 \cdot 10^{2}", "~240", "≈ 240", "about 240", "approximately 240 FLOPs/byte",
    "**240**", "*240*", r"\boxed{240}", r"\text{240 FLOPs/byte}", "$240$", "`240`", "Answer: 240",
    "I = 240 FLOPs/byte", "240.",
])
def test_numeric_pays_for_written_forms_of_the_right_number(written):
    g = grade(numeric_item(240.0, 0.02, "FLOPs/byte"), ans(written))
    assert (g.correctness, g.exact, g.formatted) == (1.0, True, True), g.reason


@pytest.mark.parametrize("written,target", [
    ("1,234,567", 1234567.0), ("1 234 567", 1234567.0), ("1\u202f234\u202f567", 1234567.0),
    ("1{,}234{,}567", 1234567.0), ("10^{12}", 1e12), ("10^12", 1e12), ("10¹²", 1e12), ("1.5e-3", 0.0015),
    ("−5", -5.0), ("\u20135", -5.0), ("2.5 million", 2.5e6), ("3 billion", 3e9), ("1.2 trillion", 1.2e12),
])
def test_numeric_reads_separators_exponents_minus_signs_and_number_words(written, target):
    g = grade(numeric_item(target, 1e-6), ans(written))
    assert g.correctness == 1.0, g.reason


@pytest.mark.parametrize("written,target,unit", [
    ("240_000", 240000.0, ""),                             # Python digit grouping
    ("1_000_000_000_000", 1e12, ""),
    ("7.2×", 7.2, "ratio"),                                # "times", not an unfinished product
    ("7.2x", 7.2, "ratio"),
    ("2.4 hundred", 240.0, ""),
    ("2500 [GB/s]", 2500.0, "GB/s"),
    ("2500 GB/sec", 2500.0, "GB/s"),
    ("2500 GB per second", 2500.0, "GB/s"),
    ("229 tokens per second per chip", 229.0, "tokens/s/chip"),
    ("5.91e17 FLOPs per dollar", 5.91e17, "FLOPs/USD"),
])
def test_numeric_pays_for_more_written_forms(written, target, unit):
    g = grade(numeric_item(target, 0.02, unit), ans(written))
    assert g.correctness == 1.0, g.reason


@pytest.mark.parametrize("written,target,unit,reason_part", [
    ("240..250", 240.0, "", "malformed"),                  # a range, not 240
    ("240.5.5", 240.0, "", "malformed"),                   # was read as 240.5
    ("1.000.000.000.000", 1e12, "", "malformed"),          # was read as 1.0
    ("240_000", 240.0, "", "far from"),                    # 240000, not 240
    # units are converted, not stripped: each of these is a factor of 1000 or 8 off
    ("2500 [MB/s]", 2500.0, "GB/s", "far from"),           # 2.5 GB/s; a bracket does not hide the prefix
    ("2500~MB/s", 2500.0, "GB/s", "far from"),             # nor does a LaTeX space
    ("2500 (in MB/s)", 2500.0, "GB/s", "far from"),
    ("2500 in MB/s", 2500.0, "GB/s", "far from"),
    ("2500 GB/ms", 2500.0, "GB/s", "far from"),            # 2.5e6 GB/s
    ("240 FLOPs/kB", 240.0, "FLOPs/byte", "far from"),     # 0.24 FLOPs/byte
    ("240 FLOPs/bit", 240.0, "FLOPs/byte", "far from"),    # 1920 FLOPs/byte
    ("229 tokens/ms/chip", 229.0, "tokens/s/chip", "far from"),  # 229,000 tokens/s/chip
    ("7.2× faster", 7.2, "ratio", "unknown unit"),         # "7.2x slower" would read the same
    ("240 (2.4e2)", 240.0, "FLOPs/byte", "stand alone"),   # a second number, even an equal one
])
def test_numeric_refuses_ranges_malformed_numbers_and_hidden_unit_prefixes(written, target, unit, reason_part):
    g = grade(numeric_item(target, 0.02, unit), ans(written))
    assert g.correctness == 0.0 and reason_part in g.reason, g.reason


def test_numeric_percent_is_a_fraction_unless_the_question_asks_in_percent():
    assert grade(numeric_item(0.25, 0.01, "fraction of parameters"), ans("25%")).correctness == 1.0
    assert grade(numeric_item(25.0, 0.01, "%"), ans("25%")).correctness == 1.0
    assert grade(numeric_item(25.0, 0.01, "%"), ans("25 percent")).correctness == 1.0
    # 25 % of a fraction target 25 is 0.25: a factor of 100 off.
    assert grade(numeric_item(25.0, 0.01, ""), ans("25%")).correctness == 0.0


# band edges, tolerance 0.02 on 240: full <= 4.8 off; near miss <= min(3 * 0.02, 0.10) = 6 % = 14.4 off;
# factor of two: 120 .. 480.
@pytest.mark.parametrize("value,credit", [
    (244.7, 1.0), (235.3, 1.0),      # 1.96 % off
    (245.0, 0.4), (235.0, 0.4),      # 2.08 % off
    (254.3, 0.4), (225.7, 0.4),      # 5.96 % off
    (254.5, 0.1), (225.5, 0.1),      # 6.04 % off
    (480.0, 0.1), (120.0, 0.1),      # exactly a factor of two
    (480.5, 0.0), (119.5, 0.0),      # just beyond
    (-240.0, 0.0), (0.0, 0.0),       # wrong sign, zero
])
def test_numeric_band_edges_on_both_sides(value, credit):
    g = grade(numeric_item(240.0, 0.02), ans(repr(value)))
    assert g.correctness == credit, g.reason
    assert g.exact is (credit == 1.0)


def test_numeric_near_miss_band_is_capped_at_ten_percent():
    # tolerance 5 %: 3x would be 15 %, capped at 10 %. On 100: 109.9 near miss, 110.1 only factor-two.
    assert grade(numeric_item(100.0, 0.05), ans("109.9")).correctness == 0.4
    assert grade(numeric_item(100.0, 0.05), ans("110.1")).correctness == 0.1
    # tolerance 20 %: the capped near-miss band lies inside the tolerance: 125 is 25 % off -> 0.1.
    assert grade(numeric_item(100.0, 0.2), ans("119")).correctness == 1.0
    assert grade(numeric_item(100.0, 0.2), ans("125")).correctness == 0.1


def test_numeric_wrong_sign_scores_zero():
    assert grade(numeric_item(-5.0, 0.1), ans("5")).correctness == 0.0
    assert grade(numeric_item(5.0, 0.1), ans("-5")).correctness == 0.0


def test_numeric_units_are_converted_with_their_case():
    # 0.24 kFLOPs/byte = 240 FLOPs/byte; 2500 MB/s = 2.5 GB/s (1000x off); 2.5 TB/s = 2500 GB/s
    assert grade(numeric_item(240.0, 0.02, "FLOPs/byte"), ans("0.24 kFLOPs/byte")).correctness == 1.0
    g = grade(numeric_item(2500.0, 0.02, "GB/s"), ans("2500 MB/s"))
    assert g.correctness == 0.0 and "far from" in g.reason
    assert grade(numeric_item(2500.0, 0.02, "GB/s"), ans("2500 GB/s")).correctness == 1.0
    assert grade(numeric_item(2500.0, 0.02, "GB/s"), ans("2.5 TB/s")).correctness == 1.0
    assert grade(numeric_item(1.2, 0.02, "s"), ans("1.2 ms")).correctness == 0.0
    assert grade(numeric_item(1.2, 0.02, "s"), ans("1.2 seconds")).correctness == 1.0
    assert grade(numeric_item(1.2, 0.02, "s"), ans("1200 ms")).correctness == 1.0
    # 16 GB = 16e9 / 2^30 GiB = 14.90 GiB: 6.9 % off, beyond the 6 % near-miss band, inside a factor of 2
    assert grade(numeric_item(16.0, 0.02, "GiB"), ans("16 GB")).correctness == 0.1
    assert grade(numeric_item(3.0, 0.02, "us"), ans("3 µs")).correctness == 1.0
    assert grade(numeric_item(3.0, 0.02, "microseconds"), ans("3 us")).correctness == 1.0
    # SI case: Ms is megaseconds (1e9 ms), mb millibits
    assert grade(numeric_item(5.0, 0.02, "ms"), ans("5 Ms")).correctness == 0.0
    assert grade(numeric_item(5.0, 0.02, "MB"), ans("5 mb")).correctness == 0.0


def test_numeric_bare_magnitude_suffix_and_other_dimension_fail_closed():
    assert grade(numeric_item(70e9, 0.02, "parameters"), ans("70B")).correctness == 0.0
    assert grade(numeric_item(70.0, 0.02, "parameters"), ans("70 M")).correctness == 0.0
    assert grade(numeric_item(70e9, 0.02, "parameters"), ans("70 billion parameters")).correctness == 1.0


@pytest.mark.parametrize("written", ["", "nan", "NaN", "inf", "-inf", "1e999", "12 or 13", "12-13", "12–13",
                                     "twelve", "between 200 and 300", "240 or 250"])
def test_numeric_fails_closed_with_a_reason(written):
    g = grade(numeric_item(12.0, 0.1), ans(written))
    assert g.correctness == 0.0 and not g.formatted
    assert g.reason


def test_numeric_without_answer_block_scores_zero_and_is_unformatted():
    g = grade(numeric_item(240.0, 0.02), "The answer is 240.")
    assert (g.correctness, g.formatted, g.extracted) == (0.0, False, None)


def test_numeric_repeated_same_value_is_still_a_second_number():
    g = grade(numeric_item(240.0, 0.02), ans("240 (i.e. 2.4e2)"))
    assert g.correctness == 0.0 and "stand alone" in g.reason


# ------------------------------------------------------------------------------------------------
# numeric_multi (targets 6.7e9, 4.0e19, 12.5, tolerance 2 %)
# ------------------------------------------------------------------------------------------------

MULTI = {"grader": "numeric_multi", "targets": [6.7e9, 4.0e19, 12.5], "tolerance": 0.02,
         "units": ["params", "FLOPs", "days"]}


@pytest.mark.parametrize("written", ["6.7e9; 4.0e19; 12.5", "6.7e9\n4e19\n12.5 days",
                                     "6.7 billion params; 4.0×10^19 FLOPs; 12.5 days", "6.7e9, 4.0e19, 12.5"])
def test_numeric_multi_pays_all_values_in_order(written):
    g = grade(MULTI, ans(written))
    assert (g.correctness, g.exact) == (1.0, True), g.reason


def test_numeric_multi_is_the_mean_of_per_value_credits():
    # 1.0 + 0.4 (4.1e19 is 2.5 % off) + 0.1 (20 is 60 % off, inside a factor of two) = 1.5 / 3
    g = grade(MULTI, ans("6.7e9; 4.1e19; 20"))
    assert g.correctness == pytest.approx(0.5) and not g.exact


def test_numeric_multi_missing_and_extra_values_count_as_wrong():
    assert grade(MULTI, ans("6.7e9; 4.0e19")).correctness == pytest.approx(2 / 3)
    assert grade(MULTI, ans("6.7e9; 4.0e19; 12.5; 99")).correctness == pytest.approx(3 / 4)


def test_numeric_multi_order_matters():
    # 4e19 against 6.7e9 and 6.7e9 against 4e19 are both far off; 12.5 is right: 1/3.
    assert grade(MULTI, ans("4.0e19; 6.7e9; 12.5")).correctness == pytest.approx(1 / 3)


# ------------------------------------------------------------------------------------------------
# mcq
# ------------------------------------------------------------------------------------------------

MCQ = {"grader": "mcq", "choices": json.dumps({"A": "ring", "B": "tree", "C": "torus", "D": "mesh"}),
       "answer_letter": "D"}


@pytest.mark.parametrize("written", ["D", "d", "(D)", "D.", "**D**", r"\boxed{D}", "Option D", "Answer: D",
                                     "D) mesh", "The answer is D", "I pick (D)", "D (mesh)", "The answer is D."])
def test_mcq_pays_for_an_explicit_single_choice(written):
    g = grade(MCQ, ans(written))
    assert (g.correctness, g.exact, g.formatted) == (1.0, True, True), g.reason


@pytest.mark.parametrize("written,reason_part", [("A", "the answer is D"), ("A or C", "several letters"),
                                                 ("A, B, C, D", "several letters"), ("mesh", "no choice letter"),
                                                 ("D or B", "several letters"), ("E", "no choice letter")])
def test_mcq_refuses_wrong_ambiguous_or_missing_letters(written, reason_part):
    g = grade(MCQ, ans(written))
    assert g.correctness == 0.0 and reason_part in g.reason


@pytest.mark.parametrize("written", [
    "the answer is D or A",
    "the option is D or A",
    "choose D or A",
    "the answer is D/A",
    "answer: D and A",
    "the answer is D, A.",
    "D. mesh, A. ring",
    "D) mesh\nA) ring",
])
def test_mcq_hedges_naming_the_right_letter_first_score_zero(written):
    # a cue or a list naming D (right) and A (wrong) is not a single choice
    g = grade(MCQ, ans(written))
    assert g.correctness == 0.0 and "several letters" in g.reason, g.reason


@pytest.mark.parametrize("written", [
    "the answer is D, not A",
    "the answer is D, and A is wrong",
    "the answer is D and A is wrong",
    "not B; the answer is D",
    "B is wrong, so the answer is D.",
    "D: mesh, because a ring is slower",   # quotes option A's text: names A too
])
def test_mcq_another_letter_anywhere_in_the_block_scores_zero(written):
    # precision before recall: a second letter (or another option's text) anywhere in the final answer
    # block makes it ambiguous, even when the prose seems to reject it
    g = grade(MCQ, ans(written))
    assert g.correctness == 0.0 and "ambiguous" in g.reason, g.reason


# ------------------------------------------------------------------------------------------------
# formula
# ------------------------------------------------------------------------------------------------

FORMULA = {"grader": "formula", "formula_answer": "T/(8*D)", "formula_symbols": ["T", "D"],
           "formula_equivalents": []}


@pytest.mark.parametrize("written", ["T/(8*D)", "(1/8)*T/D", "T/8/D", "0.125*T/D", "T/(8D)", r"\frac{T}{8D}",
                                     r"$\frac{T}{8 \cdot D}$", "t = T/(8*D)", "T * D^-1 / 8", "(T/D)/8"])
def test_formula_pays_for_equivalent_forms(written):
    g = grade(FORMULA, ans(written))
    assert (g.correctness, g.exact, g.formatted) == (1.0, True, True), g.reason


@pytest.mark.parametrize("written", [
    "T D^{-1}/8",          # names side by side are a product
    r"\frac{1}{8} T / D",
    "1_000*T/(8000*D)",    # a Python digit group, not 1 * _000
])
def test_formula_pays_for_more_equivalent_forms(written):
    g = grade(FORMULA, ans(written))
    assert g.correctness == 1.0, g.reason


def test_formula_space_products_keep_declared_names_plain_symbols():
    item = {"grader": "formula", "formula_answer": "E*N + S**2/Q - I*O + beta*gamma",
            "formula_symbols": ["E", "N", "S", "Q", "I", "O", "beta", "gamma"], "formula_equivalents": []}
    assert grade(item, ans("E N + S^2/Q - I O + beta gamma")).correctness == 1.0


CEIL = {"grader": "formula", "formula_answer": "ceil(N/8)", "formula_symbols": ["N"], "formula_equivalents": []}


@pytest.mark.parametrize("item,written", [
    (CEIL, "floor(N/8) + 1"),             # N = 64: ceil 8, floor + 1 = 9
    (CEIL, "floor(N/8 + 1)"),             # the same claim
    (FORMULA, "T/(8*D) + floor(T/10000)"),  # T = 20000: off by 2 (every real sample point is below 1000)
])
def test_formula_floor_and_ceiling_are_also_compared_at_integer_points(item, written):
    # N = 10^6, the top of a count's range, is a multiple of 8; the last answer uses floor where the
    # gold does not and is refused before any comparison
    g = grade(item, ans(written))
    assert g.correctness == 0.0 and ("sample point" in g.reason or "non-smooth" in g.reason), g.reason


def test_formula_ceiling_forms_that_agree_at_integers_still_pay():
    assert grade(CEIL, ans("ceiling(N/8)")).correctness == 1.0
    assert grade(CEIL, ans(r"\lceil N/8 \rceil")).correctness == 1.0


@pytest.mark.parametrize("written", ["T/(4*D)", "T*D/8", "8*D/T", "0", "T", "T/(8*D) + 1"])
def test_formula_refuses_different_expressions(written):
    assert grade(FORMULA, ans(written)).correctness == 0.0


RELATION = {"grader": "formula", "formula_answer": "B/X > R", "formula_symbols": ["B", "X", "R"],
            "formula_equivalents": []}


@pytest.mark.parametrize("written", ["B/X > R", "R < B/X", "B > R*X", "R*X < B", "B - R*X > 0", "X < B/R"])
def test_formula_relations_match_in_either_orientation(written):
    assert grade(RELATION, ans(written)).correctness == 1.0


@pytest.mark.parametrize("written,reason_part", [
    ("B/X < R", "different relation"), ("R > B/X", "different relation"), ("B/X >= R", "strictness"),
    ("1 < 2", "no free symbols"), ("B/X", "expression where a relation"),
])
def test_formula_relations_keep_direction_and_strictness(written, reason_part):
    g = grade(RELATION, ans(written))
    assert g.correctness == 0.0 and reason_part in g.reason, g.reason


def test_formula_expression_is_not_a_relation():
    g = grade(FORMULA, ans("T > 8*D"))
    assert g.correctness == 0.0 and "relation where an expression" in g.reason


def test_formula_declared_names_are_plain_symbols():
    # E, N, S, Q, I, O, beta, gamma would be sympy objects (E = e, I = sqrt(-1), S = singletons...).
    item = {"grader": "formula", "formula_answer": "E*N + S**2/Q - I*O + beta*gamma",
            "formula_symbols": ["E", "N", "S", "Q", "I", "O", "beta", "gamma"], "formula_equivalents": []}
    assert grade(item, ans("N*E + S^2/Q - O*I + gamma*beta")).correctness == 1.0
    assert grade(item, ans("N*E + S^2/Q")).correctness == 0.0


def test_formula_hand_written_equivalents_are_accepted():
    item = {"grader": "formula", "formula_answer": "ceil(N/8)", "formula_symbols": ["N"],
            "formula_equivalents": ["floor((N + 7)/8)"]}
    assert grade(item, ans("floor((N+7)/8)")).correctness == 1.0


@pytest.mark.parametrize("written", ["__import__('os').system('true')", "T.__class__", "T[0]", "lambda: T",
                                     "X + T", "open('x')", "T if D else T", "'T'", "T; D", "T @ D"])
def test_formula_vetting_refuses_everything_but_arithmetic_on_declared_symbols(written):
    g = grade(FORMULA, ans(written))
    assert g.correctness == 0.0 and not g.formatted and "refused" in g.reason


# ------------------------------------------------------------------------------------------------
# code
# ------------------------------------------------------------------------------------------------

# compute_time_s(flops, flops_per_s) = flops / flops_per_s; test 2 is degenerate (0 FLOPs -> 0 s).
CODE_TESTS = [
    {"args": [1e12, 2e12], "expected": 0.5},
    {"args": [3e12, 1e12], "expected": 3.0},
    {"args": [0.0, 1e12], "expected": 0.0},
    {"args": [8e14, 2e14], "expected": 4.0},
]


def code_item(baseline: float = 0.25) -> dict:
    return {"grader": "code", "code_function": "compute_time_s", "code_compare": "rel", "tolerance": 1e-6,
            "code_tests": json.dumps(CODE_TESTS), "code_baseline": baseline,
            "code_signature": "def compute_time_s(flops, flops_per_s):"}


def code_response(body: str) -> str:
    return f"Here it is.\n```python\n{body}\n```"


def test_code_baseline_of_the_example_item_is_return_zero_passing_a_quarter():
    assert knowledge_free_baseline(CODE_TESTS, "rel", 1e-6) == (0.25, "return 0")


def test_code_correct_function_scores_one():
    g = grade(code_item(), code_response("def compute_time_s(flops, flops_per_s):\n    return flops / flops_per_s"))
    assert (g.correctness, g.exact, g.formatted) == (1.0, True, True), g.reason


def test_code_stub_with_the_right_name_returning_garbage_scores_zero():
    g = grade(code_item(), code_response("def compute_time_s(flops, flops_per_s):\n    return 'fast'"))
    assert (g.correctness, g.exact) == (0.0, False)
    assert "passed 0/4" in g.reason


def test_code_baseline_is_subtracted_and_rescaled():
    # Right on tests 0 and 2 only (0.5 / 0.5, and 0 / x): 2/4 passed; (0.5 - 0.25) / (1 - 0.25) = 1/3.
    body = "def compute_time_s(flops, flops_per_s):\n    return 0.5 if flops else 0.0"
    g = grade(code_item(), code_response(body))
    assert g.correctness == pytest.approx(1 / 3)
    # return 0 passes exactly the baseline's quarter and scores exactly 0.
    g = grade(code_item(), code_response("def compute_time_s(flops, flops_per_s):\n    return 0"))
    assert g.correctness == 0.0 and "passed 1/4" in g.reason


def test_code_function_that_raises_on_some_tests_gets_credit_for_the_rest():
    # Raises on test 2 (0 FLOPs); passes 3/4: (0.75 - 0.25) / 0.75 = 2/3.
    body = "def compute_time_s(flops, flops_per_s):\n    assert flops > 0\n    return flops / flops_per_s"
    g = grade(code_item(), code_response(body))
    assert g.correctness == pytest.approx(2 / 3)
    assert "AssertionError" in g.reason


def test_code_without_python_block_or_wrong_name_scores_zero():
    g = grade(code_item(), "def compute_time_s(a, b): return a / b")
    assert (g.correctness, g.formatted) == (0.0, False)
    g = grade(code_item(), code_response("def other(flops, flops_per_s):\n    return flops / flops_per_s"))
    assert g.correctness == 0.0 and "does not define" in g.reason


def test_code_execution_disabled_scores_zero_and_starts_no_process(monkeypatch):
    import scaling_book.grading.code as code_grader

    def forbidden(*args, **kwargs):
        raise AssertionError("run_function called with allow_code_execution=False")

    monkeypatch.setattr(code_grader, "run_function", forbidden)
    body = "def compute_time_s(flops, flops_per_s):\n    return flops / flops_per_s"
    g = grade(code_item(), code_response(body), allow_code_execution=False)
    assert g.correctness == 0.0 and "disabled" in g.reason


def test_code_comparisons_are_type_strict():
    assert test_passes([True, 1, "yes"], [{"args": [], "expected": True}] * 3, "bool", None) == [True, False, False]
    assert test_passes([1, True], [{"args": [], "expected": 1}] * 2, "exact", None) == [True, False]
    assert test_passes([4.0, "4"], [{"args": [], "expected": 4}] * 2, "exact", None) == [True, False]
    assert test_passes([0.5000001, 0.51, None], [{"args": [], "expected": 0.5}] * 3, "rel", 1e-6) == [
        True, False, False]
    # values beyond the number of tests are dropped; missing ones fail
    assert test_passes([1, 1, 1, 1], [{"args": [], "expected": 1}] * 2, "exact", None) == [True, True]
    assert test_passes([1], [{"args": [], "expected": 1}] * 2, "exact", None) == [True, False]
    assert test_passes(None, [{"args": [], "expected": 1}], "exact", None) == [False]


def test_code_huge_integer_fails_its_own_test_only():
    # 10**400 on test 2 (0 FLOPs, expected 0.0) is beyond float range: that test fails, the other three
    # pass: (3/4 - 1/4) / (3/4) = 2/3. It used to raise OverflowError and zero the whole grade.
    body = "def compute_time_s(flops, flops_per_s):\n    return flops / flops_per_s if flops else 10**400"
    g = grade(code_item(), code_response(body))
    assert g.correctness == pytest.approx(2 / 3), g.reason
    assert test_passes([10**400, 10**400, 5], [{"args": [], "expected": 5}, {"args": [], "expected": 5.0},
                                               {"args": [], "expected": 5}], "exact", None) == [False, False, True]
    assert test_passes([10**400], [{"args": [], "expected": 5.0}], "rel", 1e-6) == [False]


def test_code_baseline_includes_echoing_an_argument():
    tests = [{"args": [7, 1], "expected": 7}, {"args": [9, 2], "expected": 9}, {"args": [3, 3], "expected": 1}]
    assert knowledge_free_baseline(tests, "exact", None) == (2 / 3, "return argument 0")


# ------------------------------------------------------------------------------------------------
# dispatcher invariants
# ------------------------------------------------------------------------------------------------


def test_grade_never_raises_and_never_returns_nan():
    broken = [{"grader": "numeric"}, {"grader": "numeric", "targets": [float("nan")], "tolerance": 0.1},
              {"grader": "mcq", "choices": "not json", "answer_letter": "A"}, {"grader": "nope"},
              {"grader": "code", "code_tests": "[", "code_function": "f", "code_compare": "rel"},
              {"grader": "formula", "formula_answer": "import os", "formula_symbols": []}]
    for info in broken:
        for response in ["<answer>1</answer>", "", None, "```python\ndef f(): return 1\n```"]:
            g = grade(info, response)  # type: ignore[arg-type]
            assert isinstance(g, Grade) and g.correctness == 0.0 and not math.isnan(g.correctness)
            assert g.reason


def test_arbitrary_text_is_unformatted_for_every_grader():
    for info in [numeric_item(1.0, 0.1), MULTI, MCQ, FORMULA, code_item()]:
        g = grade(info, "I am not sure, but here are some thoughts about TPUs.")
        assert (g.correctness, g.formatted) == (0.0, False)


def test_grader_version_is_a_nonempty_string():
    assert isinstance(GRADER_VERSION, str) and GRADER_VERSION


def test_parse_number_reason_names_what_was_read():
    assert "240" in parse_number("240 FLOPs/byte", "FLOPs/byte").reason


# ------------------------------------------------------------------------------------------------
# end to end through the taskset's rubric
# ------------------------------------------------------------------------------------------------


def test_one_rollout_scored_end_to_end_through_the_taskset_rubric():
    import asyncio

    import verifiers.v1 as vf
    from verifiers.v1.trace import AgentInfo, TraceTask

    from scaling_book.environment.taskset import (
        ScalingBookTask,
        ScalingBookTaskConfig,
        row_data,
    )
    from scaling_book.grading.prompt import SYSTEM_PROMPT

    info = {"item_id": "ch01-test", "chapter": 1, "section": "s", "provenance": "book_stated_fact",
            "split": "train", "kind": "qa", "content_hash": "x", "units": ["FLOPs/byte"], "choices": "",
            "answer_letter": "", "formula_answer": "", "formula_symbols": [], "formula_equivalents": [],
            "code_function": "", "code_signature": "", "code_compare": "", "code_tests": "", "code_baseline": 0.0,
            **numeric_item(240.0, 0.02, "FLOPs/byte")}
    row = {"id": "ch01-test", "prompt": [{"role": "system", "content": SYSTEM_PROMPT},
                                         {"role": "user", "content": "Critical intensity of a v5e?"}],
           "question": "Critical intensity of a v5e?", "answer": "240", "info": info}
    task = ScalingBookTask(row_data(row), ScalingBookTaskConfig())

    def scored(reply: str) -> dict:
        trace = vf.Trace(task=TraceTask(type="ScalingBookTask", data=task.data),
                         agent=AgentInfo(config=vf.AgentConfig()), root_reply=reply)
        asyncio.run(task.score(trace))
        return {name: (r.score, r.weight) for name, r in trace.rewards.items() if r is not None} | {
            f"metric:{k}": v for k, v in trace.metrics.items()}

    right = scored("The roofline gives 1.97e14 / 8.2e11.\n<answer>240 FLOPs/byte</answer>")
    assert right["correctness"] == (1.0, 1.0) and right["format"] == (1.0, 0.2)
    assert right["metric:exact"] == 1.0 and right["metric:heldout_flag"] == 0.0
    near = scored("<answer>250</answer>")  # 4.2 % off: near miss 0.4, formatted
    assert near["correctness"] == (0.4, 1.0) and near["format"] == (1.0, 0.2) and near["metric:exact"] == 0.0
    prose = scored("Probably around two hundred and forty.")
    assert prose["correctness"] == (0.0, 1.0) and prose["format"] == (0.0, 0.2)
