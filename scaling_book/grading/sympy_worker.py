"""The formula worker: the only process that hands model-authored text to sympy.

Run by ``scaling_book.grading.formula`` as ``python sympy_worker.py <headroom-bytes>``; reads
one JSON request per line on stdin, writes one JSON response per line on stdout. After importing
sympy it caps its own address space (``RLIMIT_AS``) at its current size plus the headroom; the parent bounds every request in wall-clock
time and kills and restarts this process when a request overruns. Requests have already been vetted
by ``formula.vet`` (only numbers, declared symbols, arithmetic, comparisons and whitelisted functions).

Equivalence (``numerically_equal``): an exact symbolic verdict first (rational functions are compared
in canonical form, either way; other expressions are proved equal when ``simplify(a - b)``, or an
expand/powsimp/logcombine rewrite of it, is 0); an answer using an exp, log or non-integer power
that the gold does not use is refused without that proof; only otherwise, when sympy cannot decide,
sampling: every symbol over its range by name convention (``RANGES``),
log-uniform draws plus the ranges' ends, agreement to ``RELATIVE_AGREEMENT`` at every point.

Standalone on purpose (sympy and the standard library only), so it starts without the package.
"""

from __future__ import annotations

import json
import math
import random
import resource
import sys

import sympy
from sympy.parsing.sympy_parser import auto_number, parse_expr, rationalize

FUNCTIONS = {
    "sqrt": sympy.sqrt,
    "log": sympy.log,
    "ln": sympy.log,
    "log2": lambda x: sympy.log(x, 2),
    "log10": lambda x: sympy.log(x, 10),
    "exp": sympy.exp,
    "min": sympy.Min,
    "max": sympy.Max,
    "Min": sympy.Min,
    "Max": sympy.Max,
    "abs": sympy.Abs,
    "Abs": sympy.Abs,
    "ceil": sympy.ceiling,
    "ceiling": sympy.ceiling,
    "floor": sympy.floor,
}
GLOBALS = {
    "__builtins__": {},
    "Integer": sympy.Integer,
    "Float": sympy.Float,
    "Rational": sympy.Rational,
}
N_POINTS = 8
N_INT_POINTS = 3
DIGITS = 30
#: Relative agreement required at every sample point. Values are computed to DIGITS significant digits
#: from exact rationals, so honest equivalents agree to ~1e-28; 1e-20 also refuses a tiny added term
#: (B*n + B/1e12 differs from B*n by 1e-12 relative, which a 1e-9 check would pay).
RELATIVE_AGREEMENT = 1e-20

#: Where the book's quantities live, by symbol-name convention: (low, high) per name; a name not
#: listed takes DEFAULT_RANGE. Sample points are drawn log-uniformly over the whole range, plus its ends.
RANGES = {
    "B": (1.0, 1e7),          # batch size, tokens
    "W": (1e9, 1e13),         # bandwidth, bytes/s
    "C": (1e12, 1e16),        # FLOPs/s
    "P": (1e6, 1e13),         # parameters
    "p": (1.0, 64.0),         # bits per weight
    "V": (1.0, 1e15),         # bytes
    "N": (1.0, 1e6), "n": (1.0, 1e6),
    "D": (1.0, 1e6), "F": (1.0, 1e6), "E": (1.0, 1e6), "H": (1.0, 1e6), "K": (1.0, 1e6),
    "T": (1.0, 1e6), "S": (1.0, 1e6), "L": (1.0, 1e6),
    "X": (1.0, 1e4), "Y": (1.0, 1e4), "Z": (1.0, 1e4), "M_X": (1.0, 1e4), "M_Y": (1.0, 1e4),
    "G": (1.0, 1e3), "k": (1.0, 1e3),
}
DEFAULT_RANGE = (1e-3, 1e6)


def _range(symbol) -> tuple[float, float]:
    return RANGES.get(str(symbol), DEFAULT_RANGE)


def parse(text: str, symbols: list[str]) -> sympy.Expr:
    local = {name: sympy.Symbol(name, positive=True) for name in symbols}
    for name, fn in FUNCTIONS.items():
        local.setdefault(name, fn)
    expr = parse_expr(text, local_dict=local, global_dict=dict(GLOBALS),
                      transformations=(auto_number, rationalize), evaluate=True)
    if not isinstance(expr, sympy.Expr):
        raise ValueError(f"not an expression: {type(expr).__name__}")
    return expr


def parse_form(form: dict, symbols: list[str]):
    """A vetted form: {"kind": "expr", "expr": s} or {"kind": "rel", "op": o, "lhs": s, "rhs": s}.

    Relations are normalised to (strict, D) meaning D > 0 (strict) or D >= 0, D = greater - lesser.
    """
    if form["kind"] == "expr":
        return ("expr", parse(form["expr"], symbols))
    lhs, rhs = parse(form["lhs"], symbols), parse(form["rhs"], symbols)
    op = form["op"]
    strict = op in ("<", ">")
    d = rhs - lhs if op in ("<", "<=") else lhs - rhs
    return ("rel", strict, d)


def _points(free: set, seed: int) -> list[dict]:
    """Sample points in each symbol's range: every symbol at its low end, at its high end, each symbol
    alone at its high end (the others low) and alone at its low end (the others high), then N_POINTS
    log-uniform draws."""
    rng = random.Random(seed)
    names = sorted(free, key=str)
    lo = {s: _range(s)[0] for s in names}
    hi = {s: _range(s)[1] for s in names}
    raw = [dict(lo), dict(hi)]
    if len(names) > 1:
        for s in names:
            raw.append({**lo, s: hi[s]})
            raw.append({**hi, s: lo[s]})
    for _ in range(N_POINTS):
        raw.append({s: 10 ** rng.uniform(math.log10(lo[s]), math.log10(hi[s])) for s in names})
    return [{s: sympy.Float(v, DIGITS) for s, v in p.items()} for p in raw]


def _integer_points(free: set, seed: int) -> list[dict]:
    """Integer sample points: powers of two, and multiples of 720720 (divisible by every n <= 16), so
    that a count divides evenly by whatever an answer divides it by."""
    rng = random.Random(seed)
    names = sorted(free, key=str)
    pts = [{s: sympy.Integer(2 ** rng.randint(3, 10)) for s in names} for _ in range(N_INT_POINTS)]
    pts += [{s: sympy.Integer(720720 * rng.randint(1, 4)) for s in names} for _ in range(N_INT_POINTS)]
    return pts


def _num(expr, point) -> complex | None:
    try:
        v = expr.evalf(DIGITS, subs=point)
        c = complex(v)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError, AttributeError):
        return None
    if c != c or abs(c) == float("inf"):
        return None
    return c


def _differ(va: complex, vb: complex) -> bool:
    return abs(va - vb) > RELATIVE_AGREEMENT * max(abs(va), abs(vb), 1e-300)


def symbolic_verdict(a, b) -> bool | None:
    """Decide a == b exactly when sympy can, with every symbol positive: for rational functions
    ``cancel`` gives a canonical form, so its verdict is final either way; otherwise ``simplify(a - b)
    == 0`` proves equality. None when undecided (then sampling decides)."""
    d = a - b
    if d == 0:
        return True
    if d.is_rational_function():
        return sympy.cancel(sympy.together(d)) == 0
    if d.has(sympy.floor, sympy.ceiling, sympy.Min, sympy.Max, sympy.Abs):
        return None  # simplify is slow on these and rarely decides; sampling (and integer points) do
    if sympy.simplify(d) == 0:
        return True
    for rewrite in (lambda e: sympy.expand(sympy.powsimp(e, force=True), force=True),
                    lambda e: sympy.simplify(sympy.logcombine(sympy.expand_log(e, force=True), force=True)),
                    lambda e: sympy.simplify(sympy.powdenest(e, force=True))):
        if rewrite(d) == 0:
            return True
    return None


def transcendental_families(expr) -> set[str]:
    """The non-rational function families in ``expr``: ``exp``, ``log`` and ``power`` (a power whose
    exponent is not an integer: sqrt, x**0.5, x**(1 + 1e-25), 2**n)."""
    families = set()
    if expr.has(sympy.exp):
        families.add("exp")
    if expr.has(sympy.log):
        families.add("log")
    if any(not p.exp.is_Integer for p in expr.atoms(sympy.Pow)):
        families.add("power")
    return families


def numerically_equal(a, b) -> tuple[bool, str]:
    """Equivalence of two expressions: the symbolic verdict when there is one, else agreement to
    RELATIVE_AGREEMENT at every sample point of the symbols' ranges (see ``_points``)."""
    try:
        verdict = symbolic_verdict(a, b)
    except Exception:  # noqa: BLE001 - sympy raises many types; fall back to sampling
        verdict = None
    if verdict is True:
        return True, "proved equal symbolically (symbols positive)"
    if verdict is False:
        return False, "a different rational function (exact comparison)"
    # Sampling cannot see a term far below its agreement bound (B*n + exp(-1000*B)) or one that grows
    # only outside the sampled ranges (exp(B - 10**8)): an exp, log or non-integer power the gold does
    # not use must be proved equal, and sympy could not.
    extra = transcendental_families(a) - transcendental_families(b)
    if extra:
        return False, (f"uses {', '.join(sorted(extra))}, which the item's formula does not, and sympy could "
                       f"not prove the two equal (no credit without a proof)")
    free = a.free_symbols | b.free_symbols
    valid = 0
    for point in _points(free, seed=1234):
        va, vb = _num(a, point), _num(b, point)
        if va is None and vb is None:
            continue
        if va is None or vb is None:
            return False, "defined at a point where the other side is not"
        valid += 1
        if _differ(va, vb):
            where = ", ".join(f"{s}={float(v):.3g}" for s, v in sorted(point.items(), key=lambda kv: str(kv[0])))
            return False, f"differs at a sample point ({where})"
    if valid >= 3:
        if a.has(sympy.floor, sympy.ceiling) or b.has(sympy.floor, sympy.ceiling):
            # floor(N/8) + 1 and ceil(N/8) agree at every real sample point, not at N = 64
            for point in _integer_points(free, seed=4321):
                va, vb = _num(a, point), _num(b, point)
                if va is None or vb is None:
                    continue
                if _differ(va, vb):
                    return False, "differs at an integer sample point"
        return True, f"agrees at {valid} sample points over the symbols' ranges"
    return False, "too few points where both sides are defined"


def equivalent(answer, gold) -> tuple[bool, str]:
    if answer[0] != gold[0]:
        return False, ("a relation where an expression was asked" if answer[0] == "rel"
                       else "an expression where a relation was asked")
    if answer[0] == "expr":
        return numerically_equal(answer[1], gold[1])
    _, strict_a, d_a = answer
    _, strict_g, d_g = gold
    if not d_a.free_symbols:
        return False, "the relation has no free symbols (a constant truth value)"
    if strict_a != strict_g:
        return False, "strictness differs (< vs <=)"
    same, why = numerically_equal(d_a, d_g)
    if same:
        return True, "same relation: " + why
    # The same claim scaled by a positive factor: D_a = r * D_g with r > 0 (symbols are positive).
    try:
        ratio = sympy.simplify(d_a / d_g)
    except Exception as exc:  # noqa: BLE001
        return False, f"could not compare relations: {type(exc).__name__}"
    if ratio.is_positive is True:
        return True, f"same relation up to the positive factor {ratio}"
    free = ratio.free_symbols
    values = [_num(ratio, p) for p in _points(free, seed=99)]
    if not free and values and all(v is not None and abs(v.imag) < 1e-12 and v.real > 0 for v in values):
        return True, "same relation up to a positive constant"
    return False, "different relation (orientation or sides differ)"


def handle(req: dict) -> dict:
    op = req.get("op")
    symbols = req.get("symbols") or []
    if op == "ping":
        return {"ok": True}
    if op == "parse":
        parse_form(req["form"], symbols)
        return {"ok": True}
    if op == "equiv":
        answer = parse_form(req["form"], symbols)
        reasons = []
        for i, gold_form in enumerate(req["golds"]):
            gold = parse_form(gold_form, symbols)
            same, why = equivalent(answer, gold)
            if same:
                return {"ok": True, "equal": True, "matched": i, "reason": why}
            reasons.append(why)
        return {"ok": True, "equal": False, "matched": None, "reason": reasons[0] if reasons else "no gold"}
    return {"ok": False, "error": f"unknown op {op!r}"}


def _address_space_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _warm_up() -> None:
    """Run one comparison of each kind, so that sympy's lazy imports and caches (polys, simplify,
    evalf) are paid for at start-up rather than inside the first request's time bound."""
    for gold, answer in (("T/(8*D)", "T/(8*D)"), ("log2(T)*D", "log(T)/log(2)*D")):
        equivalent(parse_form({"kind": "expr", "expr": answer}, ["T", "D"]),
                   parse_form({"kind": "expr", "expr": gold}, ["T", "D"]))
    equivalent(parse_form({"kind": "rel", "op": ">", "lhs": "T", "rhs": "D"}, ["T", "D"]),
               parse_form({"kind": "rel", "op": "<", "lhs": "D", "rhs": "T"}, ["T", "D"]))


def main() -> None:
    headroom = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    _warm_up()
    if headroom:
        limit = _address_space_bytes() + headroom
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    sys.setrecursionlimit(3000)
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            resp = handle(json.loads(line))
        except MemoryError:
            resp = {"ok": False, "error": "MemoryError: the formula exceeded the worker's memory bound"}
        except RecursionError:
            resp = {"ok": False, "error": "RecursionError: the formula is nested too deeply"}
        except Exception as exc:  # noqa: BLE001 - report, never die on a bad formula
            resp = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        out.write(json.dumps(resp) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
