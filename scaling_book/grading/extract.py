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

**Characters** (``normalise_unicode``, applied by ``grading.grade`` to every answer block before the
numeric, mcq and formula graders read it): superscript runs become ``^`` and ASCII digits (``10¹²`` ->
``10^12``, ``x²`` -> ``x^2``), then the text is NFKC-normalised (full-width ``２５００`` -> ``2500``,
``Ｄ`` -> ``D``, ``µ`` -> ``μ``); after that, any remaining non-ASCII digit (Arabic-Indic ``٣``,
Devanagari ``३``, CJK numerals ``三``) fails closed with the reason "non-ASCII digit". Numbers are read
by ``scaling_book.grading.number.parse_number`` (the numeric answer grammar)."""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "MAX_ANSWER_CHARS",
    "extract_answer",
    "visible_reply",
    "extract_code",
    "strip_markup",
    "normalise_unicode",
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


_SUPERSCRIPT_RUN = re.compile("[⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺]+")
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")


def normalise_unicode(text: str) -> tuple[str, str | None]:
    """The one character policy of every grader: ``(normalised text, None)`` or ``(text, why refused)``.

    Superscript runs become ``^`` plus ASCII (``10¹²`` -> ``10^12``); then NFKC (full-width forms,
    compatibility characters); then any character that is still a non-ASCII digit or numeral is refused.
    """
    t = _SUPERSCRIPT_RUN.sub(lambda m: "^" + m.group(0).translate(_SUPERSCRIPTS), text)
    t = unicodedata.normalize("NFKC", t)
    for ch in t:
        if ord(ch) > 127 and unicodedata.numeric(ch, None) is not None:
            return text, (f"non-ASCII digit {ch!r} (U+{ord(ch):04X}): numbers are read in ASCII digits only "
                          f"(after NFKC normalisation)")
    return t, None


# A list marker: "(1)", "1)", "1.", "1:", "a)", "(a)", at the start or after a separator/space.
_MARKER = re.compile(r"(?:^|(?<=[\s;,]))\(?([0-9]{1,2}|[a-z])(?:\)|\.|:)(?=\s)")


def _numbered_parts(text: str) -> tuple[list[str], str | None] | None:
    """Split a numbered list ("(1) 2500; (2) 5625", "1. 2500 2. 5625", "a) 2500, b) 5625") at its
    markers, which must count up from 1 or a; None when the text does not start with a marker."""
    first = _MARKER.match(text)
    if not first or first.group(1) not in ("1", "a"):
        return None
    letters = first.group(1) == "a"
    expected = lambda k: chr(ord("a") + k) if letters else str(k + 1)  # noqa: E731
    cuts, k = [], 0
    for m in _MARKER.finditer(text):
        if m.group(1) == expected(k):
            cuts.append((m.start(), m.end()))
            k += 1
    parts = []
    for i, (_, end) in enumerate(cuts):
        stop = cuts[i + 1][0] if i + 1 < len(cuts) else len(text)
        parts.append(text[end:stop].strip().strip(";,").strip())
    if any(not p for p in parts):
        return parts, "an empty item in the numbered list"
    return parts, None


def split_values(text: str) -> tuple[list[str], str | None]:
    """Split a multi-value answer into parts, in order; ``(parts, None)`` or ``(parts, why refused)``.

    A numbered list (``(1) 2500; (2) 5625``, ``1. 2500; 2. 5625``, ``a) 2500, b) 5625``) is split at its
    markers, which must count up from 1 (or a). Otherwise the separators, in priority order: semicolons;
    else line breaks; else a comma followed by white space (``1,000`` is a thousands separator, ``1, 2``
    two values); else the word "and".
    """
    t = strip_markup(text).replace("{,}", ",")
    numbered = _numbered_parts(t)
    if numbered is not None:
        return numbered
    for pattern in (r";", r"\n", r",\s+", r"\s+and\s+"):
        parts = [p.strip() for p in re.split(pattern, t) if p.strip()]
        if len(parts) > 1:
            return parts, None
    return ([t.strip()] if t.strip() else []), None
