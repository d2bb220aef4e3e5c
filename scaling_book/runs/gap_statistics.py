"""The transfer arithmetic: train vs held-out accuracy, the gap, per-grader and matched-grader gaps,
and their confidence intervals.

All accuracies are of the binary `exact` metric, as fractions in [0, 1]; gaps are in percentage
points (train minus held-out, so a positive gap means the model does worse on the held-out GPU half).

- An item's score is the mean `exact` over its rollouts; a half's accuracy is the mean over its items
  (every item weighs the same, however many rollouts it has).
- The **matched-grader gap** reweights the held-out half to the train half's grader mix: over the
  graders present in both halves, with weights w_g = (train items of grader g) / (train items of those
  graders), matched gap = 100 * sum_g w_g * (train_acc_g - heldout_acc_g). A grader present in one half
  only cannot be reweighted; it is listed in `unmatched` and left out of the matched gap only.
- **Intervals** (95%) stay honest at 0% and 100%, where a percentile bootstrap collapses to a point
  (every resample of all-wrong items is all wrong: "0.0% [0.0, 0.0]" from 28 items):
  - each half: the Wilson score interval (Wilson 1927; Brown, Cai & DasGupta 2001, "Interval
    estimation for a binomial proportion", Statistical Science 16:101-133) of the mean of item means,
    with n = the effective number of items (`effective_items`: the item count with one rollout per
    item; with several rollouts, p(1-p) / variance of the mean, between the item and rollout counts,
    as Korn & Graubard 1998 do for clustered proportions);
  - the gap: Newcombe's hybrid score interval (Newcombe 1998, "Interval estimation for the
    difference between independent proportions", Statistics in Medicine 17:873-890, method 10) from
    the two halves' Wilson intervals;
  - the matched-grader gap: its generalisation to a weighted sum of differences, MOVER (Zou & Donner
    2008, "Construction of confidence limits about effect measures", Statistics in Medicine
    27:1693-1702), from per-grader Wilson intervals.
  None of these is random: the same rollouts always give the same intervals.
  tests/test_transfer_check.py measures their coverage at accuracies 0, 5%, 50%, 95% and 100%.
- `paired_difference` (the `compare` command) keeps a seeded percentile bootstrap over items.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

DEFAULT_BOOTSTRAP_REPLICATES = 2000
CONFIDENCE = 0.95
Z_95 = 1.959963984540054   # the standard normal's 97.5% quantile


@dataclass(frozen=True)
class ScoredRollout:
    """One rollout's binary outcome: which item, its grader, and whether it was exactly right."""

    item_id: str
    grader: str
    exact: float


@dataclass(frozen=True)
class Interval:
    """A 95% confidence interval, in the unit of the quantity it bounds (fraction in [0, 1] for an
    accuracy, percentage points for a gap)."""

    low: float
    high: float


@dataclass
class GraderRow:
    """One grader's accuracy in each half (None where the half has no item of that grader)."""

    grader: str
    train_items: int
    heldout_items: int
    train_accuracy: float | None
    heldout_accuracy: float | None

    @property
    def status(self) -> str:
        """"both", "train only" or "heldout only": the halves that have items of this grader."""
        if self.train_items and self.heldout_items:
            return "both"
        return "train only" if self.train_items else "heldout only"


@dataclass
class TransferReport:
    """Everything the transfer check prints and stores."""

    train_accuracy: float
    heldout_accuracy: float
    train_items: int
    heldout_items: int
    train_rollouts: int
    heldout_rollouts: int
    gap_points: float
    matched_gap_points: float | None
    per_grader: list[GraderRow]
    train_interval: Interval
    heldout_interval: Interval
    gap_interval: Interval
    matched_gap_interval: Interval | None
    unmatched: dict[str, str] = field(default_factory=dict)


def _item_outcomes(rollouts: Iterable[ScoredRollout]) -> dict[str, dict[str, list[np.ndarray]]]:
    """{grader: [array of one item's rollout outcomes, ...]}, items in a stable (sorted id) order."""
    by_item: dict[str, list[float]] = defaultdict(list)
    grader_of: dict[str, str] = {}
    for rollout in rollouts:
        by_item[rollout.item_id].append(float(rollout.exact))
        previous = grader_of.setdefault(rollout.item_id, rollout.grader)
        if previous != rollout.grader:
            raise ValueError(f"item {rollout.item_id} has rollouts under two graders: {previous}, {rollout.grader}")
    strata: dict[str, list[np.ndarray]] = defaultdict(list)
    for item_id in sorted(by_item):
        strata[grader_of[item_id]].append(np.asarray(by_item[item_id]))
    return strata


def _accuracy(strata: dict[str, list[np.ndarray]]) -> float:
    means = [outcomes.mean() for items in strata.values() for outcomes in items]
    return float(np.mean(means)) if means else float("nan")


def _grader_accuracy(items: list[np.ndarray]) -> float:
    return float(np.mean([outcomes.mean() for outcomes in items]))


def _matched(train: dict[str, list[np.ndarray]], heldout: dict[str, list[np.ndarray]],
             train_acc_by_grader: dict[str, float], heldout_acc_by_grader: dict[str, float]) -> float | None:
    common = sorted(set(train) & set(heldout))
    if not common:
        return None
    total = sum(len(train[g]) for g in common)
    return 100.0 * sum(len(train[g]) / total * (train_acc_by_grader[g] - heldout_acc_by_grader[g]) for g in common)


def wilson_interval(accuracy: float, n: float) -> Interval:
    """The 95% Wilson score interval of a proportion `accuracy` (in [0, 1]) observed on `n` trials.

    `n` may be an effective sample size (not a whole number). Raises ValueError for n <= 0.
    """
    if n <= 0:
        raise ValueError(f"a Wilson interval needs n > 0 trials, got {n}")
    z2 = Z_95 * Z_95
    centre = (accuracy + z2 / (2 * n)) / (1 + z2 / n)
    half_width = Z_95 * math.sqrt(accuracy * (1 - accuracy) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # Exactly 0 (1) at an accuracy of 0 (1), as in exact arithmetic; rounding would leave ~1e-18.
    low = 0.0 if accuracy == 0.0 else max(0.0, centre - half_width)
    high = 1.0 if accuracy == 1.0 else min(1.0, centre + half_width)
    return Interval(low, high)


def effective_items(items: list[np.ndarray]) -> float:
    """Effective sample size of the mean of item means: p(1-p) / var(mean), within [items, rollouts].

    One rollout per item gives exactly the item count (the binomial case). With several rollouts per
    item, the between-item variance of the item means says how much they add: items that are alike
    approach the rollout count, items that are all-or-nothing stay at the item count. Where the
    variance is zero (every item mean equal, e.g. accuracy 0 or 1) there is no evidence either way
    and the item count is used.
    """
    n = len(items)
    rollouts = float(sum(len(o) for o in items))
    means = np.array([o.mean() for o in items])
    p = float(means.mean())
    if n < 2 or rollouts == n:
        return float(n)
    variance_of_mean = float(means.var(ddof=1)) / n
    if variance_of_mean == 0.0 or p in (0.0, 1.0):
        return float(n)
    return float(min(rollouts, max(n, p * (1 - p) / variance_of_mean)))


def _half_interval(strata: dict[str, list[np.ndarray]]) -> Interval:
    items = [outcomes for group in strata.values() for outcomes in group]
    return wilson_interval(_accuracy(strata), effective_items(items))


def mover_interval(terms: list[tuple[float, float, Interval, float, Interval]]) -> Interval:
    """95% MOVER interval (Zou & Donner 2008) of sum_k w_k * (a_k - b_k), w_k >= 0 (w = 100 gives points for fractions a, b).

    Each term is (w_k, a_k, interval of a_k, b_k, interval of b_k); the a's and b's are independent. With
    one term of weight 1 and Wilson intervals this is Newcombe's (1998) hybrid score interval.
    """
    estimate = sum(w * (a - b) for w, a, _, b, _ in terms)
    below = math.sqrt(sum((w * (a - ia.low)) ** 2 + (w * (ib.high - b)) ** 2 for w, a, ia, b, ib in terms))
    above = math.sqrt(sum((w * (ia.high - a)) ** 2 + (w * (b - ib.low)) ** 2 for w, a, ia, b, ib in terms))
    return Interval(estimate - below, estimate + above)


def _percentile_interval(samples: np.ndarray) -> Interval:
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(samples, [alpha, 1.0 - alpha])
    return Interval(float(low), float(high))


def transfer_report(train: Iterable[ScoredRollout], heldout: Iterable[ScoredRollout]) -> TransferReport:
    """The transfer report of a train run and a held-out run (each: every rollout of its half).

    Raises ValueError if either half has no rollouts.
    """
    train_rollouts, heldout_rollouts = list(train), list(heldout)
    if not train_rollouts or not heldout_rollouts:
        raise ValueError("both halves need at least one rollout")
    train_strata, heldout_strata = _item_outcomes(train_rollouts), _item_outcomes(heldout_rollouts)
    train_by_grader = {g: _grader_accuracy(items) for g, items in train_strata.items()}
    heldout_by_grader = {g: _grader_accuracy(items) for g, items in heldout_strata.items()}
    train_accuracy, heldout_accuracy = _accuracy(train_strata), _accuracy(heldout_strata)
    per_grader = [
        GraderRow(g, len(train_strata.get(g, [])), len(heldout_strata.get(g, [])), train_by_grader.get(g),
                  heldout_by_grader.get(g))
        for g in sorted(set(train_strata) | set(heldout_strata))
    ]
    unmatched = {row.grader: row.status for row in per_grader if row.status != "both"}
    matched = _matched(train_strata, heldout_strata, train_by_grader, heldout_by_grader)

    train_interval, heldout_interval = _half_interval(train_strata), _half_interval(heldout_strata)
    gap = mover_interval([(100.0, train_accuracy, train_interval, heldout_accuracy, heldout_interval)])
    matched_interval = None
    if matched is not None:
        common = sorted(set(train_strata) & set(heldout_strata))
        total = sum(len(train_strata[g]) for g in common)
        matched_interval = mover_interval([
            (100.0 * len(train_strata[g]) / total,
             train_by_grader[g], wilson_interval(train_by_grader[g], effective_items(train_strata[g])),
             heldout_by_grader[g], wilson_interval(heldout_by_grader[g], effective_items(heldout_strata[g])))
            for g in common
        ])
    return TransferReport(
        train_accuracy=train_accuracy, heldout_accuracy=heldout_accuracy,
        train_items=sum(len(v) for v in train_strata.values()),
        heldout_items=sum(len(v) for v in heldout_strata.values()),
        train_rollouts=len(train_rollouts), heldout_rollouts=len(heldout_rollouts),
        gap_points=100.0 * (train_accuracy - heldout_accuracy), matched_gap_points=matched, per_grader=per_grader,
        train_interval=train_interval, heldout_interval=heldout_interval,
        gap_interval=gap, matched_gap_interval=matched_interval, unmatched=unmatched,
    )


def paired_difference(run_a: dict[str, list[float]], run_b: dict[str, list[float]], *, seed: int = 0,
                      replicates: int = DEFAULT_BOOTSTRAP_REPLICATES) -> tuple[float, Interval]:
    """Mean per-item difference (B minus A) in points over the items both runs share, with a paired
    95% bootstrap interval (items resampled together in both runs). Raises ValueError with no common item."""
    common = sorted(set(run_a) & set(run_b))
    if not common:
        raise ValueError("the two runs share no item")
    diffs = np.array([np.mean(run_b[i]) - np.mean(run_a[i]) for i in common]) * 100.0
    rng = np.random.default_rng(seed)
    picked = rng.integers(0, len(diffs), size=(replicates, len(diffs)))
    return float(diffs.mean()), _percentile_interval(diffs[picked].mean(axis=1))


@dataclass
class MemorisationGap:
    """Original vs counterfactual-variant accuracy over the same parametric train items, in points."""

    items: int
    variants_per_item: int
    original_accuracy: float
    variant_accuracy: float
    gap_points: float
    interval: Interval


def memorisation_gap(original: dict[str, list[float]], variants: dict[str, list[float]], variants_per_item: int,
                     *, seed: int = 0, replicates: int = DEFAULT_BOOTSTRAP_REPLICATES) -> MemorisationGap:
    """Original accuracy minus variant accuracy (points) over the items in both: `original` maps an
    item id to its rollouts' exact outcomes, `variants` a parent item id to every rollout of all its
    variants. The interval is the paired bootstrap of `paired_difference` (items resampled together).
    Raises ValueError when no item has both."""
    common = sorted(set(original) & set(variants))
    gap, interval = paired_difference({i: variants[i] for i in common}, {i: original[i] for i in common},
                                      seed=seed, replicates=replicates)
    return MemorisationGap(
        items=len(common), variants_per_item=variants_per_item,
        original_accuracy=float(np.mean([np.mean(original[i]) for i in common])),
        variant_accuracy=float(np.mean([np.mean(variants[i]) for i in common])),
        gap_points=gap, interval=interval,
    )
