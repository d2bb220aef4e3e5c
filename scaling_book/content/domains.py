"""Input domains of the code items and the hidden test cases drawn from them (EvalPlus-style).

`seed/code_domains.toml` (format in seed/README.md, "Hidden test cases") declares, per code item, a
domain for every argument of its function. At build the gate draws `cases` argument lists per item
with `random.Random(f"{seed}:{item_id}")` (`draw_cases`), runs the reference solution on them, and
stores the results as hidden test cases: graded like the visible ones, never shown in a prompt nor
exported in a public config's `info`.

The domains file is trusted seed content (like `derive.py`): `expr` domains and `constraints` are
Python expressions evaluated with `rng`, `math` and the values drawn before them.
"""

from __future__ import annotations

import ast
import math
import random
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scaling_book.content.specs import ContentError, SeedIssue

DOMAINS_FILE = "code_domains.toml"
#: Attempts at drawing one argument list that satisfies an item's constraints.
MAX_ATTEMPTS = 1000
_KINDS = ("int", "log_int", "log", "uniform", "pow2", "choice", "expr")


@dataclass(frozen=True)
class ItemDomain:
    """One code item's domain: `draws` maps names (parameters, and `_helpers`) to a domain table, in
    draw order; `constraints` are expressions every drawn list must satisfy."""

    item_id: str
    draws: dict[str, dict[str, Any]]
    constraints: list[str] = field(default_factory=list)

    def parameters(self) -> list[str]:
        return [name for name in self.draws if not name.startswith("_")]


@dataclass(frozen=True)
class Domains:
    """The whole file: the base `seed`, `cases` per item, and each item's domain by id."""

    seed: int
    cases: int
    items: dict[str, ItemDomain]
    source_file: str = DOMAINS_FILE

    def seed_of(self, item_id: str) -> int:
        """The recorded per-item seed: a stable 31-bit integer from the base seed and the id."""
        return random.Random(f"{self.seed}:{item_id}").getrandbits(31)

    def fingerprint(self, item_id: str) -> dict[str, Any] | None:
        """Everything in the file that decides `item_id`'s hidden cases (the base seed, the case count,
        its draws in draw order and its constraints), as JSON-able data for the item's content hash;
        None when the file declares no domain for it."""
        domain = self.items.get(item_id)
        if domain is None:
            return None
        return {"seed": self.seed, "cases": self.cases, "constraints": list(domain.constraints),
                "draws": [[name, table] for name, table in domain.draws.items()]}


def load_domains(seed_dir: Path) -> Domains | None:
    """Read `seed_dir/code_domains.toml`; None when the file is absent. Raises `ContentError` for a
    malformed entry (naming the item id and the argument)."""
    path = Path(seed_dir) / DOMAINS_FILE
    if not path.is_file():
        return None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ContentError([SeedIssue(DOMAINS_FILE, "-", "-", f"not valid TOML: {exc}")]) from None
    issues: list[SeedIssue] = []
    seed, cases = data.pop("seed", None), data.pop("cases", None)
    if type(seed) is not int or type(cases) is not int or cases < 1:
        issues.append(SeedIssue(DOMAINS_FILE, "-", "seed/cases", "needs an integer `seed` and `cases` >= 1"))
    items: dict[str, ItemDomain] = {}
    for item_id, table in data.items():
        if not isinstance(table, dict):
            issues.append(SeedIssue(DOMAINS_FILE, item_id, "-", "expected a table of argument domains"))
            continue
        table = dict(table)
        constraints = table.pop("constraints", [])
        if not isinstance(constraints, list) or not all(isinstance(c, str) for c in constraints):
            issues.append(SeedIssue(DOMAINS_FILE, item_id, "constraints", "expected a list of expressions"))
            constraints = []
        for expression in constraints:
            issues.extend(_syntax(item_id, "constraints", expression))
        for name, domain in table.items():
            issues.extend(_check_domain(item_id, name, domain))
        items[item_id] = ItemDomain(item_id, table, constraints)
    if issues:
        raise ContentError(issues)
    return Domains(seed, cases, items)


def _syntax(item_id: str, name: str, expression: str) -> list[SeedIssue]:
    try:
        ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        return [SeedIssue(DOMAINS_FILE, item_id, name, f"expression does not parse: {exc.msg}")]
    return []


def _check_domain(item_id: str, name: str, domain: Any) -> list[SeedIssue]:
    if not isinstance(domain, dict) or len(domain) != 1 or next(iter(domain)) not in _KINDS:
        return [SeedIssue(DOMAINS_FILE, item_id, name, f"expected one of {', '.join(_KINDS)} as its only key")]
    kind, value = next(iter(domain.items()))
    if kind == "expr":
        return _syntax(item_id, name, value) if isinstance(value, str) else [
            SeedIssue(DOMAINS_FILE, item_id, name, "expr must be a string")]
    if kind == "choice":
        ok = isinstance(value, list) and len(value) >= 1
        return [] if ok else [SeedIssue(DOMAINS_FILE, item_id, name, "choice needs a non-empty list")]
    ok = (isinstance(value, list) and len(value) == 2 and all(type(v) in (int, float) for v in value)
          and value[0] <= value[1] and (kind not in ("log", "log_int", "pow2") or value[0] > 0))
    if kind in ("int", "log_int", "pow2") and ok:
        ok = all(type(v) is int for v in value)
    return [] if ok else [SeedIssue(DOMAINS_FILE, item_id, name,
                                    f"{kind} needs [lo, hi] with lo <= hi" + (" and lo > 0" if kind != "int" else ""))]


def _draw_one(kind: str, value: Any, rng: random.Random, namespace: dict[str, Any]) -> Any:
    if kind == "int":
        return rng.randint(value[0], value[1])
    if kind == "log_int":
        return min(value[1], max(value[0], round(math.exp(rng.uniform(math.log(value[0]), math.log(value[1]))))))
    if kind == "log":
        return math.exp(rng.uniform(math.log(value[0]), math.log(value[1])))
    if kind == "uniform":
        return rng.uniform(value[0], value[1])
    if kind == "pow2":
        low, high = math.ceil(math.log2(value[0])), math.floor(math.log2(value[1]))
        return 2 ** rng.randint(low, high)
    if kind == "choice":
        return rng.choice(value)
    return eval(value, namespace)  # noqa: S307 - trusted seed content, see the module docstring


def draw_cases(domain: ItemDomain, parameters: list[str], n: int, seed: int) -> list[list[Any]]:
    """`n` argument lists for a function with `parameters` (in signature order), drawn from `domain`
    with `random.Random(seed)`: the same inputs give the same lists on every machine. Duplicates of
    an earlier list are redrawn. Raises `ContentError` when the domain's arguments are not exactly
    `parameters`, an expression fails, or the constraints reject `MAX_ATTEMPTS` draws in a row."""
    if sorted(domain.parameters()) != sorted(parameters):
        raise ContentError([SeedIssue(DOMAINS_FILE, domain.item_id, "-",
                                      f"domains for {domain.parameters()}, but the signature takes {parameters}")])
    rng = random.Random(seed)
    out: list[list[Any]] = []
    seen: set[str] = set()
    for _ in range(n):
        for _attempt in range(MAX_ATTEMPTS):
            namespace: dict[str, Any] = {"rng": rng, "math": math, "__builtins__": __builtins__}
            for name, table in domain.draws.items():
                kind, value = next(iter(table.items()))
                try:
                    namespace[name] = _draw_one(kind, value, rng, namespace)
                except Exception as exc:  # noqa: BLE001 - reported with the item and argument
                    raise ContentError([SeedIssue(DOMAINS_FILE, domain.item_id, name,
                                                  f"drawing failed: {type(exc).__name__}: {exc}")]) from None
            if not all(eval(c, namespace) for c in domain.constraints):  # noqa: S307 - trusted seed content
                continue
            args = [namespace[p] for p in parameters]
            key = repr(args)
            if key not in seen:
                seen.add(key)
                out.append(args)
                break
        else:
            raise ContentError([SeedIssue(DOMAINS_FILE, domain.item_id, "constraints",
                                          f"no acceptable new draw in {MAX_ATTEMPTS} attempts")])
    return out
