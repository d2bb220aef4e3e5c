"""The history plot: per model, train and held-out accuracy and one gap metric against training step.

One colour per model (legend), 95% intervals shaded. Checks without a training step cannot be placed
on a step axis: they are left out and named by `unplaced` (the CLI prints them). Several checks of one
model at one step are drawn as separate points, a little apart, each labelled with its check id.

Metrics for the lower panel live in `METRICS`; a new one (e.g. a memorisation gap) plugs in by adding
a `Metric` whose `value` and `interval` read it from a `CheckpointRow`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from scaling_book.runs.history import CheckpointRow


@dataclass(frozen=True)
class Metric:
    """A gap metric the history plot can draw: its name, axis label, and how to read it (in points)."""

    name: str
    label: str
    value: Callable[[CheckpointRow], float | None]
    interval: Callable[[CheckpointRow], tuple[float | None, float | None]]


METRICS: dict[str, Metric] = {
    metric.name: metric for metric in (
        Metric("gap", "gap, train - held-out (percentage points)", lambda r: r.gap_points, lambda r: r.gap_ci),
        Metric("matched-grader-gap", "matched-grader gap, train - reweighted held-out (percentage points)",
               lambda r: r.matched_gap_points, lambda r: r.matched_gap_ci),
        Metric("memorisation-gap", "memorisation gap, original - variant train accuracy (percentage points)",
               lambda r: r.memorisation_gap_points, lambda r: r.memorisation_gap_ci),
    )
}


def unplaced(rows: list[CheckpointRow]) -> list[CheckpointRow]:
    """The checks that have no training step (left out of the plot)."""
    return [r for r in rows if r.step is None]


def _positions(rows: list[CheckpointRow]) -> dict[int, float]:
    """x position of each check (by id): its step, spread apart where one model has several at a step."""
    steps = [r.step for r in rows]
    spread = 0.03 * ((max(steps) - min(steps)) or 1)
    by_model_step: dict[tuple[str, int], list[CheckpointRow]] = defaultdict(list)
    for row in rows:
        by_model_step[(row.model, row.step)].append(row)
    positions = {}
    for (_, step), group in by_model_step.items():
        for k, row in enumerate(sorted(group, key=lambda r: r.transfer_check_id)):
            positions[row.transfer_check_id] = step + (k - (len(group) - 1) / 2) * spread
    return positions


def history_figure(rows: list[CheckpointRow], metric: str = "gap"):
    """The matplotlib Figure of `rows` (checks without a step are left out).

    Raises KeyError for an unknown metric and ValueError when no check has a step.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = METRICS[metric]
    placed = [r for r in rows if r.step is not None]
    if not placed:
        raise ValueError("no completed transfer check has a training step to plot against "
                         "(run transfer-check with --step)")
    x_of = _positions(placed)
    crowded = {r.transfer_check_id for r in placed
               if sum(o.model == r.model and o.step == r.step for o in placed) > 1}
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 7), constrained_layout=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    models = sorted({r.model for r in placed})
    drawn = []
    for index, model in enumerate(models):
        colour = colours[index % len(colours)]
        mine = sorted((r for r in placed if r.model == model), key=lambda r: (r.step, r.transfer_check_id))
        xs = [x_of[r.transfer_check_id] for r in mine]
        for half, style, values, intervals in (
            ("train", "-", [r.train_accuracy for r in mine], [r.train_ci for r in mine]),
            ("held-out", "--", [r.heldout_accuracy for r in mine], [r.heldout_ci for r in mine]),
        ):
            top.plot(xs, [100 * v for v in values], linestyle=style, marker="o", color=colour,
                     label=f"{model}: {half}")
            top.fill_between(xs, [100 * lo for lo, _ in intervals], [100 * hi for _, hi in intervals],
                             alpha=0.15, color=colour)
        shown = [(x, r) for x, r in zip(xs, mine, strict=True) if chosen.value(r) is not None]
        if shown:
            drawn.append(model)
            bottom.plot([x for x, _ in shown], [chosen.value(r) for _, r in shown], marker="o", color=colour,
                        label=model)
            bottom.fill_between([x for x, _ in shown], [chosen.interval(r)[0] for _, r in shown],
                                [chosen.interval(r)[1] for _, r in shown], alpha=0.2, color=colour)
        for x, row in zip(xs, mine, strict=True):
            if row.transfer_check_id in crowded:
                for axis, y in ((top, 100 * row.heldout_accuracy), (bottom, chosen.value(row))):
                    if y is not None:
                        axis.annotate(f"#{row.transfer_check_id}", (x, y), textcoords="offset points",
                                      xytext=(0, 6), ha="center", fontsize=7, color=colour)
    top.set_ylabel("exact accuracy (%)")
    top.set_ylim(-2, 102)
    top.legend(loc="best", fontsize=8, title="model: half (shaded: 95% interval)", title_fontsize=8)
    top.set_title("Train (TPU chapters 1-8) vs held-out (GPU chapter 12) across checkpoints")
    bottom.axhline(0, color="grey", linewidth=0.8)
    low, high = bottom.get_ylim()
    if high - low < 10:   # a flat gap: show +-5 points rather than float noise
        middle = (high + low) / 2
        bottom.set_ylim(middle - 5, middle + 5)
    bottom.set_ylabel(chosen.label)
    bottom.set_xlabel("training step" + (" (#N: transfer check id, where several share a step)" if crowded else ""))
    if not drawn:
        bottom.text(0.5, 0.5, f"no check has a {chosen.name}", transform=bottom.transAxes, ha="center")
    else:
        bottom.legend(loc="best", fontsize=8, title="model (shaded: 95% interval)", title_fontsize=8)
    return figure


def plot_history(rows: list[CheckpointRow], path, metric: str = "gap") -> None:
    """Write `history_figure(rows, metric)` as a PNG to `path`. Raises as `history_figure`."""
    import matplotlib.pyplot as plt

    figure = history_figure(rows, metric)
    figure.savefig(path, dpi=120)
    plt.close(figure)
