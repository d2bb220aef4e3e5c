"""The graders: one pure function of (item info, response) per grader type, and a dispatcher.

``grade(info, response)`` reads the final answer with the one extraction rule in ``extract`` and
applies the one character policy of every grader (``extract.normalise_unicode``: NFKC, then ASCII
digits only) and dispatches on ``info["grader"]``: ``numeric``, ``numeric_multi`` (``numeric``), ``mcq`` (``mcq``),
``formula`` (``formula``) and ``code`` (``code``, which runs the sandbox). It never raises and never
returns NaN: a grader error scores 0, unformatted, with the error in ``reason``. ``grade_async`` grades the same
way without blocking an event loop: the sandbox run or sympy request goes to an executor.
"""

from __future__ import annotations

import ast
import asyncio
import math
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from scaling_book.grading.extract import extract_answer, extract_code, normalise_unicode

__all__ = ["GRADER_VERSION", "GRADERS", "Grade", "grade", "grade_async"]

#: Bump when grading behaviour changes; stored on every eval run.
GRADER_VERSION = "2.2.2"

GRADERS = ("numeric", "numeric_multi", "mcq", "formula", "code")


@dataclass(frozen=True)
class Grade:
    """One graded response."""

    correctness: float
    """In [0, 1], never NaN."""
    exact: bool
    """Full credit (correctness == 1.0)."""
    formatted: bool
    """The response followed the answer format: a final answer block whose content parses for this
    grader, or for code items a ```python block that compiles and defines the item's function with a
    top-level ``def``."""
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


def grade(info: Mapping[str, Any], response: str, *, allow_code_execution: bool | str = True,
          code_timeout_s: float = 20.0) -> Grade:
    """Grade ``response`` against the item described by ``info`` (an exported row's ``info``).

    ``allow_code_execution=False``: code items score 0 and no subprocess starts. True: code runs only
    isolated (bwrap), else scores 0 ("no isolation available"); ``"unisolated"``: runs without isolation
    too.
    ``code_timeout_s``: wall-clock seconds for a code submission's whole run.
    """
    prepared = _prepare(info, response, allow_code_execution=allow_code_execution, code_timeout_s=code_timeout_s)
    if isinstance(prepared, Grade):
        return prepared
    return prepared.finish()


async def grade_async(info: Mapping[str, Any], response: str, *, allow_code_execution: bool | str = True,
                      code_timeout_s: float = 20.0, executor: Executor | None = None) -> Grade:
    """``grade``, without blocking the event loop: the one blocking step (a code submission's
    sandbox run, a formula's request to the sympy worker) runs in ``executor`` (a bounded pool:
    its size caps the submissions running at once; None = the loop's default executor).

    Everything that builds Python syntax trees (``ast.parse`` in formula vetting) runs on the
    calling thread, the loop's: on CPython 3.11 AST-object construction is not thread-safe
    (python/cpython#106905), and pydantic parses on that thread too. The executor's step builds
    none (code is checked with ``compile``, which creates no AST objects)."""
    prepared = _prepare(info, response, allow_code_execution=allow_code_execution, code_timeout_s=code_timeout_s)
    if isinstance(prepared, Grade):
        return prepared
    try:
        outcome = await asyncio.get_running_loop().run_in_executor(executor, prepared.blocking)
    except Exception as exc:  # noqa: BLE001 - a grader error scores 0 with the reason, never raises
        return prepared.failed(exc)
    return prepared.complete(outcome)


@dataclass(frozen=True)
class _Pending:
    """A grade whose last step blocks: ``blocking()`` returns (correctness, exact, reason, formatted)."""

    kind: str
    extracted: str | None
    blocking: Callable[[], tuple[float, bool, str, bool]]

    def complete(self, outcome: tuple[float, bool, str, bool]) -> Grade:
        correctness, exact, reason, formatted = outcome
        return _finish(correctness, exact, formatted, reason, self.extracted)

    def failed(self, exc: Exception) -> Grade:
        # a crash is no evidence that the answer parsed: no format reward either
        return _finish(0.0, False, False,
                       f"grader error ({self.kind}): {type(exc).__name__}: {str(exc)[:200]}", self.extracted)

    def finish(self) -> Grade:
        """Run the blocking step here and now."""
        try:
            outcome = self.blocking()
        except Exception as exc:  # noqa: BLE001 - a grader error scores 0 with the reason, never raises
            return self.failed(exc)
        return self.complete(outcome)


def _prepare(info: Mapping[str, Any], response: str, *, allow_code_execution: bool | str,
             code_timeout_s: float) -> Grade | _Pending:
    """Grade up to the blocking step, on the calling thread: a finished ``Grade``, or the step left."""
    kind = str(info.get("grader") or "")
    response = response if isinstance(response, str) else ("" if response is None else str(response))
    extracted: str | None = None
    try:
        if kind == "code":
            from scaling_book.grading import code as code_grader

            extracted = code = extract_code(response)
            formatted = (code is not None and len(code) <= code_grader.MAX_SOURCE_CHARS
                         and _defines_function(code, str(info.get("code_function") or "")))

            def run_code() -> tuple[float, bool, str, bool]:
                return (*code_grader.grade_code(info, code, allow_code_execution=allow_code_execution,
                                                code_timeout_s=code_timeout_s), formatted)
            return _Pending(kind, extracted, run_code)
        extracted = extract_answer(response)
        if extracted is not None and kind in ("numeric", "numeric_multi", "mcq", "formula"):
            normalised, problem = normalise_unicode(extracted)
            if problem:
                return _finish(0.0, False, False, problem, extracted)
            extracted = normalised
        if kind == "formula":
            from scaling_book.grading.formula import prepare_formula

            prepared = prepare_formula(info, extracted)
            return _Pending(kind, extracted, prepared) if callable(prepared) else _finish(
                prepared[0], prepared[1], prepared[3], prepared[2], extracted)
        if kind == "numeric":
            from scaling_book.grading.numeric import grade_numeric as fn
        elif kind == "numeric_multi":
            from scaling_book.grading.numeric import grade_numeric_multi as fn
        elif kind == "mcq":
            from scaling_book.grading.mcq import grade_mcq as fn
        else:
            return _finish(0.0, False, extracted is not None,
                           f"unknown grader {kind!r}; expected one of {', '.join(GRADERS)}", extracted)
        correctness, exact, reason, formatted = fn(info, extracted)
        return _finish(correctness, exact, formatted, reason, extracted)
    except Exception as exc:  # noqa: BLE001 - a grader error scores 0 with the reason, never raises
        return _finish(0.0, False, False,
                       f"grader error ({kind}): {type(exc).__name__}: {str(exc)[:200]}", extracted)


_AST_LOCK = threading.Lock()


def _defines_function(source: str, function: str) -> bool:
    """Whether ``source`` is valid Python that defines ``function`` at top level (the code format
    reward): a ``def``, or an assignment of another name or a lambda to it (``f = f_ref``). Parsed, never run; under a lock, since CPython 3.11's AST-object construction is
    not thread-safe (graders run in threads)."""
    if not function:
        return False
    try:
        compile(source, "<submission>", "exec", dont_inherit=True)
        with _AST_LOCK:
            tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError):
        return False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
            return True
        # an alias of a function defined above (`task_name = reference_name`) or a lambda
        if (isinstance(node, ast.Assign) and isinstance(node.value, (ast.Name, ast.Lambda))
                and any(isinstance(t, ast.Name) and t.id == function for t in node.targets)):
            return True
    return False
