"""The rubric's weights and the mapping from one `Grade` to rewards and metrics.

Used by the verifiers taskset (at rollout time) and by `scaling-book rescore` (re-grading stored
responses), so both compute rewards the same way. Light: imports neither verifiers nor sympy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scaling_book.grading import Grade

CORRECTNESS_WEIGHT = 1.0
FORMAT_WEIGHT = 0.2


def format_reward(grade: Grade) -> float:
    """1.0 when the response followed the answer format, else 0.0: no participation fee for arbitrary text."""
    return 1.0 if grade.formatted else 0.0


def total_reward(grade: Grade) -> float:
    """correctness * 1.0 + format * 0.2, in [0, 1.2]."""
    return CORRECTNESS_WEIGHT * grade.correctness + FORMAT_WEIGHT * format_reward(grade)
