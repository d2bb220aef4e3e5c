"""The transfer check's reporting arithmetic, on hand-built results with values worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from scaling_book.runs.gap_statistics import (
    ScoredRollout,
    paired_difference,
    transfer_report,
)


def _rollouts(spec: dict[str, tuple[str, list[int]]]) -> list[ScoredRollout]:
    return [ScoredRollout(item_id, grader, e) for item_id, (grader, outcomes) in spec.items() for e in outcomes]


# Train: numeric items score 1 and 0.5 (grader mean 0.75); mcq items 0 and 1 (grader mean 0.5).
TRAIN = _rollouts({"n1": ("numeric", [1, 1]), "n2": ("numeric", [1, 0]),
                   "m1": ("mcq", [0, 0]), "m2": ("mcq", [1, 1])})
# Held-out: one numeric item 0.5; mcq items 1, 1, 0 (grader mean 2/3); one code item 1 (held-out only).
HELDOUT = _rollouts({"hn1": ("numeric", [0, 1]), "hm1": ("mcq", [1, 1]), "hm2": ("mcq", [1, 1]),
                     "hm3": ("mcq", [0, 0]), "hc1": ("code", [1, 1])})


def test_accuracies_are_means_of_item_means() -> None:
    report = transfer_report(TRAIN, HELDOUT, replicates=200)
    assert report.train_accuracy == pytest.approx((1 + 0.5 + 0 + 1) / 4)        # 0.625
    assert report.heldout_accuracy == pytest.approx((0.5 + 1 + 1 + 0 + 1) / 5)  # 0.7
    assert (report.train_items, report.heldout_items) == (4, 5)
    assert (report.train_rollouts, report.heldout_rollouts) == (8, 10)


def test_gap_is_train_minus_heldout_in_points() -> None:
    report = transfer_report(TRAIN, HELDOUT, replicates=200)
    assert report.gap_points == pytest.approx(100 * (0.625 - 0.7))  # -7.5 points


def test_per_grader_table_marks_graders_present_in_one_half() -> None:
    rows = {row.grader: row for row in transfer_report(TRAIN, HELDOUT, replicates=200).per_grader}
    assert rows["numeric"].train_accuracy == pytest.approx(0.75)
    assert rows["numeric"].heldout_accuracy == pytest.approx(0.5)
    assert rows["mcq"].train_accuracy == pytest.approx(0.5)
    assert rows["mcq"].heldout_accuracy == pytest.approx(2 / 3)
    assert rows["code"].status == "heldout only" and rows["code"].train_accuracy is None
    assert rows["code"].heldout_accuracy == pytest.approx(1.0)


def test_matched_gap_reweights_heldout_to_train_grader_mix() -> None:
    report = transfer_report(TRAIN, HELDOUT, replicates=200)
    # Common graders numeric and mcq, each half of the train items: 0.5*(0.75-0.5) + 0.5*(0.5-2/3).
    assert report.matched_gap_points == pytest.approx(100 * (0.5 * 0.25 + 0.5 * (0.5 - 2 / 3)))  # +4.17
    assert report.unmatched == {"code": "heldout only"}
    # The raw gap says held-out is easier (-7.5); the matched gap says it is harder (+4.2).
    assert report.gap_points < 0 < report.matched_gap_points


def test_grader_missing_from_heldout_is_reported_not_dropped() -> None:
    heldout_numeric_only = _rollouts({"hn1": ("numeric", [1, 1])})
    report = transfer_report(TRAIN, heldout_numeric_only, replicates=200)
    assert report.unmatched == {"mcq": "train only"}
    assert report.matched_gap_points == pytest.approx(100 * (0.75 - 1.0))  # numeric only, weight 1


def test_no_common_grader_gives_no_matched_gap() -> None:
    report = transfer_report(_rollouts({"a": ("mcq", [1])}), _rollouts({"b": ("code", [0])}), replicates=100)
    assert report.matched_gap_points is None and report.matched_gap_interval is None
    assert report.unmatched == {"mcq": "train only", "code": "heldout only"}


def test_intervals_are_seeded_and_contain_the_point_estimate() -> None:
    first = transfer_report(TRAIN, HELDOUT, seed=7, replicates=500)
    second = transfer_report(TRAIN, HELDOUT, seed=7, replicates=500)
    assert first.gap_interval == second.gap_interval
    assert first.train_interval.low <= first.train_accuracy <= first.train_interval.high
    assert first.gap_interval.low <= first.gap_points <= first.gap_interval.high


def test_all_right_everywhere_gives_zero_gap_with_zero_width_interval() -> None:
    train = _rollouts({f"t{i}": ("numeric", [1, 1, 1, 1]) for i in range(10)})
    heldout = _rollouts({f"h{i}": ("numeric", [1, 1, 1, 1]) for i in range(5)})
    report = transfer_report(train, heldout, replicates=200)
    assert report.gap_points == 0.0
    assert (report.gap_interval.low, report.gap_interval.high) == (0.0, 0.0)


def test_interval_coverage_on_a_known_distribution() -> None:
    """60 items, 4 rollouts each, every rollout right with probability 0.7, over 120 simulated
    evaluations. Resampling rollouts inside resampled items counts the within-item noise twice, so the
    nested interval is conservative: it covers 0.7 at least as often as nominal, and is wider than the
    binomial interval by about sqrt(2) when items are alike (the worst case)."""
    rng = np.random.default_rng(12345)
    trials, covered, widths = 120, 0, []
    for trial in range(trials):
        outcomes = rng.random((60, 4)) < 0.7
        train = [ScoredRollout(f"i{i}", "numeric", float(x)) for i in range(60) for x in outcomes[i]]
        heldout = [ScoredRollout("h", "numeric", 1.0)]
        interval = transfer_report(train, heldout, seed=trial, replicates=1000).train_interval
        covered += interval.low <= 0.7 <= interval.high
        widths.append(interval.high - interval.low)
    binomial_width = 2 * 1.96 * (0.7 * 0.3 / 240) ** 0.5
    assert covered / trials >= 0.93
    assert 1.2 <= np.mean(widths) / binomial_width <= 1.6


def test_mixed_graders_for_one_item_are_refused() -> None:
    with pytest.raises(ValueError, match="two graders"):
        transfer_report([ScoredRollout("x", "mcq", 1), ScoredRollout("x", "numeric", 1)],
                        [ScoredRollout("y", "mcq", 1)])


def test_paired_difference_over_common_items() -> None:
    run_a = {"p": [1.0], "q": [0.0], "r": [1.0], "only_a": [1.0]}
    run_b = {"p": [1.0], "q": [1.0], "r": [0.0], "only_b": [0.0]}
    difference, interval = paired_difference(run_a, run_b, replicates=500)
    assert difference == pytest.approx(100 * (0 + 1 - 1) / 3)  # 0 points over p, q, r
    assert interval.low <= difference <= interval.high
