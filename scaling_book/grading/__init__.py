"""The graders: one pure function of (item info, response) per grader type, and a dispatcher.

``grade(info, response)`` reads the final answer with the one extraction rule in ``extract`` and
dispatches on ``info["grader"]``: ``numeric``, ``numeric_multi`` (``numeric``), ``mcq`` (``mcq``),
``formula`` (``formula``) and ``code`` (``code``, which runs the sandbox). It never raises and never
returns NaN: a grader error scores 0 with the error in ``reason``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scaling_book.grading.extract import extract_answer, extract_code

__all__ = ["GRADER_VERSION", "GRADERS", "Grade", "grade"]

#: Bump when grading behaviour changes; stored on every eval run.
GRADER_VERSION = "1.2.0"

GRADERS = ("numeric", "numeric_multi", "mcq", "formula", "code")


@dataclass(frozen=True)
class Grade:
    """One graded response."""

    correctness: float
    """In [0, 1], never NaN."""
    exact: bool
    """Full credit (correctness == 1.0)."""
    formatted: bool
    """The response followed the answer format: a final answer block (or ```python block for code
    items) whose content parses for this grader."""
    reason: str
    """What was extracted and why it scored what it did (stored per rollout)."""
    extracted: str | None
    """The extracted answer text (or code), None when there was none."""


def _finish(correctness: float, exact: bool, formatted: bool, reason: str, extracted: str | None) -> Grade:
    c = float(correctness)
    if not math.isfinite(c):
        c, reason = 0.0, f"non-finite correctness replaced by 0 ({reason})"
    c = min(1.0, max(0.0, c))
    return Grade(correctness=c, exact=bool(exact) and c == 1.0, formatted=bool(formatted),
                 reason=reason, extracted=extracted)


def grade(info: Mapping[str, Any], response: str, *, allow_code_execution: bool = True,
          code_timeout_s: float = 20.0) -> Grade:
    """Grade ``response`` against the item described by ``info`` (an exported row's ``info``).

    ``allow_code_execution=False``: code items score 0 and no subprocess starts.
    ``code_timeout_s``: wall-clock seconds for a code submission's whole run.
    """
    kind = str(info.get("grader") or "")
    response = response if isinstance(response, str) else ("" if response is None else str(response))
    extracted: str | None = None
    try:
        if kind == "code":
            from scaling_book.grading import code as code_grader

            extracted = extract_code(response)
            formatted = (extracted is not None and len(extracted) <= code_grader.MAX_SOURCE_CHARS
                         and _compiles(extracted))
            correctness, exact, reason = code_grader.grade_code(
                info, extracted, allow_code_execution=allow_code_execution, code_timeout_s=code_timeout_s)
            return _finish(correctness, exact, formatted, reason, extracted)
        extracted = extract_answer(response)
        if kind == "numeric":
            from scaling_book.grading.numeric import grade_numeric as fn
        elif kind == "numeric_multi":
            from scaling_book.grading.numeric import grade_numeric_multi as fn
        elif kind == "mcq":
            from scaling_book.grading.mcq import grade_mcq as fn
        elif kind == "formula":
            from scaling_book.grading.formula import grade_formula as fn
        else:
            return _finish(0.0, False, extracted is not None,
                           f"unknown grader {kind!r}; expected one of {', '.join(GRADERS)}", extracted)
        correctness, exact, reason, formatted = fn(info, extracted)
        return _finish(correctness, exact, formatted, reason, extracted)
    except Exception as exc:  # noqa: BLE001 - a grader error scores 0 with the reason, never raises
        return _finish(0.0, False, extracted is not None,
                       f"grader error ({kind}): {type(exc).__name__}: {str(exc)[:200]}", extracted)


def _compiles(source: str) -> bool:
    """Whether ``source`` is syntactically valid Python. Compiled to bytecode, never run; not
    ``ast.parse``, whose AST-object construction is not thread-safe in CPython 3.11 (graders run in
    threads)."""
    try:
        compile(source, "<submission>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError):
        return False
    return True
