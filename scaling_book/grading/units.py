"""Units of numeric targets and answers: parsed and converted with pint, never stripped.

The registry is ``units.txt`` (loaded alone, without pint's defaults): bits and bytes with decimal
(k, M, G, T, P, E) and binary (Ki, Mi, Gi, Ti, Pi, Ei) prefixes, seconds to years, hertz, FLOPs (and
OPs, counted alike), cycles, and the field's counts (tokens, parameters, chips = GPUs = TPUs, pods,
sequences, elements, USD), plus the dimensionless ``ratio``, ``way``, ``fraction`` and ``percent``.
Case matters exactly as SI says: ``Mb`` (megabit) is not ``MB`` (megabyte), ``ms`` is not ``Ms``.

An item's unit is a unit expression in that registry (``GB/s``, ``tokens/s/chip``, ``FLOPs/USD``)
or one of the descriptive phrases in ``ITEM_UNIT_PHRASES`` (``fraction of parameters``), which name a
registry unit. ``conversion(answer_unit, item_unit)`` gives the factor that turns a value written in
the answer's unit into the item's unit, or the reason it cannot (unknown unit, other dimension,
percent on an item that is not a fraction). Results are cached per pair of unit strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pint

__all__ = ["ITEM_UNIT_PHRASES", "Conversion", "UnitError", "conversion", "item_unit", "parse_unit", "registry"]

_REGISTRY_FILE = Path(__file__).with_name("units.txt")

#: Descriptive item units (as the seed writes them) and the registry unit each one means.
ITEM_UNIT_PHRASES = {
    "": "ratio",
    "dimensionless": "ratio",
    "fraction of parameters": "fraction",
    "prefill servers per generate server": "ratio",
    "%": "percent",
}
_FRACTIONS = {"fraction", "percent"}


class UnitError(ValueError):
    """A unit string that the registry does not parse; the message says which."""


@lru_cache(maxsize=1)
def registry() -> pint.UnitRegistry:
    """The project's unit registry (``units.txt`` only; case-sensitive)."""
    reg = pint.UnitRegistry(None, case_sensitive=True, autoconvert_offset_to_baseunit=False)
    reg.load_definitions(str(_REGISTRY_FILE))
    return reg


# A unit expression: names (letters, µ/μ) joined by "/", "per", "*", "·" or spaces. No digits,
# no other operators: an exponent or a number in the unit text is refused before pint sees it.
_UNIT_TEXT = re.compile(r"^[A-Za-zµμ%]+(?:\s*(?:/|\*|·|\s|\bper\b)\s*[A-Za-zµμ%]+)*$")


# What pint is given: unit names joined by single "/" or "*", at most _MAX_FACTORS names.
_PINT_EXPR = re.compile(r"[A-Za-zµμ]+(?:[/*][A-Za-zµμ]+)*")
_MAX_FACTORS = 8


def _to_pint_syntax(text: str) -> str:
    t = text.strip().replace("·", "*").replace("%", " percent ")
    t = re.sub(r"\bper\s+cent\b", "percent", t)
    t = re.sub(r"\s*\bper\b\s*", "/", t)
    t = re.sub(r"\s*([/*])\s*", r"\1", t.strip())
    return re.sub(r"\s+", "*", t)


@lru_cache(maxsize=4096)
def parse_unit(text: str) -> pint.Unit:
    """Parse a unit expression (``GB/s``, ``tokens per second per chip``, ``%``) into a pint unit.

    Raises ``UnitError`` naming the text when it is not a unit expression of the registry.
    """
    t = text.strip()
    if not t or not _UNIT_TEXT.match(t):
        raise UnitError(f"unknown unit {text!r}")
    expr = _to_pint_syntax(t)
    # pint's parser asserts (AssertionError) on a dangling operator ("tokens per" -> "tokens/") and
    # recurses once per factor: only names joined by single operators, and few of them, reach it
    if not _PINT_EXPR.fullmatch(expr):
        raise UnitError(f"unknown unit {text!r} (an operator without a unit on both sides)")
    if len(re.findall(r"[/*]", expr)) >= _MAX_FACTORS:
        raise UnitError(f"unknown unit {text[:80]!r} (more than {_MAX_FACTORS} factors)")
    try:
        unit = registry().parse_units(expr)
    except (pint.errors.PintError, AttributeError, TypeError, ValueError, SyntaxError, AssertionError,
            RecursionError) as exc:
        raise UnitError(f"unknown unit {text[:80]!r} ({type(exc).__name__})") from None
    return unit


@lru_cache(maxsize=512)
def item_unit(text: str) -> pint.Unit:
    """The registry unit an item's declared unit means (a phrase from ``ITEM_UNIT_PHRASES`` or a unit
    expression). Raises ``UnitError`` when it does not parse."""
    key = (text or "").strip()
    return parse_unit(ITEM_UNIT_PHRASES.get(key, key))


def _is_fraction_item(text: str) -> bool:
    key = (text or "").strip()
    return ITEM_UNIT_PHRASES.get(key, key) in _FRACTIONS


@dataclass(frozen=True)
class Conversion:
    """``factor`` (multiply a value in the answer's unit by it to get the item's unit), or None with
    ``reason``."""

    factor: float | None
    reason: str


@lru_cache(maxsize=4096)
def conversion(answer_unit: str, declared: str) -> Conversion:
    """How a value written in ``answer_unit`` reads in the item's unit ``declared``.

    ``answer_unit`` empty: the bare number is in the item's unit (factor 1). Percent (``%``,
    ``percent``) is accepted only on an item whose unit is a fraction or percent.
    """
    try:
        want = item_unit(declared)
    except UnitError as exc:
        return Conversion(None, f"item unit does not parse: {exc}")
    if not answer_unit.strip():
        return Conversion(1.0, f"read in the item's unit {declared or 'ratio'!r}")
    try:
        got = parse_unit(answer_unit)
    except UnitError as exc:
        return Conversion(None, str(exc))
    if "percent" in str(got) and not _is_fraction_item(declared):
        return Conversion(None, f"percent is accepted only for a fraction or percent, and the item asks "
                                f"for {declared or 'a plain number'!r}")
    reg = registry()
    try:
        factor = float(reg.Quantity(1.0, got).to(want).magnitude)
    except pint.errors.DimensionalityError:
        return Conversion(None, f"unit {answer_unit!r} has the wrong dimension: the item asks for "
                                f"{declared or 'a plain number'!r}")
    return Conversion(factor, f"converted from {answer_unit!r} to {declared or 'ratio'!r} (x{factor:g})")
