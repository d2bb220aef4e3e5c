"""The history plot: one line per model, checks without a step left out and named, several checks at one
step drawn apart and labelled, labelled axes with units, shaded intervals, a choice of gap metric."""

from __future__ import annotations

import pytest
from matplotlib.collections import PolyCollection

from scaling_book.runs.history import CheckpointRow
from scaling_book.runs.plot import METRICS, history_figure, unplaced


def _row(check_id: int, model: str, step: int | None, gap: float, matched: float | None = None) -> CheckpointRow:
    heldout = 0.9 - gap / 100
    return CheckpointRow(check_id, model, f"ckpt-{step}", step, 0.9, (0.85, 0.95), heldout,
                         (heldout - 0.05, heldout + 0.05), gap, (gap - 4, gap + 4), matched,
                         (None, None) if matched is None else (matched - 5, matched + 5))


ROWS = [_row(1, "alpha", 100, 5.0, 3.0), _row(2, "alpha", 200, 10.0, 8.0), _row(3, "beta", 100, 20.0),
        _row(4, "beta", 200, 30.0), _row(5, "beta", 200, 34.0), _row(6, "beta", None, 40.0)]


def _model_lines(axis):
    return {line.get_label(): line for line in axis.get_lines() if not line.get_label().startswith("_")}


def test_one_gap_line_per_model_with_a_legend_and_shaded_intervals() -> None:
    figure = history_figure(ROWS)
    top, bottom = figure.axes
    lines = _model_lines(bottom)
    assert set(lines) == {"alpha", "beta"}
    assert list(lines["alpha"].get_ydata()) == [5.0, 10.0]
    assert [t.get_text() for t in bottom.get_legend().get_texts()] == ["alpha", "beta"]
    # Train and held-out per model above; a shaded band under every line.
    assert set(_model_lines(top)) == {"alpha: train", "alpha: held-out", "beta: train", "beta: held-out"}
    assert sum(isinstance(c, PolyCollection) for c in bottom.collections) == 2
    assert sum(isinstance(c, PolyCollection) for c in top.collections) == 4


def test_axes_are_labelled_with_units() -> None:
    top, bottom = history_figure(ROWS).axes
    assert top.get_ylabel() == "exact accuracy (%)"
    assert "percentage points" in bottom.get_ylabel()
    assert bottom.get_xlabel().startswith("training step")


def test_checks_without_a_step_are_left_out_and_named() -> None:
    assert [r.transfer_check_id for r in unplaced(ROWS)] == [6]
    beta = _model_lines(history_figure(ROWS).axes[1])["beta"]
    assert 40.0 not in list(beta.get_ydata())
    with pytest.raises(ValueError, match="--step"):
        history_figure([_row(7, "alpha", None, 1.0)])


def test_two_checks_at_one_step_are_separate_labelled_points() -> None:
    bottom = history_figure(ROWS).axes[1]
    beta = _model_lines(bottom)["beta"]
    xs = list(beta.get_xdata())
    assert list(beta.get_ydata()) == [20.0, 30.0, 34.0]
    assert xs[0] == 100 and xs[1] < 200 < xs[2]          # drawn apart, either side of the step
    labels = {a.get_text(): a.xy for a in bottom.texts}
    assert labels == {"#4": (xs[1], 30.0), "#5": (xs[2], 34.0)}   # only the crowded step is labelled


def test_matched_grader_metric_plots_where_present() -> None:
    bottom = history_figure(ROWS, "matched-grader-gap").axes[1]
    lines = _model_lines(bottom)
    assert set(lines) == {"alpha"} and list(lines["alpha"].get_ydata()) == [3.0, 8.0]
    assert "matched-grader gap" in bottom.get_ylabel()
    assert set(METRICS) >= {"gap", "matched-grader-gap"}


def _store_checks(session_factory, rows: list[CheckpointRow]) -> None:
    from datetime import UTC, datetime

    from scaling_book.store.tracking import TransferCheck

    with session_factory() as session, session.begin():
        for r in rows:
            session.add(TransferCheck(
                id=r.transfer_check_id, model=r.model, checkpoint=r.checkpoint, step=r.step,
                created_at=datetime.now(UTC), dataset_hash="d", sampling_json="{}", status="complete",
                train_accuracy=r.train_accuracy, train_ci_low=r.train_ci[0], train_ci_high=r.train_ci[1],
                heldout_accuracy=r.heldout_accuracy, heldout_ci_low=r.heldout_ci[0], heldout_ci_high=r.heldout_ci[1],
                gap_points=r.gap_points, gap_ci_low=r.gap_ci[0], gap_ci_high=r.gap_ci[1],
                matched_gap_points=r.matched_gap_points, matched_gap_ci_low=r.matched_gap_ci[0],
                matched_gap_ci_high=r.matched_gap_ci[1]))


def test_history_command_plots_two_models_and_names_what_it_left_out(db_url, session_factory, tmp_path) -> None:
    from typer.testing import CliRunner

    from scaling_book.cli import app

    _store_checks(session_factory, ROWS)
    plot = tmp_path / "history.png"
    runner = CliRunner(env={"COLUMNS": "240"})
    result = runner.invoke(app, ["history", "--plot", str(plot), "--metric", "matched-grader-gap", "--db", db_url])
    assert result.exit_code == 0, result.output
    assert "not plotted (1 checks without --step): transfer checks #6 (beta)" in result.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = runner.invoke(app, ["history", "--plot", str(plot), "--metric", "memorisation", "--db", db_url])
    assert result.exit_code == 2 and "unknown --metric 'memorisation'" in result.output
