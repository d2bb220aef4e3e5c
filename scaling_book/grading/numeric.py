"""The numeric and numeric_multi graders: relative error against a per-item tolerance.

Credit for one value ``v`` against target ``t`` with tolerance ``tol`` (relative, in (0, 1)):

- ``1.0`` when ``|v - t| <= tol * |t|``;
- ``0.4`` when ``|v - t| <= min(3 * tol, 0.10) * |t|`` (the near-miss band never reaches past 10 %);
- ``0.1`` when ``v`` is within a factor of two of ``t`` (``t / 2 <= v <= 2 * t`` for ``t > 0``);
- ``0.0`` otherwise, and always for a wrong sign, a non-finite value or no value.

The value is read by ``number.parse_number`` (one number standing alone, its unit converted to the
item's unit with pint). A target of exactly 0 pays 1.0 for exactly 0 and nothing else. ``numeric_multi`` reads the values in
the order the question asks (``extract.split_values``) and scores the mean of the per-value credits
over ``max(#targets, #values given)``: a missing or an extra value counts as a wrong one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from scaling_book.grading.extract import MAX_ANSWER_CHARS, split_values
from scaling_book.grading.number import parse_number

__all__ = ["NEAR_MISS_CAP", "NEAR_MISS_CREDIT", "FACTOR_TWO_CREDIT", "numeric_credit", "grade_numeric",
           "grade_numeric_multi"]

NEAR_MISS_CREDIT = 0.4
NEAR_MISS_CAP = 0.10  # relative error beyond which the near-miss band never pays
FACTOR_TWO_CREDIT = 0.1
DEFAULT_TOLERANCE = 0.01
_SLACK = 1e-12  # absorbs float rounding at the band edges


def numeric_credit(value: float | None, target: float, tolerance: float | None) -> tuple[float, str]:
    """Credit for ``value`` against ``target`` (see module doc) and a one-line reason."""
    tol = DEFAULT_TOLERANCE if tolerance is None else float(tolerance)
    if value is None:
        return 0.0, "no value"
    if not (math.isfinite(value) and math.isfinite(target)):
        return 0.0, "non-finite value"
    if target == 0.0:
        return (1.0, "exactly 0") if value == 0.0 else (0.0, "target is 0, answer is not")
    if value == 0.0 or (value > 0) != (target > 0):
        return 0.0, f"{value:g} has the wrong sign (or is 0) for target {target:g}"
    rel = abs(value - target) / abs(target)
    if rel <= tol * (1 + _SLACK):
        return 1.0, f"{value:g} within {tol:g} of {target:g} (relative error {rel:.3g})"
    near = min(3.0 * tol, NEAR_MISS_CAP)
    if rel <= near * (1 + _SLACK):
        return NEAR_MISS_CREDIT, f"{value:g} near miss for {target:g} (relative error {rel:.3g} <= {near:g})"
    ratio = value / target
    if 0.5 * (1 - _SLACK) <= ratio <= 2.0 * (1 + _SLACK):
        return FACTOR_TWO_CREDIT, f"{value:g} within a factor of two of {target:g}"
    return 0.0, f"{value:g} is far from {target:g} (relative error {rel:.3g})"


def _targets(info: Mapping[str, Any]) -> list[float]:
    return [float(t) for t in (info.get("targets") or [])]


def grade_numeric(info: Mapping[str, Any], answer: str | None) -> tuple[float, bool, str, bool]:
    """Grade one number. Returns (correctness, exact, reason, formatted)."""
    targets = _targets(info)
    if len(targets) != 1:
        return 0.0, False, f"item has {len(targets)} targets; a numeric item needs exactly one", answer is not None
    if answer is None:
        return 0.0, False, "no <answer> block", False
    if len(answer) > MAX_ANSWER_CHARS:
        return 0.0, False, f"answer is {len(answer)} characters; the limit is {MAX_ANSWER_CHARS}", False
    units = list(info.get("units") or [""])
    parsed = parse_number(answer, units[0] if units else "")
    if parsed.value is None:
        return 0.0, False, f"answer {answer[:80]!r}: {parsed.reason}", False
    credit, why = numeric_credit(parsed.value, targets[0], info.get("tolerance"))
    return credit, credit == 1.0, why, True


def grade_numeric_multi(info: Mapping[str, Any], answer: str | None) -> tuple[float, bool, str, bool]:
    """Grade several numbers in order. Returns (correctness, exact, reason, formatted)."""
    targets = _targets(info)
    if not targets:
        return 0.0, False, "item has no targets", answer is not None
    if answer is None:
        return 0.0, False, "no <answer> block", False
    if len(answer) > MAX_ANSWER_CHARS:
        return 0.0, False, f"answer is {len(answer)} characters; the limit is {MAX_ANSWER_CHARS}", False
    units: Sequence[str] = list(info.get("units") or [])
    parts, problem = split_values(answer)
    if problem:
        return 0.0, False, f"answer {answer[:80]!r}: {problem}", False
    credits, reasons, any_parsed = [], [], False
    for i, target in enumerate(targets):
        if i >= len(parts):
            credits.append(0.0)
            reasons.append(f"#{i + 1}: missing")
            continue
        parsed = parse_number(parts[i], units[i] if i < len(units) else "")
        if parsed.value is None:
            credits.append(0.0)
            reasons.append(f"#{i + 1}: {parsed.reason}")
            continue
        any_parsed = True
        credit, why = numeric_credit(parsed.value, target, info.get("tolerance"))
        credits.append(credit)
        reasons.append(f"#{i + 1}: {why}")
    extra = max(0, len(parts) - len(targets))
    if extra:
        reasons.append(f"{extra} extra value(s) count as wrong")
    correctness = sum(credits) / (len(targets) + extra)
    exact = extra == 0 and all(c == 1.0 for c in credits)
    return correctness, exact, f"{len(parts)} values for {len(targets)} targets; " + "; ".join(reasons), any_parsed
