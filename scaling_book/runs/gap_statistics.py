"""The transfer arithmetic: train vs held-out accuracy, the gap, per-grader and matched-grader gaps,
and bootstrap confidence intervals.

All accuracies are of the binary `exact` metric, as fractions in [0, 1]; gaps are in percentage
points (train minus held-out, so a positive gap means the model does worse on the held-out GPU half).

- An item's score is the mean `exact` over its rollouts; a half's accuracy is the mean over its items
  (every item weighs the same, however many rollouts it has).
- The **matched-grader gap** reweights the held-out half to the train half's grader mix: over the
  graders present in both halves, with weights w_g = (train items of grader g) / (train items of those
  graders), matched gap = 100 * sum_g w_g * (train_acc_g - heldout_acc_g). A grader present in one half
  only cannot be reweighted; it is listed in `unmatched` and left out of the matched gap only.
- **Intervals** are 95% percentile bootstrap intervals: each replicate resamples items with
  replacement within each (half, grader) stratum — the grader mix is fixed by the dataset's design,
  not sampled — and, within each drawn item, resamples its rollouts with replacement. Seeded, so the
  same seed gives the same intervals. The nested resampling counts within-item noise twice, so the
  intervals are conservative (up to about sqrt(2) wider than needed when items are alike;
  tests/test_transfer_check.py measures this).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

DEFAULT_BOOTSTRAP_REPLICATES = 2000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class ScoredRollout:
    """One rollout's binary outcome: which item, its grader, and whether it was exactly right."""

    item_id: str
    grader: str
    exact: float


@dataclass(frozen=True)
class Interval:
    """A 95% bootstrap interval, in the unit of the quantity it bounds (fraction in [0, 1] for an
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
    seed: int
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


def _resampled_grader_means(items: list[np.ndarray], rng: np.random.Generator, replicates: int) -> np.ndarray:
    """(replicates,) bootstrap means of one stratum: items drawn with replacement, then rollouts within."""
    n = len(items)
    lengths = np.array([len(o) for o in items])
    width = int(lengths.max())
    padded = np.zeros((n, width))
    for i, outcomes in enumerate(items):
        padded[i, : len(outcomes)] = outcomes
    picked = rng.integers(0, n, size=(replicates, n))                      # which items
    picked_lengths = lengths[picked]                                        # (R, n)
    draws = rng.random((replicates, n, width))                              # rollout draws within each item
    rollout_index = np.floor(draws * picked_lengths[..., None]).astype(int)  # (R, n, width), < length
    values = padded[picked[..., None], rollout_index]                       # (R, n, width)
    mask = np.arange(width)[None, None, :] < picked_lengths[..., None]
    item_means = (values * mask).sum(axis=2) / picked_lengths
    return item_means.mean(axis=1)


def _interval(samples: np.ndarray) -> Interval:
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(samples, [alpha, 1.0 - alpha])
    return Interval(float(low), float(high))


def transfer_report(train: Iterable[ScoredRollout], heldout: Iterable[ScoredRollout], *, seed: int = 0,
                    replicates: int = DEFAULT_BOOTSTRAP_REPLICATES) -> TransferReport:
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

    rng = np.random.default_rng(seed)
    boot: dict[str, dict[str, np.ndarray]] = {"train": {}, "heldout": {}}
    for half, strata in (("train", train_strata), ("heldout", heldout_strata)):
        for grader in sorted(strata):
            boot[half][grader] = _resampled_grader_means(strata[grader], rng, replicates)

    def half_accuracy(half: str, strata: dict[str, list[np.ndarray]]) -> np.ndarray:
        total = sum(len(items) for items in strata.values())
        return sum(boot[half][g] * len(strata[g]) / total for g in strata)

    train_boot, heldout_boot = half_accuracy("train", train_strata), half_accuracy("heldout", heldout_strata)
    matched_interval = None
    if matched is not None:
        common = sorted(set(train_strata) & set(heldout_strata))
        total = sum(len(train_strata[g]) for g in common)
        matched_boot = 100.0 * sum(len(train_strata[g]) / total * (boot["train"][g] - boot["heldout"][g])
                                   for g in common)
        matched_interval = _interval(matched_boot)
    return TransferReport(
        train_accuracy=train_accuracy, heldout_accuracy=heldout_accuracy,
        train_items=sum(len(v) for v in train_strata.values()),
        heldout_items=sum(len(v) for v in heldout_strata.values()),
        train_rollouts=len(train_rollouts), heldout_rollouts=len(heldout_rollouts),
        gap_points=100.0 * (train_accuracy - heldout_accuracy), matched_gap_points=matched, per_grader=per_grader,
        train_interval=_interval(train_boot), heldout_interval=_interval(heldout_boot),
        gap_interval=_interval(100.0 * (train_boot - heldout_boot)), matched_gap_interval=matched_interval,
        seed=seed, unmatched=unmatched,
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
    return float(diffs.mean()), _interval(diffs[picked].mean(axis=1))


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
