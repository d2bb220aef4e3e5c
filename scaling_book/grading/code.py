"""The code grader: one Python function, run in the sandbox, compared in this process.

Scoring: the submission (the last fenced ```python block of the response) runs once in
``scaling_book.grading.sandbox.run_function`` against every test case's arguments: the visible ones
(``info["code_tests"]``) and the hidden ones the gate drew from the item's input domains
(``info["code_hidden_tests"]``, attached in memory from the export's key file, never exported in
``info``), all in the same process. Each returned value is
compared here, type-strictly, with the expected value the child never saw:

- ``rel``: a number (``int`` or ``float``, never ``bool``), finite, within the item's relative tolerance
  of the expected number (exactly equal when the expected value is 0); lists compare element-wise;
- ``exact``: equal value of the same kind (``True`` is not ``1``; ``4`` and ``4.0`` are both numbers);
- ``bool``: exactly ``True`` or ``False`` (a truthy ``1`` or ``"yes"`` is not a boolean).

Correctness = (pass fraction - baseline) / (1 - baseline) over all of them, clipped to [0, 1], where
``baseline`` is the best pass fraction of a knowledge-free submission (``knowledge_free_baseline``),
measured at build time over the same full set and stored on the item. A constant scores exactly 0 and the reference exactly 1.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from scaling_book.grading.sandbox import (
    NO_ISOLATION_MESSAGE,
    UNISOLATED_MESSAGE,
    CallError,
    announce_once,
    execution_isolation,
    run_function,
)

__all__ = [
    "KNOWLEDGE_FREE_CONSTANTS",
    "grade_code",
    "knowledge_free_baseline",
    "test_passes",
    "value_passes",
]


#: Longest submission run, in characters.
MAX_SOURCE_CHARS = 100_000


def _is_number(v: Any) -> bool:
    return type(v) in (int, float)


def value_passes(value: Any, expected: Any, compare: str, tolerance: float | None) -> bool:
    """Whether one returned ``value`` passes against ``expected`` under ``compare`` (see module doc)."""
    if isinstance(value, CallError):
        return False
    if compare == "bool":
        return type(value) is bool and type(expected) is bool and value is expected
    if compare == "rel":
        if isinstance(expected, list):
            return (type(value) is list and len(value) == len(expected)
                    and all(value_passes(v, e, "rel", tolerance) for v, e in zip(value, expected)))
        if not (_is_number(value) and _is_number(expected)):
            return False
        try:
            v, e = float(value), float(expected)
        except OverflowError:  # an int beyond float range (the child may return up to 4000 bits)
            return False
        if not (math.isfinite(v) and math.isfinite(e)):
            return False
        tol = 1e-9 if tolerance is None else float(tolerance)
        if e == 0.0:
            return v == 0.0
        return abs(v - e) <= tol * abs(e) * (1 + 1e-12)
    if compare == "exact":
        return _exact_equal(value, expected)
    raise ValueError(f"unknown compare mode {compare!r}; expected 'rel', 'exact' or 'bool'")


def _exact_equal(value: Any, expected: Any) -> bool:
    if type(expected) is bool or type(value) is bool:
        return type(value) is bool and type(expected) is bool and value is expected
    if _is_number(expected):
        # ints compare exactly (float() of a 4000-bit int would raise); floats must be finite
        return _is_number(value) and (type(value) is int or math.isfinite(value)) and value == expected
    if expected is None:
        return value is None
    if type(expected) is str:
        return type(value) is str and value == expected
    if type(expected) is list:
        return (type(value) is list and len(value) == len(expected)
                and all(_exact_equal(v, e) for v, e in zip(value, expected)))
    if type(expected) is dict:
        return (type(value) is dict and set(value) == set(expected)
                and all(_exact_equal(value[k], expected[k]) for k in expected))
    return False


def test_passes(values: list | None, tests: Sequence[Mapping[str, Any]], compare: str,
                tolerance: float | None) -> list[bool]:
    """One bool per test case: did ``values[i]`` pass ``tests[i]["expected"]``?

    ``values`` is truncated to the number of tests; a missing value (or ``values`` None) fails.
    """
    out = []
    values = list(values or [])[: len(tests)]
    for i, test in enumerate(tests):
        out.append(i < len(values) and value_passes(values[i], test["expected"], compare, tolerance))
    return out


test_passes.__test__ = False  # type: ignore[attr-defined]  # not a pytest test despite the name


def _constant_grid() -> list[Any]:
    grid: list[Any] = [0, 1, -1, 0.5, 2, 3, 4, 5, 6, 7, 8, 10, 16, 32, 64, 100, 128, 256, 512, 1000, 1024]
    grid += [2**k for k in range(11, 51)]
    grid += [10**k for k in range(4, 16)] + [10.0**k for k in range(-9, 0)]
    grid += [-2, -10, -0.5]
    grid += [True, False, None, [], "", {}, [0], [1]]
    return grid


#: The knowledge-free constants a baseline is measured over (plus echoing each argument).
KNOWLEDGE_FREE_CONSTANTS: list[Any] = _constant_grid()


def knowledge_free_baseline(tests: Sequence[Mapping[str, Any]], compare: str,
                            tolerance: float | None) -> tuple[float, str]:
    """Best pass fraction of a submission that ignores its arguments' meaning, and what it returns.

    Candidates: every constant in ``KNOWLEDGE_FREE_CONSTANTS`` (0, ±1, small integers, powers of 2 and
    10, ``True``/``False``, ``None``, empty list/string/dict), and echoing the first argument (and each
    other positional argument). Returns ``(fraction, description)``, e.g. ``(0.25, "return 0")`` or
    ``(0.0, "none")`` when nothing passes any test.
    """
    if not tests:
        return 0.0, "none"
    best, best_desc = 0.0, "none"
    for constant in KNOWLEDGE_FREE_CONSTANTS:
        passes = test_passes([constant] * len(tests), tests, compare, tolerance)
        frac = sum(passes) / len(tests)
        if frac > best:
            best, best_desc = frac, f"return {constant!r}"
    n_args = max((len(t.get("args") or []) for t in tests), default=0)
    for position in range(n_args):
        values = [_arg(t, position) for t in tests]
        frac = sum(test_passes(values, tests, compare, tolerance)) / len(tests)
        if frac > best:
            best, best_desc = frac, f"return argument {position}"
    return best, best_desc


def _arg(test: Mapping[str, Any], position: int) -> Any:
    args = test.get("args") or []
    return args[position] if position < len(args) else CallError("no such argument")


def rescale(fraction: float, baseline: float) -> float:
    """(fraction - baseline) / (1 - baseline), clipped to [0, 1]; 0 when baseline >= 1 or NaN."""
    if not (math.isfinite(fraction) and math.isfinite(baseline)) or baseline >= 1.0:
        return 0.0
    baseline = max(0.0, baseline)
    return min(1.0, max(0.0, (fraction - baseline) / (1.0 - baseline)))


def grade_code(info: Mapping[str, Any], code: str | None, *, allow_code_execution: bool | str,
               code_timeout_s: float):
    """Grade extracted ``code`` for a code item. Returns (correctness, exact, reason).

    ``allow_code_execution``: False scores 0 without running anything; True runs the submission only
    under isolation (bwrap), else scores 0 with reason "no isolation available"; ``"unisolated"``
    also runs it in the rlimit fallback (see ``scaling_book.grading.sandbox``).
    """
    function = str(info.get("code_function") or "")
    compare = str(info.get("code_compare") or "")
    tolerance = info.get("tolerance")
    tests = json.loads(info.get("code_tests") or "[]") + json.loads(info.get("code_hidden_tests") or "[]")
    baseline = float(info.get("code_baseline") or 0.0)
    if not function or not tests or compare not in ("rel", "exact", "bool"):
        return 0.0, False, "item is missing its function name, tests or compare mode"
    if code is None:
        return 0.0, False, "no ```python block in the response"
    if len(code) > MAX_SOURCE_CHARS:
        return 0.0, False, f"submission is {len(code)} characters; the limit is {MAX_SOURCE_CHARS}"
    if not allow_code_execution:
        return 0.0, False, "code execution disabled (allow_code_execution=False): scored 0, nothing run"
    mode = execution_isolation(allow_code_execution)
    if mode is None:
        announce_once("no-isolation", NO_ISOLATION_MESSAGE)
        return 0.0, False, ("no isolation available (bubblewrap does not work here); scored 0, nothing run. "
                            "Opt in to unisolated execution with allow_code_execution='unisolated'")
    if mode != "bwrap":
        announce_once("unisolated", UNISOLATED_MESSAGE)
    result = run_function(code, function, [t["args"] for t in tests], code_timeout_s, mode=mode)
    if result.status != "ok":
        return 0.0, False, f"sandbox {result.status} ({result.mode}): {result.detail}"
    passes = test_passes(result.values, tests, compare, tolerance)
    fraction = sum(passes) / len(tests)
    correctness = rescale(fraction, baseline)
    exact = all(passes)
    reason = (f"passed {sum(passes)}/{len(tests)} tests (compare={compare}); baseline {baseline:.3f} "
              f"subtracted -> {correctness:.3f}; sandbox {result.mode} {result.duration_s:.2f} s")
    if result.per_call_errors:
        reason += "; " + "; ".join(result.per_call_errors[:2])
    return correctness, exact, reason
