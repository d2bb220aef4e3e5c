"""The transfer check's reporting arithmetic, on hand-built results with values worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from scaling_book.runs.gap_statistics import (
    ScoredRollout,
    effective_items,
    mover_interval,
    paired_difference,
    transfer_report,
    wilson_interval,
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
    report = transfer_report(TRAIN, HELDOUT)
    assert report.train_accuracy == pytest.approx((1 + 0.5 + 0 + 1) / 4)        # 0.625
    assert report.heldout_accuracy == pytest.approx((0.5 + 1 + 1 + 0 + 1) / 5)  # 0.7
    assert (report.train_items, report.heldout_items) == (4, 5)
    assert (report.train_rollouts, report.heldout_rollouts) == (8, 10)


def test_gap_is_train_minus_heldout_in_points() -> None:
    report = transfer_report(TRAIN, HELDOUT)
    assert report.gap_points == pytest.approx(100 * (0.625 - 0.7))  # -7.5 points


def test_per_grader_table_marks_graders_present_in_one_half() -> None:
    rows = {row.grader: row for row in transfer_report(TRAIN, HELDOUT).per_grader}
    assert rows["numeric"].train_accuracy == pytest.approx(0.75)
    assert rows["numeric"].heldout_accuracy == pytest.approx(0.5)
    assert rows["mcq"].train_accuracy == pytest.approx(0.5)
    assert rows["mcq"].heldout_accuracy == pytest.approx(2 / 3)
    assert rows["code"].status == "heldout only" and rows["code"].train_accuracy is None
    assert rows["code"].heldout_accuracy == pytest.approx(1.0)


def test_matched_gap_reweights_heldout_to_train_grader_mix() -> None:
    report = transfer_report(TRAIN, HELDOUT)
    # Common graders numeric and mcq, each half of the train items: 0.5*(0.75-0.5) + 0.5*(0.5-2/3).
    assert report.matched_gap_points == pytest.approx(100 * (0.5 * 0.25 + 0.5 * (0.5 - 2 / 3)))  # +4.17
    assert report.unmatched == {"code": "heldout only"}
    # The raw gap says held-out is easier (-7.5); the matched gap says it is harder (+4.2).
    assert report.gap_points < 0 < report.matched_gap_points


def test_grader_missing_from_heldout_is_reported_not_dropped() -> None:
    heldout_numeric_only = _rollouts({"hn1": ("numeric", [1, 1])})
    report = transfer_report(TRAIN, heldout_numeric_only)
    assert report.unmatched == {"mcq": "train only"}
    assert report.matched_gap_points == pytest.approx(100 * (0.75 - 1.0))  # numeric only, weight 1


def test_no_common_grader_gives_no_matched_gap() -> None:
    report = transfer_report(_rollouts({"a": ("mcq", [1])}), _rollouts({"b": ("code", [0])}))
    assert report.matched_gap_points is None and report.matched_gap_interval is None
    assert report.unmatched == {"mcq": "train only", "code": "heldout only"}


def test_intervals_contain_the_point_estimate_and_are_deterministic() -> None:
    first, second = transfer_report(TRAIN, HELDOUT), transfer_report(TRAIN, HELDOUT)
    assert first.gap_interval == second.gap_interval
    assert first.train_interval.low <= first.train_accuracy <= first.train_interval.high
    assert first.gap_interval.low <= first.gap_points <= first.gap_interval.high
    assert first.matched_gap_interval.low <= first.matched_gap_points <= first.matched_gap_interval.high


def _constant_policy(correct: int, train_items: int = 89, heldout_items: int = 28, rollouts: int = 1):
    train = _rollouts({f"t{i}": ("numeric", [correct] * rollouts) for i in range(train_items)})
    heldout = _rollouts({f"h{i}": ("numeric", [correct] * rollouts) for i in range(heldout_items)})
    return transfer_report(train, heldout)


def test_a_policy_wrong_on_every_item_gets_honest_intervals_not_a_point() -> None:
    report = _constant_policy(0)
    z2 = 1.959963984540054 ** 2
    # Wilson at 0 of n: [0, z^2 / (n + z^2)] -- "0 of 28" is not "certainly 0" (rule of three: ~3/n).
    assert (report.train_interval.low, report.train_interval.high) == (0.0, pytest.approx(z2 / (89 + z2)))
    assert (report.heldout_interval.low, report.heldout_interval.high) == (0.0, pytest.approx(z2 / (28 + z2)))
    # Newcombe: gap 0, from -(held-out upper limit) to +(train upper limit), in points.
    assert report.gap_points == 0.0
    assert report.gap_interval.low == pytest.approx(-100 * z2 / (28 + z2))    # -12.1 points
    assert report.gap_interval.high == pytest.approx(100 * z2 / (89 + z2))    # +4.1 points


def test_a_policy_right_on_every_item_gets_the_mirror_image() -> None:
    report, z2 = _constant_policy(1, rollouts=4), 1.959963984540054 ** 2
    # Four identical rollouts per item add no evidence about other items: n is the item count.
    assert (report.train_interval.low, report.train_interval.high) == (pytest.approx(89 / (89 + z2)), 1.0)
    assert report.gap_interval.low == pytest.approx(-100 * z2 / (89 + z2))
    assert report.gap_interval.high == pytest.approx(100 * z2 / (28 + z2))


def test_effective_items_run_from_the_item_count_to_the_rollout_count() -> None:
    one_each = [np.array([x]) for x in (1, 0, 1, 1, 0)]
    assert effective_items(one_each) == 5
    all_or_nothing = [np.array([x] * 4) for x in (1, 0, 1, 1, 0)]   # item means vary as much as possible
    assert effective_items(all_or_nothing) == 5
    # Every item 2 of 4 right: the item means do not vary, so nothing says how alike items are -> item count.
    assert effective_items([np.array([1, 1, 0, 0])] * 5) == 5
    # Item means 0.5 and 0.75 alternating: p = 0.6, var(mean) = s^2 / n with s^2 = 0.01875 (n = 8), so
    # p(1-p)/var = 0.24 / (0.01875 / 8) = 102.4, capped at the 32 rollouts.
    assert effective_items([np.array([1, 1, 0, 0]), np.array([1, 1, 1, 0])] * 4) == 32


ACCURACIES = (0.0, 0.05, 0.5, 0.95, 1.0)


def test_coverage_at_the_boundaries_is_at_least_93_percent() -> None:
    """Simulated transfer checks, one rollout per item, 89 train and 28 held-out items (the dataset's
    halves), each item right with probability p_train / p_heldout, for every pair of the accuracies
    0, 5%, 50%, 95% and 100%: the 95% intervals of each half and of the gap must cover the truth in at
    least 93% of 4000 checks per pair. With one rollout per item the number right is binomial, so the
    simulation draws it directly and builds the intervals as `transfer_report` does (Wilson per half,
    Newcombe for the gap; the tests above check that `transfer_report` gives exactly these)."""
    rng = np.random.default_rng(2026)
    trials = 4000
    half_coverage, gap_coverage = {}, {}
    for n in (89, 28):
        for p in ACCURACIES:
            right = rng.binomial(n, p, size=trials)
            intervals = {k: wilson_interval(k / n, n) for k in set(right.tolist())}
            half_coverage[(n, p)] = np.mean([intervals[k].low <= p <= intervals[k].high for k in right.tolist()])
    for p_train in ACCURACIES:
        for p_heldout in ACCURACIES:
            truth, covered = 100 * (p_train - p_heldout), 0
            for k_train, k_heldout in zip(rng.binomial(89, p_train, trials).tolist(),
                                          rng.binomial(28, p_heldout, trials).tolist(), strict=True):
                a, b = k_train / 89, k_heldout / 28
                gap = mover_interval([(100.0, a, wilson_interval(a, 89), b, wilson_interval(b, 28))])
                covered += gap.low - 1e-9 <= truth <= gap.high + 1e-9
            gap_coverage[(p_train, p_heldout)] = covered / trials
    print("\nhalf coverage", {k: round(float(v), 3) for k, v in half_coverage.items()})
    print("gap coverage", {k: round(v, 3) for k, v in gap_coverage.items()})
    assert min(half_coverage.values()) >= 0.93, half_coverage
    assert min(gap_coverage.values()) >= 0.93, gap_coverage


def test_interval_coverage_with_several_rollouts_per_item() -> None:
    """60 items, 4 rollouts each, every rollout right with probability 0.7 (items alike), over 200
    simulated evaluations: the interval covers 0.7 at least 93% of the time, and the effective sample
    size lets it narrow to about the binomial width of all 240 rollouts (not the 60 items')."""
    rng = np.random.default_rng(12345)
    trials, covered, widths = 200, 0, []
    for _ in range(trials):
        outcomes = rng.random((60, 4)) < 0.7
        train = [ScoredRollout(f"i{i}", "numeric", float(x)) for i in range(60) for x in outcomes[i]]
        interval = transfer_report(train, [ScoredRollout("h", "numeric", 1.0)]).train_interval
        covered += interval.low <= 0.7 <= interval.high
        widths.append(interval.high - interval.low)
    binomial_width = 2 * 1.96 * (0.7 * 0.3 / 240) ** 0.5
    assert covered / trials >= 0.93
    assert 0.9 <= np.mean(widths) / binomial_width <= 1.15


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
