"""The multiple-choice grader: one explicit letter, binary.

Reading the letter from the answer block:

1. the whole answer is one letter, optionally wrapped (``D``, ``(D)``, ``D.``, ``**D**``, ``\\boxed{D}``,
   ``Option D``, ``Answer: D``), or one letter followed by its own option's text (``D) v4 and v5p``);
2. otherwise the block must name exactly one choice letter anywhere (after taking out quoted option
   texts, whose inner letters such as "2 x B200" are not choices; another option's quoted text counts
   as naming that option) and hold no word that rejects, retracts or hedges (``wrong``, ``incorrect``,
   ``not``, ``no``, ``or``, ``maybe``, ``rule out``, ``unless``, ``wait``...): "B or D", "A, B, C or D",
   "D? No, B", "D.B", "Option D is incorrect" all score 0 as ambiguous;
3. that letter must be given explicitly: a cue ("the answer is D", "choose D", "correct option is
   (D)"), or a leading letter with a delimiter followed by text (``D: ...``), or the letter alone after
   punctuation and a connective ("so D").

Anything else — no letter, a letter inside other text such as "I think D" or a formula "2*N*D" —
scores 0 with the reason recorded. Precision before recall: an explanation inside the answer block
that names another option or negates anything costs the point.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from scaling_book.grading.extract import MAX_ANSWER_CHARS, strip_markup

__all__ = ["read_letter", "grade_mcq"]

_CUE = re.compile(
    r"(?i:answer|option|choice)\s*(?i:is|:|=|-)?\s*(?i:option|choice|letter)?\s*[:\-]?\s*\(?([A-Z])\)?(?![\w])"
    r"|(?i:\b(?:choose|select|pick)\s+(?:option\s+)?)\(?([A-Z])\)?(?![\w])"
)
# A second letter offered right after a cue's letter: "the answer is A or D", "choose A/D", "A and D",
# "A, D." — but not a letter that starts a new clause ("D and A is wrong", "D, A is wrong").
_ALTERNATIVE = re.compile(
    r"\s*(?:/|&|\||(?i:or|and)\b)\s*(?i:option\s+|choice\s+)?\(?([A-Z])\)?(?![\w'])"
    r"(?!\s+(?i:is|isn't|was|would|does|doesn't|has|can|cannot|could|seems)\b)"
    r"|\s*,\s*\(?([A-Z])\)?(?=\s*(?:$|[.;,)!?]|(?i:or|and)\b))"
)
# Another choice letter written as a list item ("D. mesh", "(D) mesh", "D: mesh") later in the answer.
_LIST_ITEM = re.compile(r"(?:^|[\s,;])\(?([A-Z])\s*(?:\)|:|\.(?=\s|$))")

#: Words that reject, retract or hedge a letter ("D is wrong", "D? No, B", "maybe D", "D, or B"): an
#: answer block holding one of them (outside the chosen option's own text) is not a single choice.
_REJECTING = re.compile(
    r"(?i)(?<![\w'])(?:not|no|nope|isn't|aren't|wasn't|wrong|incorrect|false|never|neither|nor|except|"
    r"excluding|exclude[sd]?|rule[sd]?\s+out|ruled\s+out|eliminat\w*|reject\w*|discard\w*|unlikely|doubt\w*|"
    r"maybe|perhaps|possibly|probably|might|guess\w*|unsure|uncertain|unless|wait|actually|alternatively|"
    r"or|but|however|although|though|either|instead|rather|also|otherwise)(?![\w'])"
)
_LETTER_TOKEN = re.compile(r"(?<![\w'])\(?([A-Z])\)?(?![\w'])")


def _clean(text: str) -> str:
    """Markup off (``extract.strip_markup``, ``\\boxed``, ``\\text``, braces), for answers and option texts alike."""
    t = strip_markup(text)
    return re.sub(r"(?i)\\boxed|\\text", "", t).replace("{", " ").replace("}", " ").strip()


def _without_choice_text(text: str, choices: Mapping[str, str]) -> tuple[str, list[str]]:
    """``text`` with every option's own text taken out (case-insensitive, any spacing, a final period
    optional; longest text first, so an option whose text holds another's is taken whole), and the
    letters whose text was quoted. Letters inside an option's text ("2 x B200", "C[I, K]") are then not
    read as choices."""
    quoted = []
    for letter, body in sorted(choices.items(), key=lambda kv: -len(str(kv[1]))):
        words = _clean(str(body)).rstrip(".").split()
        if not words or len("".join(words)) < 2:
            continue
        pattern = r"(?<![\w])" + r"\s*".join(re.escape(w) for w in words) + r"\.?(?![\w])"
        text, n = re.subn(pattern, " ", text, flags=re.I)
        if n:
            quoted.append(str(letter).upper())
    return text, quoted


def read_letter(answer: str, letters: list[str], choices: Mapping[str, str] | None = None
                ) -> tuple[str | None, str]:
    """The one letter an answer chooses among ``letters``, or (None, why not).

    ``choices`` (letter -> option text), when given, lets the answer quote an option's own text after
    its letter ("D) v4 and v5p"): letters and words inside quoted option text are not read."""
    valid = {l.upper() for l in letters}
    t = _clean(answer)
    # 1. the whole answer is a letter
    single = _single_letter(t, valid)
    if single:
        return single, f"answer is the single letter {single}"
    t, quoted = _without_choice_text(t, choices or {})
    # a letter followed by nothing but its own option text: "D) v4 and v5p", "D (v4 and v5p)"
    single = _single_letter(t, valid)
    # every choice letter named anywhere: two are a hedge, a list or a retraction ("B or D", "D? No, B")
    tokens = {x for x in _LETTER_TOKEN.findall(t) if x in valid}
    named = sorted(tokens | set(quoted))
    if len(named) > 1:
        return None, f"several letters ({', '.join(named)}): not a single choice (ambiguous)"
    rejecting = _REJECTING.search(t)
    if rejecting:
        return None, (f"the answer has the word {rejecting.group(0)!r}, which rejects, retracts or hedges a "
                      f"letter: not a single choice (ambiguous)")
    if single:
        return single, f"answer is the letter {single} with its option's text"
    if not tokens:
        return None, "no choice letter in the answer" + (" (an option's text alone is not a letter)" if quoted else "")
    # 2. explicit cue
    cues = []
    for m in _CUE.finditer(t):
        letter = (m.group(1) or m.group(2) or "").upper()
        if letter in valid:
            alt = _ALTERNATIVE.match(t, m.end())
            other = (alt.group(1) or alt.group(2)) if alt else None
            cues.append((letter, other if other in valid and other != letter else None))
    if cues:
        letter, other = cues[-1]
        if other:
            return None, f"the cue names several letters ({letter}, {other}): not a single choice"
        return letter, f"explicit cue names {letter}"
    # 3. a leading letter with a delimiter, and no other choice letter listed the same way after it
    m = re.match(r"^\(?([A-Z])\s*(?:\)|\.|:|\s-\s|\s—\s)", t)
    if m and m.group(1) in valid:
        listed = sorted({x for x in _LIST_ITEM.findall(t, m.end()) if x in valid and x != m.group(1)})
        if listed:
            return None, f"several letters ({m.group(1)}, {', '.join(listed)}): not a single choice"
        return m.group(1), f"answer starts with {m.group(1)} and a delimiter"
    # 4. what is left after punctuation and a leading connective is a single letter
    remaining = re.sub(r"[;,.:!]", " ", t).strip(" ()[]*")
    remaining = re.sub(r"(?i)^(?:so|thus|hence|therefore|then)\s+", "", remaining).strip()
    if len(remaining) == 1 and remaining.upper() in valid:
        return remaining.upper(), f"the only choice letter is {remaining.upper()}"
    return None, f"letter {min(tokens)} is not given as an explicit single choice (write just the letter)"


def _single_letter(t: str, valid: set[str]) -> str | None:
    bare = re.sub(r"(?i)^(?:final\s+)?(?:answer|option|choice)\s*(?:is)?\s*[:\-]?\s*", "", t).strip()
    bare = bare.strip(" .()[]:*")
    return bare.upper() if len(bare) == 1 and bare.upper() in valid else None


def grade_mcq(info: Mapping[str, Any], answer: str | None) -> tuple[float, bool, str, bool]:
    """Grade one letter. Returns (correctness, exact, reason, formatted)."""
    gold = str(info.get("answer_letter") or "").strip().upper()
    try:
        choices = json.loads(info.get("choices") or "{}")
    except ValueError:
        choices = {}
    letters = sorted(choices) if isinstance(choices, dict) and choices else []
    if not gold or gold not in {l.upper() for l in letters}:
        return 0.0, False, "item has no valid answer letter", answer is not None
    if answer is None:
        return 0.0, False, "no <answer> block", False
    if len(answer) > MAX_ANSWER_CHARS:
        return 0.0, False, f"answer is {len(answer)} characters; the limit is {MAX_ANSWER_CHARS}", False
    letter, why = read_letter(answer, letters, {str(k): str(v) for k, v in choices.items()})
    if letter is None:
        return 0.0, False, f"answer {answer[:80]!r}: {why}", False
    if letter == gold:
        return 1.0, True, f"{why}; correct", True
    return 0.0, False, f"{why}; the answer is {gold}", True
