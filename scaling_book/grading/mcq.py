"""The multiple-choice grader: one explicit letter, binary.

Reading the letter from the answer block, in priority order:

1. the whole answer is one letter, optionally wrapped (``D``, ``(D)``, ``D.``, ``**D**``, ``\\boxed{D}``,
   ``Option D``, ``Answer: D``);
2. an explicit cue: "the answer is D", "answer: D", "correct option is (D)", "choose D"... (the last
   cue wins; a cue naming two letters — "the answer is A or D", "choose A/D" — is ambiguous);
3. the answer starts with a letter and a delimiter, followed by text (``D) all-gather``, ``D: ...``),
   unless another letter is listed the same way after it (``A. ring, D. mesh``);
4. after discarding negated letters ("not B", "except B", "rather than B") and punctuation, what is
   left is one letter: "not B; D" reads as D.

Anything else — no letter, two letters ("A or C"), every letter, a letter inside other text such as
"I think D" or a formula "2*N*D" — scores 0 with the reason recorded.
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
_NEGATED = re.compile(r"(?i)\b(?:not|isn't|is not|except|rather than|instead of|excluding|but not)\s+"
                      r"(?:option\s+|choice\s+)?\(?([A-Z])\)?(?![\w])")


def read_letter(answer: str, letters: list[str]) -> tuple[str | None, str]:
    """The one letter an answer chooses among ``letters``, or (None, why not)."""
    valid = {l.upper() for l in letters}
    t = strip_markup(answer)
    t = re.sub(r"(?i)\\boxed|\\text", "", t).replace("{", " ").replace("}", " ").strip()
    # 1. the whole answer is a letter
    bare = re.sub(r"(?i)^(?:final\s+)?(?:answer|option|choice)\s*(?:is)?\s*[:\-]?\s*", "", t).strip()
    bare = bare.strip(" .()[]:*")
    if len(bare) == 1 and bare.upper() in valid:
        return bare.upper(), f"answer is the single letter {bare.upper()}"
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
    # 4. what is left after discarding negated letters ("not B; D") is a single letter
    remaining = _NEGATED.sub(" ", t)
    remaining = re.sub(r"[;,.:!]", " ", remaining).strip(" ()[]*")
    remaining = re.sub(r"(?i)^(?:so|thus|hence|therefore|then|but|instead|rather)\s+", "", remaining).strip()
    if len(remaining) == 1 and remaining.upper() in valid:
        return remaining.upper(), f"the only choice letter not negated is {remaining.upper()}"
    named = sorted({x for x in re.findall(r"(?<![\w'])\(?([A-Z])\)?(?![\w'])", t) if x in valid})
    if not named:
        return None, "no choice letter in the answer"
    if len(named) > 1:
        return None, f"several letters ({', '.join(named)}): not a single choice"
    return None, f"letter {named[0]} is not given as an explicit single choice (write just the letter)"


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
    letter, why = read_letter(answer, letters)
    if letter is None:
        return 0.0, False, f"answer {answer[:80]!r}: {why}", False
    if letter == gold:
        return 1.0, True, f"{why}; correct", True
    return 0.0, False, f"{why}; the answer is {gold}", True
