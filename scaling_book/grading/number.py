"""The numeric answer grammar: one number standing alone, with an optional unit converted by pint.

An answer (or one part of a multi-value answer), after ``extract.strip_markup`` (markdown emphasis,
code ticks, ``$...$``, ``\\boxed{}``, ``\\text{}``; Unicode dashes to ``-``), is accepted only in this
form, and everything else scores 0 with a reason::

    answer     := [label] [approx] value [multiplier] [unit] [final "." ";" ","]
    label      := "Answer:" | "The (final) answer is" | ["Answer:"] NAME ("=" | ":" | "≈")
                  NAME: one identifier (``B``, ``B_min``, ``B_{\\text{crit}}``, ``B^*``, ``T(B)``), none of
                  whose ``_``-parts bounds, negates or hedges (``at_least``, ``Wrong``, ``Maybe``,
                  ``upper_bound``; ``min``/``max`` only as a subscript), no words in parentheses
    approx     := "~" | "≈" | "≃" | "∼" | "=" | "about" | "approximately" | "approx." | "roughly"
                  | "around" | "circa" | "ca."
    value      := [sign] number | [sign] plain "/" plain       (also \\frac{a}{b}: the exact fraction a/b)
    number     := plain [("e" | "E") exponent] | plain × 10^exponent | 10^exponent
                  (× is "×", "x", "*", "·", "\\times", "\\cdot"; 10^n is also 10^{n}, 10**n, 10¹²)
    plain      := digits with optional grouping (1,000,000; 1 000 000; 1{,}000; 1_000_000) [. digits]
    multiplier := "hundred" | "thousand" | "million" | "billion" | "trillion" | "quadrillion"
    unit       := ["[" | "(" | "in"] a unit of the registry (``units.py``) ["]" | ")"] | "%" | "×"

The unit is converted to the item's unit (``0.05 TB/s`` answers a 50 GB/s item); a unit of another
dimension, an unknown word (``not``, ``faster``, ``or more``), or percent on an item that is not a
fraction scores 0. A bare number is read in the item's unit; ``×`` marks a ratio. Refused outright:
any word or symbol before the number that is not a label or an approximation marker (``not 2500``,
``sqrt(2500)``, ``> 2500``, ``at least 2500``), a second number or an operator after it
(``1/2 × 2500``, ``12-13``, ``240 or 250``, ``240 (2.4e2)``), malformed numbers (``1.000.000``),
number words (``twelve``), non-finite values and struck-through text (``~~625~~``: retracted).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from scaling_book.grading.extract import strip_markup
from scaling_book.grading.units import UnitError, conversion, parse_unit

__all__ = ["NumberParse", "parse_number"]

_MULTIPLIER_WORDS = {"hundred": 1e2, "thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12,
                     "quadrillion": 1e15}
#: Words that may not name a label: they change or hedge the value ("not = 5", "max: 5").
_REFUSED_LABELS = frozenset({
    "not", "no", "never", "less", "more", "greater", "fewer", "under", "over", "below", "above", "least",
    "most", "than", "except", "minus", "plus", "times", "half", "double", "twice", "triple", "sqrt", "root",
    "square", "log", "ln", "exp", "max", "min", "abs", "inverse", "reciprocal", "negative", "neg", "without",
    "excluding", "nearly", "almost", "up", "to", "from", "between", "at", "upper", "lower", "bound", "limit",
    "floor", "ceil", "ceiling", "round", "approximately", "about",
    # negating, retracting and hedging words ("Wrong: 5", "Maybe = 5", "not_5: 5")
    "wrong", "incorrect", "false", "invalid", "isnt", "nor", "neither", "none", "nope", "maybe", "perhaps",
    "possibly", "probably", "guess", "guessed", "unsure", "uncertain", "unless", "if", "or", "either",
    "typo", "old", "previous", "retracted", "rejected", "scratch", "discard", "ignore", "alternative", "alt",
    # bounds and approximations
    "bounds", "bounded", "minimum", "maximum", "minimal", "maximal", "atleast", "atmost", "roughly", "approx",
    "approximate", "around", "circa", "estimate", "estimated", "range", "ge", "le", "gt", "lt", "geq", "leq",
})
#: Subscripts that name a quantity rather than bound a value: ``B_min`` is "the minimum batch", a name.
_NAMING_SUBSCRIPTS = frozenset({"min", "max"})
_LABEL = re.compile(
    r"^(?:(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*[:=]?\s*"
    r"|(?P<name>[A-Za-z][A-Za-z0-9_]{0,30})(?:\s*\((?P<args>[A-Za-z0-9_, ]*)\))?\s*(?:=|:|≈)\s*)",
    re.I,
)
_APPROX = re.compile(r"^(?:~|≈|≃|∼|=|about\b|approximately\b|approx\.?|roughly\b|around\b|circa\b|ca\.)\s*",
                     re.I)

# Grouped digits (1,234 / 1 234 / 1'234 / 1_234) start with a non-zero group of 1-3 digits and go on in
# groups of exactly 3: "0,128" is the decimal 0.128 in much of Europe, not 128, and "0 625" is two numbers.
_PLAIN = (r"(?:[1-9]\d{0,2}(?:,\d{3})+|[1-9]\d{0,2}(?:[ ']\d{3})+(?![\d.,])|[1-9]\d{0,2}(?:_\d{3})+(?![\d_])"
          r"|\d+)(?:\.\d+)?|\.\d+")
_TIMES = r"\s*(?:×|x|X|\*|·|⋅)\s*"


def _pow10(tag: str) -> str:
    return rf"10\s*(?:\^|\*\*)\s*\{{?\s*(?P<exp{tag}>[+-]?\d+)\s*\}}?"


_VALUE = re.compile(
    rf"^(?P<sign>[+-])?\s*(?:"
    rf"(?P<num>{_PLAIN})\s*/\s*(?P<den>{_PLAIN})(?![\d.,])"
    rf"|(?P<bare>{_pow10('b')})"
    rf"|(?P<mant>{_PLAIN})(?:(?P<e>[eE][+-]?\d+)|{_TIMES}(?P<pow>{_pow10('m')}))?"
    rf")(?![\d])"
)
_FRAC = re.compile(rf"\\[dt]?frac\s*\{{\s*({_PLAIN})\s*\}}\s*\{{\s*({_PLAIN})\s*\}}")
_MULTIPLIER = re.compile(r"^\s*(hundred|thousand|million|billion|trillion|quadrillion)s?\b", re.I)
_UNIT_LEAD = re.compile(r"^[\s~\[({]*(?:(?:in|of|as)\s+)?")
_RATIO_MARK = re.compile(r"^(?:×|x|X)$")


@dataclass(frozen=True)
class NumberParse:
    """The outcome of reading one number: ``value`` in the item's unit (None when refused) and
    ``reason``; ``unit_text`` is the unit the answer was written in ("" for a bare number)."""

    value: float | None
    reason: str
    unit_text: str = ""


def _plain(text: str) -> float:
    return float(re.sub(r"[, '_]", "", text))


def _value(m: re.Match[str]) -> float:
    sign = -1.0 if m.group("sign") == "-" else 1.0
    if m.group("num") is not None:
        den = _plain(m.group("den"))
        return sign * (_plain(m.group("num")) / den) if den else math.nan
    if m.group("bare") is not None:
        exp = int(m.group("expb"))
        return sign * (10.0 ** exp if abs(exp) <= 400 else (math.inf if exp > 0 else 0.0))
    if m.group("e"):
        return sign * float(re.sub(r"[, '_]", "", m.group("mant")) + m.group("e"))
    value = _plain(m.group("mant"))
    if m.group("pow") is not None:
        exp = int(m.group("expm"))
        value = value * 10.0 ** exp if abs(exp) <= 400 else (math.inf if exp > 0 else 0.0)
    return sign * value


def _clean(text: str) -> str:
    # subscripts and stars stay part of a label: B_{min}, B_{\text{crit}} -> B_min, B_crit; B^* -> B_star
    t = re.sub(r"(?<=[A-Za-z0-9])_\{\s*(?:\\(?:text|mathrm|rm)\s*\{\s*)?([A-Za-z0-9]+)\s*\}?\s*\}", r"_\1", text)
    t = re.sub(r"(?<=[A-Za-z])\^\s*\{?\s*\*\s*\}?", "_star", t)
    t = strip_markup(t).replace("{,}", ",")
    t = _FRAC.sub(r"\1/\2", t)
    t = re.sub(r"(?<!\^)\{([^{}]*)\}", r"\1", t)  # other braces (10^{12} keeps its own)
    return t.strip().rstrip(".;,").strip()


#: Label parts never read as a unit: English words that pint also knows ("in" is an inch).
_NOT_UNITS = frozenset({"in", "of", "per", "at", "by", "the", "a", "an", "is"})


def _unit_in_label(part: str, unit: str, subscript: bool) -> str | None:
    """Why a label part that names a scale or a unit other than the item's changes what the number
    means ("ktokens = 120", "GB: 120", "N_thousands = 120", "value_x1000 = 120", "T_us = 5" on an item
    in seconds), or None. A ``subscript`` (a part after the first) that is a unit of another dimension
    names the quantity ("T_flops", "t_bytes") and is let through."""
    low = part.lower()
    if low in _MULTIPLIER_WORDS or low.rstrip("s") in _MULTIPLIER_WORDS or re.fullmatch(r"[x×e]\d+", low):
        return f"contains {part!r}, a scale the number would be read without"
    if len(part) < 2 or low in _NOT_UNITS or low in _NAMING_SUBSCRIPTS:
        return None
    try:
        parse_unit(part)
    except UnitError:
        return None  # a name, not a unit
    factor = conversion(part, unit).factor
    if factor != 1.0 and not (subscript and factor is None):
        return f"names the unit {part!r}, not the item's unit {unit or 'ratio'!r}"
    return None


def _label_refusal(label: re.Match[str], unit: str = "") -> str | None:
    """Why a ``name =`` label is not a plain name (None when it is): a word inside parentheses
    ("B (at least) = 5"), a part of the name, split on ``_``, that bounds, negates or hedges the value
    ("at_least = 5", "Wrong: 5", "NOT_5: 5"), or one that names a scale or a unit other than the item's
    ``unit`` ("ktokens = 120" on a tokens item)."""
    name = label.group("name")
    if not name:
        return None
    for i, part in enumerate(p for p in name.split("_") if p):
        why = _unit_in_label(part, unit, subscript=i > 0)
        if why:
            return why
    args = [a for a in re.split(r"[\s,]+", label.group("args") or "") if a]
    if any(not re.fullmatch(r"[A-Za-z](?:_?[A-Za-z0-9]){0,2}", a) or a.lower() in _REFUSED_LABELS for a in args):
        return "has words in parentheses (a bound or a comment, not a name)"
    parts = [p.lower() for p in name.split("_") if p]
    for i, part in enumerate(parts):
        if part in _REFUSED_LABELS and not (i > 0 and part in _NAMING_SUBSCRIPTS):
            return f"contains {part!r}, which bounds, negates or hedges the value"
    if any(p.isdigit() for p in parts[1:]) and len(parts) > 1 and len(parts[0]) > 1:
        return "contains a number (a label may not carry a value)"
    return None


def _refuse(reason: str) -> NumberParse:
    return NumberParse(None, reason)


def parse_number(text: str, unit: str = "") -> NumberParse:
    """Read exactly one number from an answer (or one part of a multi-value answer), in the item's unit.

    ``unit``: the item's declared unit (a ``units.py`` registry expression or phrase); "" is a plain
    ratio. Returns a ``NumberParse`` whose ``value`` is None, with the reason, for anything outside
    the grammar in the module doc.
    """
    t = _clean(text)
    if not t:
        return _refuse("empty answer")
    malformed = re.search(r"\d\.{2,}\d|\d\.\d+\.\d", t)
    if malformed:
        return _refuse(f"malformed number {malformed.group(0)!r} in {t[:80]!r}")
    if "~~" in t:
        return _refuse(f"struck-through text (~~...~~) in {t[:80]!r}: a retracted value is not an answer")
    head = t
    for _ in range(2):  # "Answer: B = 625": the answer cue, then one name
        label = _LABEL.match(head)
        if not label:
            break
        refused = _label_refusal(label, unit)
        if refused:
            return _refuse(f"label {label.group(0).strip()!r} {refused}: {t[:80]!r}")
        head = head[label.end():]
        if label.group("name"):
            break
    for _ in range(2):
        head = _APPROX.sub("", head, count=1)
    m = _VALUE.match(head)
    if not m:
        return _refuse(f"the answer is not a number standing alone: {t[:80]!r} (only a label such as "
                       f"'x =' or an approximation marker may precede the number)")
    value = _value(m)
    rest = head[m.end():]
    wm = _MULTIPLIER.match(rest)
    if wm and m.group("num") is None:
        value *= _MULTIPLIER_WORDS[wm.group(1).lower()]
        rest = rest[wm.end():]
    if not math.isfinite(value):
        return _refuse(f"non-finite value in {t[:80]!r}")
    rest = rest.strip()
    unit_text = _UNIT_LEAD.sub("", rest).strip().strip("()[]{}").strip()
    if re.search(r"\d", unit_text):
        return _refuse(f"more than one number in {t[:80]!r}: a number must stand alone")
    if unit_text and not re.fullmatch(r"[A-Za-zµμ%/*·×\s]+", unit_text):
        return _refuse(f"the answer is an expression or a claim, not a number standing alone: {t[:80]!r}")
    if _RATIO_MARK.match(unit_text):
        unit_text = "ratio"
    conv = conversion(unit_text, unit)
    if conv.factor is None:
        return NumberParse(None, conv.reason, unit_text)
    value *= conv.factor
    how = f" ({conv.reason})" if unit_text else ""
    return NumberParse(value, f"read {value!r} from {t[:80]!r}{how}", unit_text)
