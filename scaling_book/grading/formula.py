"""The formula grader: symbolic equivalence of a model-authored expression or relation.

The answer is model-authored text going into a computer-algebra system, so it is handled in three
stages, and only the last one runs sympy:

1. **normalise** (``normalise``): LaTeX and typography to Python syntax (``\\frac{a}{b}``, ``\\cdot``,
   ``×``, ``^`` as power, ``≤``/``\\le``, ``x_{ici}`` to ``x_ici``, implicit products such as ``2B``,
   ``)(`` or ``T D``), and a leading ``name =`` dropped.
2. **vet** (``vet``): a length cap, a character class, and a Python ``ast`` walk that admits only
   numbers (int/float literals), the item's declared symbols, ``+ - * / **``, unary signs, parentheses,
   one comparison (``< <= > >=``) and calls of a fixed function whitelist (``FUNCTIONS``) with
   positional arguments. No attributes, subscripts, strings, lambdas, keywords, dunders or other names,
   and no exponent containing a power of constants (``2**30**5``, ``10**10**10``).
3. **compare** in a separate worker process (``sympy_worker.py``) that parses with sympy's
   ``parse_expr`` under a minimal namespace (every declared symbol a plain positive ``Symbol``, so
   ``E``, ``N``, ``S``, ``Q``, ``I``, ``O``, ``beta``... are variables) and compares. Each request is
   bounded in wall-clock time (``FORMULA_TIMEOUT_S``) and the worker's address space is capped
   (``FORMULA_MEMORY_HEADROOM_BYTES`` above its size after importing sympy); an overrunning worker is
   killed and replaced. Nothing in this process evaluates the answer.

Equivalence (``sympy_worker.numerically_equal``): an exact verdict first, with every symbol positive
(rational functions compared in canonical form, which decides either way; other expressions proved
equal by ``simplify(a - b) == 0`` or a rewrite of it); an answer using ``exp``, ``log`` or a
non-integer power that no gold form uses pays only with that proof, since sampling cannot see
``B*n + exp(-1000*B)``; float literals with more than 15 significant digits are refused (``ast``
would round them); only when sympy cannot decide otherwise, agreement to 1e-20 relative at
sample points drawn where the item's quantities live (per-symbol ranges by name convention, e.g.
batch ``B`` 1..1e7, bandwidth ``W`` 1e9..1e13; log-uniform draws plus the ranges' ends), and, when
either side uses ``floor`` or ``ceiling``, also at integer points. Before that, in this process: an
answer may call a non-smooth function (``min``, ``max``, ``abs``, ``floor``, ``ceiling``) only when a
gold form uses one of the same family; ``name = ...`` with a declared symbol as ``name`` is a claim
and refused; an implicit product right after a division (``C p/16W``) is ambiguous and refused.
Relations are split on the operator
and normalised to ``D > 0`` or ``D >= 0`` with ``D`` = greater side minus lesser side, so ``B/X > R``
and ``R < B/X`` are the same claim; strictness must match; the answer's ``D`` must equal the gold's or
be a positive multiple of it; and a relation with no free symbols (``1 < 2``) never passes. An item's
hand-written ``equivalents`` are accepted like its answer.
"""

from __future__ import annotations

import ast
import atexit
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from scaling_book.grading.extract import strip_markup
from scaling_book.grading.sympy_supervisor import (
    FORMULA_MEMORY_HEADROOM_BYTES,
    FormulaError,
    FormulaTimeout,
    _Worker,
)

__all__ = [
    "FORMULA_MEMORY_HEADROOM_BYTES",
    "FORMULA_TIMEOUT_S",
    "FUNCTIONS",
    "FormulaError",
    "FormulaTimeout",
    "check_parses",
    "grade_formula",
    "normalise",
    "prepare_formula",
    "vet",
]

#: Wall-clock seconds allowed for one formula request (parse or comparison) in the worker.
FORMULA_TIMEOUT_S = 2.0
#: Longest answer accepted, in characters, before and after normalisation.
MAX_RAW_CHARS = 1000
MAX_CHARS = 400
MAX_NODES = 300
MAX_INT_DIGITS = 30
#: Functions an answer may call (sympy meaning in the worker).
FUNCTIONS = frozenset({"sqrt", "log", "ln", "log2", "log10", "exp", "min", "max", "Min", "Max", "abs",
                       "Abs", "ceil", "ceiling", "floor"})

_AST_LOCK = threading.Lock()
_ALLOWED_CHARS = re.compile(r"^[A-Za-z0-9_+\-*/().,<>=\s]*$")
_OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


# --------------------------------------------------------------------------------------------------
# 1. normalise
# --------------------------------------------------------------------------------------------------


def _replace_braced_command(text: str, command: str, n_args: int, render) -> str:
    """Replace ``\\command{a}{b}`` (``n_args`` brace groups) by ``render(a, b)``."""
    for _ in range(50):
        i = text.find("\\" + command)
        if i < 0:
            break
        j = i + len(command) + 1
        args = []
        for _ in range(n_args):
            while j < len(text) and text[j] == " ":
                j += 1
            if j >= len(text) or text[j] != "{":
                return text  # malformed: leave it, vetting will refuse it
            depth, k = 1, j + 1
            while k < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[k], 0)
                k += 1
            if depth:
                return text
            args.append(text[j + 1: k - 1])
            j = k
        text = text[:i] + render(*args) + text[j:]
    return text


# An operand after "/" (a number, a name or call, a parenthesised group, with any power chain) directly
# followed by another operand with no operator between them: "C p/16W" reads as (C p/16) W in Python
# and as C p/(16 W) to many readers. Refused rather than guessed.
_PAREN = r"\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)"
_OPERAND = rf"(?>\d+(?:_\d+)*(?:\.\d+)?(?:[eE][+-]?\d+)?|[A-Za-z_][A-Za-z0-9_]*(?:\s*{_PAREN})?|{_PAREN})"
_AMBIGUOUS_AFTER_DIVISION = re.compile(
    rf"/\s*(?>{_OPERAND}(?:\s*\*\*\s*[-+]?\s*{_OPERAND})*)\s*(?=[A-Za-z_0-9(])")
#: Non-smooth functions, by family: an answer may use one only when a gold form uses its family.
NON_SMOOTH = {"min": "min", "Min": "min", "max": "max", "Max": "max", "abs": "abs", "Abs": "abs",
              "floor": "rounding", "ceil": "rounding", "ceiling": "rounding"}


def non_smooth_families(form: Mapping[str, str]) -> set[str]:
    """The non-smooth function families (``NON_SMOOTH``) a vetted form calls."""
    names: set[str] = set()
    for key in ("expr", "lhs", "rhs"):
        if key in form:
            names |= set(re.findall(r"\b([A-Za-z]+)\s*\(", form[key]))
    return {NON_SMOOTH[n] for n in names if n in NON_SMOOTH}


def normalise(text: str, symbols: Iterable[str] = ()) -> str:
    """Rewrite a written formula into the Python syntax that ``vet`` accepts (see module doc)."""
    if len(text) > MAX_RAW_CHARS:
        raise FormulaError(f"answer is {len(text)} characters; the limit is {MAX_RAW_CHARS}")
    symbols = set(symbols)
    t = strip_markup(text, emphasis=False)
    t = _replace_braced_command(t, "frac", 2, lambda a, b: f"(({a})/({b}))")
    t = _replace_braced_command(t, "dfrac", 2, lambda a, b: f"(({a})/({b}))")
    t = _replace_braced_command(t, "tfrac", 2, lambda a, b: f"(({a})/({b}))")
    t = _replace_braced_command(t, "sqrt", 1, lambda a: f"sqrt({a})")
    replacements = [
        ("\\leq", "<="), ("\\le", "<="), ("\\geq", ">="), ("\\ge", ">="), ("\\lt", "<"), ("\\gt", ">"),
        ("≤", "<="), ("≥", ">="), ("⩽", "<="), ("⩾", ">="), ("·", "*"), ("×", "*"), ("⋅", "*"),
        ("\\ln", "ln"), ("\\log", "log"), ("\\exp", "exp"), ("\\min", "min"), ("\\max", "max"),
        ("\\lceil", "ceil("), ("\\rceil", ")"), ("\\lfloor", "floor("), ("\\rfloor", ")"),
        ("÷", "/"), ("^", "**"),
    ]
    for old, new in replacements:
        t = t.replace(old, new)
    t = re.sub(r"_\{([A-Za-z0-9_]+)\}", r"_\1", t)  # x_{ici} -> x_ici
    t = t.replace("{", "(").replace("}", ")")
    t = t.strip().rstrip(".")
    # A leading "name =" (not a comparison) is a label: "t = 2*B/W" -> "2*B/W". A declared symbol on
    # the left ("n = B*n") is a claim about that symbol, not a label: refused.
    m = re.match(r"^\s*([A-Za-z][A-Za-z0-9_]*)(?:\([A-Za-z0-9_, ]*\))?\s*=(?![=<>])\s*", t)
    if m and "=" not in t[m.end():].replace("<=", "").replace(">=", ""):
        if m.group(1) in symbols:
            raise FormulaError(f"{m.group(1)!r} is a symbol of the question: '{m.group(1)} = ...' is an "
                               f"equation, not a label; give the expression alone")
        t = t[m.end():]
    t = t.replace("==", "=")
    ambiguous = _AMBIGUOUS_AFTER_DIVISION.search(t)
    if ambiguous:
        raise FormulaError(f"ambiguous implicit product after a division ({ambiguous.group(0).strip()!r}...): "
                           f"write the denominator in parentheses or use * explicitly")
    # Implicit multiplication: 2B, 2(x), )(, )x, and a declared symbol followed by "(". A digit inside
    # a name (log2, M_X2) does not start a product; 1_000 and 2e3 are numbers.
    t = re.sub(r"(?<![A-Za-z0-9_.])((?>\d+(?:_\d+)*(?:\.\d+)?(?:[eE][+-]?\d+)?))\s*(?=[A-Za-z(]|_(?!\d))",
               r"\1*", t)
    t = re.sub(r"\)\s*(?=[A-Za-z0-9_(])", ")*", t)

    def _call_or_product(m: re.Match[str]) -> str:
        name = m.group(1)
        return f"{name}*(" if name in symbols and name not in FUNCTIONS else f"{name}("

    t = re.sub(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(", _call_or_product, t)

    # Names side by side are a product: "T D / 8", "beta gamma" (vetting still refuses any unknown name).
    def _space_product(m: re.Match[str]) -> str:
        return m.group(0) if m.group(1) in FUNCTIONS else m.group(1) + "*"

    t = re.sub(r"\b([A-Za-z_][A-Za-z0-9_]*)\s+(?=[A-Za-z_])", _space_product, t)
    return re.sub(r"\s+", " ", t).strip()


# --------------------------------------------------------------------------------------------------
# 2. vet
# --------------------------------------------------------------------------------------------------


def _is_constant(node: ast.AST) -> bool:
    return all(not isinstance(n, ast.Name) for n in ast.walk(node))


def _has_constant_power(node: ast.AST) -> bool:
    """Whether ``node`` contains ``a ** b`` with both sides free of symbols (a tower such as 9**9**9)."""
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow) and _is_constant(n)
               for n in ast.walk(node))


def _vet_node(node: ast.AST, symbols: set[str], budget: list[int], top: bool) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise FormulaError(f"expression has more than {MAX_NODES} parts")
    if isinstance(node, ast.Expression):
        _vet_node(node.body, symbols, budget, top=True)
    elif isinstance(node, ast.Compare):
        if not top:
            raise FormulaError("a comparison is only allowed at the top level")
        if len(node.ops) != 1:
            raise FormulaError("chained comparisons are not allowed; state one relation")
        if type(node.ops[0]) not in _OPS:
            raise FormulaError("only <, <=, > and >= relations are allowed")
        _vet_node(node.left, symbols, budget, top=False)
        _vet_node(node.comparators[0], symbols, budget, top=False)
    elif isinstance(node, ast.BinOp):
        if not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)):
            raise FormulaError(f"operator {type(node.op).__name__} is not allowed")
        if isinstance(node.op, ast.Pow) and _has_constant_power(node.right):
            raise FormulaError("an exponent may not contain a power of constants (e.g. 2**30**5)")
        _vet_node(node.left, symbols, budget, top=False)
        _vet_node(node.right, symbols, budget, top=False)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.UAdd, ast.USub)):
            raise FormulaError(f"operator {type(node.op).__name__} is not allowed")
        _vet_node(node.operand, symbols, budget, top=False)
    elif isinstance(node, ast.Constant):
        if type(node.value) not in (int, float):
            raise FormulaError(f"only numbers are allowed as literals, not {type(node.value).__name__}")
        if type(node.value) is float and not (node.value == node.value and abs(node.value) != float("inf")):
            raise FormulaError("non-finite number")
        if type(node.value) is int and len(str(abs(node.value))) > MAX_INT_DIGITS:
            raise FormulaError(f"integer literal longer than {MAX_INT_DIGITS} digits")
    elif isinstance(node, ast.Name):
        if node.id.startswith("_"):
            raise FormulaError(f"name {node.id!r} is not allowed")
        if node.id not in symbols:
            raise FormulaError(f"unknown name {node.id!r}; allowed symbols: {', '.join(sorted(symbols))}")
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            name = node.func.id if isinstance(node.func, ast.Name) else type(node.func).__name__
            raise FormulaError(f"function {name!r} is not allowed; allowed: {', '.join(sorted(FUNCTIONS))}")
        if node.keywords or not node.args or len(node.args) > 8:
            raise FormulaError(f"call of {node.func.id} must have 1-8 positional arguments and no keywords")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise FormulaError("starred arguments are not allowed")
            _vet_node(arg, symbols, budget, top=False)
    else:
        raise FormulaError(f"{type(node).__name__} is not allowed in a formula")


#: A float literal with more digits than a double holds is rounded by ``ast`` before sympy sees it
#: (``1.0000000000000000000001`` becomes ``1.0``): refused rather than graded as another number.
MAX_FLOAT_DIGITS = 15
_FLOAT_LITERAL = re.compile(r"(?<![\w.])(\d[\d_]*\.[\d_]*|\.\d[\d_]*|\d[\d_]*(?=[eE][+-]?\d))([eE][+-]?\d+)?")


def _long_float(expression: str) -> str | None:
    """The first float literal in ``expression`` with more than MAX_FLOAT_DIGITS significant digits."""
    for m in _FLOAT_LITERAL.finditer(expression):
        digits = m.group(1).replace("_", "").replace(".", "").lstrip("0").rstrip("0")
        if len(digits) > MAX_FLOAT_DIGITS:
            return m.group(0)
    return None


def vet(expression: str, symbols: Iterable[str]) -> dict[str, str]:
    """Vet a normalised expression; return the form sent to the worker.

    The form is ``{"kind": "expr", "expr": s}`` or ``{"kind": "rel", "op": o, "lhs": s, "rhs": s}``, with
    ``s`` re-rendered from the vetted syntax tree (so the worker never sees the raw text).
    Raises ``FormulaError`` saying what was refused.
    """
    symbols = {s for s in symbols if s}
    for s in symbols:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", s) or s in FUNCTIONS:
            raise FormulaError(f"declared symbol {s!r} is not a plain identifier (or shadows a function)")
    if not expression or not expression.strip():
        raise FormulaError("empty formula")
    if len(expression) > MAX_CHARS:
        raise FormulaError(f"formula is {len(expression)} characters; the limit is {MAX_CHARS}")
    if not _ALLOWED_CHARS.match(expression):
        bad = sorted({c for c in expression if not _ALLOWED_CHARS.match(c)})
        raise FormulaError(f"characters not allowed in a formula: {''.join(bad)[:20]!r}")
    long_float = _long_float(expression)
    if long_float:
        raise FormulaError(f"number {long_float!r} has more than {MAX_FLOAT_DIGITS} significant digits "
                           f"(a float would silently round it)")
    try:
        # CPython 3.11's AST-object construction is not thread-safe (graders run in threads).
        with _AST_LOCK:
            tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        raise FormulaError(f"not a well-formed expression: {type(e).__name__}: {e}") from None
    try:
        _vet_node(tree, symbols, [MAX_NODES], top=True)
    except RecursionError:
        raise FormulaError("formula is nested too deeply") from None
    body = tree.body
    if isinstance(body, ast.Compare):
        return {"kind": "rel", "op": _OPS[type(body.ops[0])], "lhs": ast.unparse(body.left),
                "rhs": ast.unparse(body.comparators[0])}
    return {"kind": "expr", "expr": ast.unparse(body)}


# --------------------------------------------------------------------------------------------------
# 3. the worker
# --------------------------------------------------------------------------------------------------

_WORKER = _Worker(FORMULA_MEMORY_HEADROOM_BYTES)
atexit.register(_WORKER.close)


def _worker_request(payload: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
    return _WORKER.request(payload, FORMULA_TIMEOUT_S if timeout_s is None else timeout_s)


def worker_restarts() -> int:
    """How many times the worker has been killed and replaced in this process (for tests/benchmarks)."""
    return _WORKER.restarts


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


def check_parses(expression: str, symbols: list[str]) -> None:
    """Raise ``FormulaError`` unless ``expression`` normalises, vets and parses under sympy.

    Used by the build gate for every formula answer and declared equivalent.
    """
    form = vet(normalise(expression, symbols), symbols)
    resp = _worker_request({"op": "parse", "form": form, "symbols": list(symbols)})
    if not resp.get("ok"):
        raise FormulaError(f"sympy could not parse {expression!r}: {resp.get('error')}")


def grade_formula(info: Mapping[str, Any], answer: str | None, *,
                  timeout_s: float | None = None) -> tuple[float, bool, str, bool]:
    """Grade an extracted answer. Returns (correctness, exact, reason, formatted)."""
    prepared = prepare_formula(info, answer, timeout_s=timeout_s)
    return prepared() if callable(prepared) else prepared


def prepare_formula(info: Mapping[str, Any], answer: str | None, *, timeout_s: float | None = None
                    ) -> tuple[float, bool, str, bool] | Callable[[], tuple[float, bool, str, bool]]:
    """``grade_formula`` in two steps: normalise and vet here (``ast.parse``: call this on the thread
    that owns syntax-tree building, see ``scaling_book.grading.grade_async``), then either the final
    (correctness, exact, reason, formatted), or a function that asks the sympy worker (blocking I/O,
    no ``ast``; safe in a worker thread) and returns them."""
    symbols = [str(s) for s in (info.get("formula_symbols") or [])]
    gold_texts = [str(info.get("formula_answer") or "")] + [str(e) for e in (info.get("formula_equivalents") or [])]
    gold_texts = [g for g in gold_texts if g.strip()]
    if not gold_texts:
        return 0.0, False, "item has no formula answer", answer is not None
    if answer is None:
        return 0.0, False, "no <answer> block", False
    try:
        normalised = normalise(answer, symbols)
        form = vet(normalised, symbols)
    except FormulaError as e:
        return 0.0, False, f"answer {answer[:80]!r} refused: {e}", False
    golds = []
    for g in gold_texts:
        try:
            golds.append(vet(normalise(g, symbols), symbols))
        except FormulaError as e:
            return 0.0, False, f"item's gold formula {g!r} does not vet ({e}); scored 0", True
    extra = non_smooth_families(form) - set().union(*(non_smooth_families(g) for g in golds))
    if extra:
        return 0.0, False, (f"answer {normalised[:80]!r} refused: uses {', '.join(sorted(extra))}, a non-smooth "
                            f"function the item's formula does not use"), True

    def compare() -> tuple[float, bool, str, bool]:
        try:
            resp = _worker_request({"op": "equiv", "form": form, "golds": golds, "symbols": symbols},
                                   timeout_s)
        except FormulaError as e:
            return 0.0, False, f"answer {normalised[:80]!r}: {e}", False
        if not resp.get("ok"):  # a crash or an overrun of the worker earns no format reward either
            return 0.0, False, f"answer {normalised[:80]!r} could not be compared: {resp.get('error')}", False
        if resp.get("equal"):
            which = "the answer" if resp.get("matched") == 0 else f"equivalent {resp.get('matched')}"
            return 1.0, True, f"{normalised[:80]!r} matches {which}: {resp.get('reason')}", True
        return 0.0, False, f"{normalised[:80]!r} is not equivalent: {resp.get('reason')}", True
    return compare
