"""Answer extraction: one rule for every grader, applied before any scoring.

The rule (stated to the model in ``scaling_book.grading.prompt.SYSTEM_PROMPT``):

1. Reasoning is never graded (``visible_reply``): everything up to and including the **last**
   ``</think>``, ``</thinking>`` or ``</reasoning>`` is dropped (a chat template often opens ``<think>``
   in the prompt, so the reply may carry only the closing tag); a reply with an opening tag that is
   never closed has no visible answer.
2. **The final answer is the content of the last ``<answer>...</answer>`` block** (tags matched without
   regard to case). No block, or an empty one: no answer. There is no fallback to "the last number in
   the text": a response that does not follow the format has not answered.
3. **Code is the content of the last fenced block tagged ``python`` (or ``py``)** anywhere in the
   response, inside or outside the answer block.

Numbers inside an answer are read by ``parse_number`` in this priority order, each step documented
where it happens: clean-up of markup (markdown emphasis, LaTeX wrappers such as ``\\boxed{}``,
``\\text{}``, ``$...$``), Unicode minus and dashes, approximation markers; then scientific notation in
every written form (``1.5e12``, ``1.5E+12``, ``1.5×10^12``, ``1.5 x 10^12``, ``1.5 \\times 10^{12}``,
``1.5*10**12``, ``10^{12}``, ``10¹²``); thousands separators (``1,000,000``, thin or no-break spaces,
``1{,}000``, Python's ``1_000_000``); number words (``hundred`` ... ``quadrillion``); percent; then the
unit text after the number. Unit words are stripped, magnitude prefixes are not: ``0.24 kFLOPs/byte``
for a question asked in FLOPs/byte, or ``2500 MB/s`` for one asked in GB/s, fails with a reason rather
than being read as ``0.24`` or ``2500`` — also behind brackets or "in" (``2500 [MB/s]``,
``2500 in MB/s``) and after the "/" (``240 FLOPs/kB``). Several different numbers ("12 or 13",
"12-13", "240..250"), malformed numbers ("1.000.000"), non-finite values, anything unparseable and
an answer block longer than ``MAX_ANSWER_CHARS`` fail closed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = [
    "MAX_ANSWER_CHARS",
    "NumberParse",
    "extract_answer",
    "visible_reply",
    "extract_code",
    "strip_markup",
    "parse_number",
    "split_values",
]

_REASONING_CLOSE = re.compile(r"</(?:think|thinking|reasoning)\s*>", re.I)
_REASONING_OPEN = re.compile(r"<(?:think|thinking|reasoning)(?:\s[^>]*)?>", re.I)
_ANSWER_OPEN = re.compile(r"<answer>", re.I)
_ANSWER_CLOSE = re.compile(r"</answer>", re.I)
_CODE = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\r?\n(.*?)```", re.S | re.I)


#: Longest answer block the numeric and mcq graders read, in characters (the formula grader has its
#: own, smaller cap). A final answer is a number or a letter; a longer block fails closed rather than
#: being fed to the clean-up passes, whose cost grows with nesting (100,000 nested ``\boxed{`` took 10 s).
MAX_ANSWER_CHARS = 4000


def visible_reply(text: str | None) -> str:
    """The part of a reply that is graded: the text after the last ``</think>`` (``</thinking>``,
    ``</reasoning>``; any case), or the whole reply when there is none. A reasoning tag opened and
    never closed means the reply ended inside its reasoning: the visible reply is ``""``."""
    text = text or ""
    closes = list(_REASONING_CLOSE.finditer(text))
    text = text[closes[-1].end():] if closes else text
    return "" if _REASONING_OPEN.search(text) else text


def extract_answer(response: str | None) -> str | None:
    """The stripped content of the last ``<answer>...</answer>`` block, or None (none, or empty)."""
    text = visible_reply(response)
    # The blocks ``re.findall(r"<answer>(.*?)</answer>")`` would find, found in linear time: that regex
    # rescans to the end of the text from every unclosed "<answer>" (quadratic; 64 KB took 5 s).
    last, pos = None, 0
    while True:
        opened = _ANSWER_OPEN.search(text, pos)
        if not opened:
            break
        closed = _ANSWER_CLOSE.search(text, opened.end())
        if not closed:
            break  # no later "<answer>" has a closing tag either
        last, pos = text[opened.end(): closed.start()], closed.end()
    if last is None:
        return None
    content = last.strip()
    return content or None


def extract_code(response: str | None) -> str | None:
    """The content of the last fenced ```python block, or None."""
    text = visible_reply(response)
    blocks = _CODE.findall(text)
    if not blocks:
        return None
    code = blocks[-1]
    return code if code.strip() else None


# --------------------------------------------------------------------------------------------------
# Markup clean-up (shared by the numeric, mcq and formula graders)
# --------------------------------------------------------------------------------------------------

_LATEX_WRAPPERS = re.compile(
    r"\\(?:boxed|text|textrm|textbf|textit|mathrm|mathbf|mathit|operatorname|mbox|fbox|emph|displaystyle)\s*\{"
)
_DASHES = "\u2212\u2010\u2011\u2012\u2013\u2014\u2015\ufe63\uff0d"


def _unwrap_braced(text: str, pattern: re.Pattern[str]) -> str:
    """Replace ``\\cmd{X}`` by ``X`` for each match of ``pattern`` (which ends at the opening brace)."""
    for _ in range(50):
        m = pattern.search(text)
        if not m:
            break
        depth, i = 1, m.end()
        while i < len(text) and depth:
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
            i += 1
        inner = text[m.end(): i - 1] if depth == 0 else text[m.end():]
        text = text[: m.start()] + inner + text[i:]
    return text


def strip_markup(text: str, *, emphasis: bool = True) -> str:
    """Remove markdown emphasis, code ticks and LaTeX wrappers; normalise dashes and spaces.

    ``emphasis=False`` (formulas, where ``*`` and ``**`` are operators) removes emphasis only when it
    wraps the whole text (``**T/D**``).
    """
    t = text.strip()
    if not emphasis:
        for _ in range(3):
            m = re.fullmatch(r"(\*\*|__|\*|_)(.+)\1", t, re.S)
            if not m:
                break
            t = m.group(2).strip()
    t = t.replace("\\left", "").replace("\\right", "")
    t = _unwrap_braced(t, _LATEX_WRAPPERS)
    t = t.replace("$$", " ").replace("$", " ")
    t = re.sub(r"\\[\(\)\[\]]", " ", t)  # \( \) \[ \]
    t = t.replace("`", " ")
    if emphasis:
        t = re.sub(r"(?<=\d)\s*\*\*\s*(?=[-+]?\d)", "^", t)  # 10**12 is a power, not emphasis
        t = re.sub(r"\*\*|__", " ", t)
        t = re.sub(r"(?<![\w)])\*(?=\S)|(?<=\S)\*(?![\w(])", " ", t)  # *emphasis*, not 2*3
        t = re.sub(r"(?<!\w)_(?=\S)|(?<=\S)_(?!\w)", " ", t)
    t = t.replace("\\%", "%").replace("\\,", "").replace("\\!", "").replace("\\;", " ")
    t = t.replace("\\ ", " ").replace("\\approx", "≈").replace("\\sim", "~")
    t = t.replace("\\cdot", "·").replace("\\times", "×")
    for ch in _DASHES:
        t = t.replace(ch, "-")
    t = t.replace("\u00a0", " ").replace("\u2009", " ").replace("\u202f", " ").replace("\u2007", " ")
    return re.sub(r"[ \t]+", " ", t).strip()


# --------------------------------------------------------------------------------------------------
# Numbers
# --------------------------------------------------------------------------------------------------

_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_MULTIPLIER_WORDS = {
    "hundred": 1e2,
    "thousand": 1e3,
    "million": 1e6,
    "billion": 1e9,
    "trillion": 1e12,
    "quadrillion": 1e15,
}
_APPROX = re.compile(
    r"^(?:~|≈|≃|∼|=|about|approximately|approx\.?|roughly|around|circa|ca\.|nearly|almost|"
    r"just\s+(?:over|under)|about\s+)\s*",
    re.I,
)

# A mantissa: digits with optional grouping (comma, or a space between groups of three), decimals.
_MANTISSA = r"(?:\d{1,3}(?:,\d{3})+|\d{1,3}(?:[ ']\d{3})+(?![\d.,])|\d+(?:_\d+)+|\d+)(?:\.\d+)?|\.\d+"
_EXP_E = r"[eE][+-]?\d+"
_TIMES = r"\s*(?:×|x|X|\*|·|⋅)\s*"


def _pow10(tag: str) -> str:
    """``10^n`` in its written forms: ``10^12``, ``10^{12}``, ``10**12``, ``10¹²``; named by ``tag``."""
    return (rf"10\s*(?:\^|\*\*)\s*\{{?\s*(?P<pexp{tag}>[+-]?\d+)\s*\}}?"
            rf"|10(?P<sexp{tag}>[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)")


_NUMBER = re.compile(
    rf"(?<![\w.])(?P<sign>[+-])?\s*"
    rf"(?:(?P<bare>{_pow10('2')})|(?P<mant>{_MANTISSA})(?:(?P<e>{_EXP_E})|{_TIMES}(?P<pow>{_pow10('1')}))?)"
    rf"(?!\d)"
)
_PERCENT = re.compile(r"^\s*(?:%|percent\b|per\s*cent\b)", re.I)

# Magnitude prefixes (symbol or word) that may precede a base unit.
# Longest first, so "Gi" is tried before "G".
_PREFIX_SYMBOLS = ["Ki", "Mi", "Gi", "Ti", "Pi", "k", "K", "M", "G", "T", "P", "E", "m", "µ", "μ", "u", "n", "p"]
_PREFIX_WORDS = ["kibi", "mebi", "gibi", "tebi", "pebi", "kilo", "mega", "giga", "tera", "peta", "exa",
                 "milli", "micro", "nano", "pico"]
_PREFIX_CANON = {"K": "k", "μ": "µ", "u": "µ", "kibi": "Ki", "mebi": "Mi", "gibi": "Gi", "tebi": "Ti",
                 "pebi": "Pi", "kilo": "k", "mega": "M", "giga": "G", "tera": "T", "peta": "P", "exa": "E",
                 "milli": "m", "micro": "µ", "nano": "n", "pico": "p"}
# Base units (lower-cased spellings -> canonical name). Symbol spellings are case-sensitive below.
_BASE_WORDS = {
    "flop": "FLOP", "flops": "FLOP",
    "byte": "B", "bytes": "B", "bit": "bit", "bits": "bit",
    "second": "s", "seconds": "s", "sec": "s", "secs": "s",
    "hertz": "Hz", "watt": "W", "watts": "W",
    "parameter": "param", "parameters": "param", "param": "param", "params": "param",
    "token": "token", "tokens": "token",
}
_BASE_SYMBOLS = {"B": "B", "b": "bit", "s": "s", "Hz": "Hz", "W": "W", "FLOP": "FLOP", "FLOPs": "FLOP",
                 "FLOPS": "FLOP", "flop": "FLOP", "flops": "FLOP", "bps": "bit", "Bps": "B"}


@dataclass(frozen=True)
class NumberParse:
    """The outcome of reading one number: ``value`` (None when it failed) and ``reason``."""

    value: float | None
    reason: str
    unit_text: str = ""


def _unit_token(text: str) -> tuple[str | None, str] | None:
    """Read the first unit word of ``text`` as (prefix, base); None when it is not a known unit.

    ``prefix`` is None for an unprefixed unit, else canonical (``k``, ``M``, ``G``, ``Gi``, ``m``, ``µ``...);
    ``base`` is canonical (``B``, ``bit``, ``FLOP``, ``s``...). ``GB/s`` reads as (``G``, ``B``),
    ``TFLOPs/s`` as (``T``, ``FLOP``), ``ms`` as (``m``, ``s``), ``seconds`` as (None, ``s``).
    """
    m = re.match(r"\s*([A-Za-zµμ]+)", text)
    if not m:
        return None
    head = m.group(1)
    low = head.lower()
    if head in _BASE_SYMBOLS:
        return None, _BASE_SYMBOLS[head]
    if low in _BASE_WORDS:
        return None, _BASE_WORDS[low]
    for p in _PREFIX_WORDS:
        if low.startswith(p) and low[len(p):] in _BASE_WORDS:
            return _PREFIX_CANON.get(p, p), _BASE_WORDS[low[len(p):]]
    for p in _PREFIX_SYMBOLS:
        if not head.startswith(p) or len(head) == len(p):
            continue
        rest = head[len(p):]
        if rest in _BASE_SYMBOLS:
            return _PREFIX_CANON.get(p, p), _BASE_SYMBOLS[rest]
        if rest.lower() in ("flop", "flops", "byte", "bytes", "bit", "bits"):
            return _PREFIX_CANON.get(p, p), _BASE_WORDS[rest.lower()]
    return None


def _multiplier_word(unit: str) -> str | None:
    low = unit.lower()
    for w in _MULTIPLIER_WORDS:
        if re.search(rf"\b{w}s?\b", low):
            return w
    return None


# Punctuation and connector words that may stand between a number and its unit: "2500 [MB/s]",
# "2500~MB/s" (a LaTeX space), "2500 (in MB/s)". Skipped before the unit is read, so that they do not
# hide a magnitude prefix.
_UNIT_LEAD = re.compile(r"(?i)^[\s~\[\](){}'\"]*(?:(?:in|of|as)\s+)?[\s~\[\](){}'\"]*")
# The unit after the first "/" or "per": FLOPs/byte -> byte, GB per s -> s.
_DENOMINATOR = re.compile(r"(?i)(?:/|\bper\s+)\s*([A-Za-zµμ]+)")


def _check_unit(trailer: str, declared: str) -> str | None:
    """Why ``trailer`` (text after the number) changes the magnitude asked for, or None if fine.

    Compares the first unit word (after any brackets or "in"), and, when both name one, the unit
    after "/" or "per": ``240 FLOPs/kB`` does not answer a question asked in FLOPs/byte.
    """
    trailer = _UNIT_LEAD.sub("", trailer)
    if not trailer:
        return None
    got = _unit_token(trailer)
    want = _unit_token(declared) if declared else None
    if got is None:
        return None  # unit words or other text: stripped
    g_prefix, g_base = got
    if want is None:
        if g_prefix is not None:
            return (f"answer carries magnitude prefix {g_prefix!r} ({trailer.split()[0]!r}) but the question "
                    f"asks for {declared or 'a plain number'!r}")
        return None
    w_prefix, w_base = want
    if g_base == w_base and g_prefix != w_prefix:
        return (f"answer is in {trailer.split()[0]!r} but the question asks for {declared!r}: magnitude "
                f"prefixes are not converted")
    if g_base != w_base:
        return f"answer is in {trailer.split()[0]!r} but the question asks for {declared!r}"
    g_den, w_den = _DENOMINATOR.search(trailer), _DENOMINATOR.search(declared)
    if g_den and w_den:
        g, w = _unit_token(g_den.group(1)), _unit_token(w_den.group(1))
        if g is not None and w is not None and g != w:
            return f"answer is per {g_den.group(1)!r} but the question asks for {declared!r}"
    return None


def _mantissa_value(text: str) -> float:
    return float(re.sub(r"[, '_]", "", text))


def _exponent(m: re.Match[str], tag: str) -> int:
    if m.group("pexp" + tag) is not None:
        return int(m.group("pexp" + tag))
    return int(m.group("sexp" + tag).translate(_SUPERSCRIPTS))


def _match_value(m: re.Match[str]) -> float:
    sign = -1.0 if m.group("sign") == "-" else 1.0
    if m.group("bare") is not None:
        exp = _exponent(m, "2")
        if abs(exp) > 400:
            return sign * (math.inf if exp > 0 else 0.0)
        return sign * 10.0 ** exp
    value = _mantissa_value(m.group("mant"))
    if m.group("e"):
        value = float(re.sub(r"[, '_]", "", m.group("mant")) + m.group("e"))
    elif m.group("pow"):
        exp_i = _exponent(m, "1")
        if abs(exp_i) > 400:
            return sign * (math.inf if exp_i > 0 else 0.0)
        value = value * 10.0 ** exp_i
    return sign * value


def _clean_number_text(text: str) -> str:
    t = strip_markup(text)
    t = t.replace("{,}", ",")
    # LaTeX exponent braces: 10^{12} stays readable by the pattern; drop other braces.
    t = re.sub(r"(?<!\^)\{([^{}]*)\}", r"\1", t)
    t = t.strip().rstrip(".;,")
    for _ in range(3):
        t2 = _APPROX.sub("", t)
        if t2 == t:
            break
        t = t2
    # "x = 240", "t ≈ 1.2 s", "Answer: 240": drop a short label before the value.
    t = re.sub(r"^[A-Za-z][\w\s()/-]{0,40}?\s*(?:=|≈|:|~)\s*(?=[-+.\d~≈])", "", t)
    for _ in range(2):
        t = _APPROX.sub("", t)
    return t.strip()


def parse_number(text: str, unit: str = "") -> NumberParse:
    """Read exactly one number from an answer (or one part of a multi-value answer).

    ``unit``: the unit the question asks for (the item's declared unit), used to keep percent and
    magnitude prefixes honest. Fails closed with a reason on: no number, several different numbers,
    a non-finite value, or a unit that changes the magnitude.
    """
    t = _clean_number_text(text)
    if not t:
        return NumberParse(None, "empty answer")
    matches = list(_NUMBER.finditer(t))
    if re.search(r"(?i)(?<![a-z])(?:nan|inf|infinity|∞)(?![a-z])", t):
        return NumberParse(None, f"non-finite value in {t[:80]!r}")
    if not matches:
        return NumberParse(None, f"no number found in {t[:80]!r}")
    malformed = re.search(r"\d\.{2,}\d|\d\.\d+\.\d", t)
    if malformed:
        # "240..250" (a range), "1.000.000" (dots as separators), "240.5.5": not one number
        return NumberParse(None, f"malformed number {malformed.group(0)!r} in {t[:80]!r}")
    first = matches[0]
    value = _match_value(first)
    trailer = t[first.end():].strip()
    # Multiplier words directly after the number.
    wm = re.match(r"(?i)(hundred|thousand|million|billion|trillion|quadrillion)s?\b\s*", trailer)
    if wm:
        word = wm.group(1).lower()
        if _multiplier_word(unit) == word:
            pass  # the question asks in this unit ("in millions"): the word is the unit
        else:
            value *= _MULTIPLIER_WORDS[word]
        trailer = trailer[wm.end():].strip()
    pm = _PERCENT.match(trailer)
    if pm:
        asks_percent = "%" in unit or "percent" in unit.lower()
        if not asks_percent:
            value /= 100.0
        trailer = trailer[pm.end():].strip()
    others = []
    for m in matches[1:]:
        v = _match_value(m)
        if not _close(v, _match_value(first)):
            others.append(m.group(0).strip())
    if others:
        return NumberParse(None, f"several different numbers in the answer ({first.group(0).strip()!r}, "
                                 f"{others[0]!r}): ambiguous")
    if not math.isfinite(value):
        return NumberParse(None, f"non-finite value {first.group(0).strip()!r}")
    # (a "×" with nothing after it is "times": "7.2×" is the ratio 7.2)
    if re.match(r"^(?:[*^+=·]|×\s*[\d(]|/\s*[\d(]|-\s*\d)", trailer):
        return NumberParse(None, f"the answer is an expression ({t[:40]!r}), not a number")
    trailer_unit = trailer.strip().strip("().,;:")
    bare_suffix = re.match(r"^(k|K|M|B|G|T|bn|mn)\b", trailer_unit)
    if bare_suffix and not _unit_token(trailer_unit) and not _same_unit(trailer_unit, unit):
        return NumberParse(None, f"bare magnitude suffix {bare_suffix.group(1)!r} is ambiguous; write the "
                                 f"number in {unit or 'full'!r}")
    problem = _check_unit(trailer_unit, unit) if not _same_unit(trailer_unit, unit) else None
    if problem:
        return NumberParse(None, problem, trailer_unit)
    if re.fullmatch(r"(?i)nan|inf(inity)?|[+-]?inf", trailer_unit):
        return NumberParse(None, "non-finite value")
    return NumberParse(value, f"read {value!r} from {t[:80]!r}", trailer_unit)


def _same_unit(a: str, b: str) -> bool:
    norm = lambda s: re.sub(r"\s+", "", s).lower().rstrip("s")  # noqa: E731
    return bool(a) and bool(b) and norm(a) == norm(b)


def _close(a: float, b: float) -> bool:
    if a == b:
        return True
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= 1e-12 * max(abs(a), abs(b))


def split_values(text: str) -> list[str]:
    """Split a multi-value answer into parts, in order.

    Separators, in priority order: semicolons; else line breaks; else a comma followed by white
    space (``1,000`` is a thousands separator, ``1, 2`` two values); else the word "and".
    """
    t = strip_markup(text).replace("{,}", ",")
    for pattern in (r";", r"\n", r",\s+", r"\s+and\s+"):
        parts = [p.strip() for p in re.split(pattern, t) if p.strip()]
        if len(parts) > 1:
            return parts
    return [t.strip()] if t.strip() else []
