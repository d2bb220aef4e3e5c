"""Reading run history back: completed transfer checks from the `transfer_gap` view, and their plot."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker


@dataclass(frozen=True)
class CheckpointRow:
    """One completed transfer check, as the `transfer_gap` view gives it (accuracies in [0, 1], gaps in points)."""

    transfer_check_id: int
    model: str
    checkpoint: str | None
    step: int | None
    train_accuracy: float
    train_ci: tuple[float, float]
    heldout_accuracy: float
    heldout_ci: tuple[float, float]
    gap_points: float
    gap_ci: tuple[float, float]
    matched_gap_points: float | None
    matched_gap_ci: tuple[float | None, float | None]
    memorisation_gap_points: float | None = None
    """Original minus variant train accuracy (points); None when the check ran no variants."""
    memorisation_gap_ci: tuple[float | None, float | None] = (None, None)


def transfer_history(factory: sessionmaker[Session], model: str | None = None) -> list[CheckpointRow]:
    """Completed transfer checks from the `transfer_gap` view, ordered by model, step, then id."""
    from sqlalchemy import text

    sql = "SELECT * FROM transfer_gap" + (" WHERE model = :model" if model else "") + \
          " ORDER BY model, step IS NULL, step, transfer_check_id"
    with factory() as session:
        rows = session.execute(text(sql), {"model": model} if model else {}).mappings().all()
    return [
        CheckpointRow(
            r["transfer_check_id"], r["model"], r["checkpoint"], r["step"], r["train_accuracy"],
            (r["train_ci_low"], r["train_ci_high"]), r["heldout_accuracy"], (r["heldout_ci_low"], r["heldout_ci_high"]),
            r["gap_points"], (r["gap_ci_low"], r["gap_ci_high"]), r["matched_gap_points"],
            (r["matched_gap_ci_low"], r["matched_gap_ci_high"]), r["memorisation_gap_points"],
            (r["memorisation_gap_ci_low"], r["memorisation_gap_ci_high"]),
        )
        for r in rows
    ]


def plot_history(rows: list[CheckpointRow], path) -> None:
    """Write a PNG: train and held-out accuracy (%) and the gap (points) against training step, with
    95% interval bands. Checks without a step are placed by their order. Raises ValueError with no rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows:
        raise ValueError("no completed transfer checks to plot")
    xs = [r.step if r.step is not None else i for i, r in enumerate(rows)]
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 6.5), constrained_layout=True)
    for label, values, intervals, colour in (
        ("train (TPU chapters 1-8)", [r.train_accuracy for r in rows], [r.train_ci for r in rows], "tab:blue"),
        ("held-out (GPU chapter 12)", [r.heldout_accuracy for r in rows], [r.heldout_ci for r in rows], "tab:orange"),
    ):
        top.plot(xs, [100 * v for v in values], marker="o", label=label, color=colour)
        top.fill_between(xs, [100 * lo for lo, _ in intervals], [100 * hi for _, hi in intervals], alpha=0.2,
                         color=colour)
    top.set_ylabel("exact accuracy (%)")
    top.set_ylim(-2, 102)
    top.legend(loc="best")
    top.set_title(f"Transfer across checkpoints: {rows[0].model}" if len({r.model for r in rows}) == 1
                  else "Transfer across checkpoints")
    bottom.plot(xs, [r.gap_points for r in rows], marker="o", color="tab:red", label="gap (train - held-out)")
    bottom.fill_between(xs, [r.gap_ci[0] for r in rows], [r.gap_ci[1] for r in rows], alpha=0.2, color="tab:red")
    matched = [(x, r) for x, r in zip(xs, rows, strict=True) if r.matched_gap_points is not None]
    if matched:
        bottom.plot([x for x, _ in matched], [r.matched_gap_points for _, r in matched], marker="s",
                    linestyle="--", color="tab:purple", label="matched-grader gap")
    bottom.axhline(0, color="grey", linewidth=0.8)
    low, high = bottom.get_ylim()
    memorised = [(x, r) for x, r in zip(xs, rows, strict=True) if r.memorisation_gap_points is not None]
    if memorised:
        bottom.plot([x for x, _ in memorised], [r.memorisation_gap_points for _, r in memorised], marker="^",
                    linestyle=":", color="tab:green", label="memorisation gap (original - variants)")
    if high - low < 10:   # a flat gap: show +-5 points rather than float noise
        middle = (high + low) / 2
        bottom.set_ylim(middle - 5, middle + 5)
    bottom.set_ylabel("gap (points)")
    bottom.set_xlabel("training step" if all(r.step is not None for r in rows)
                      else "training step (checks without a step placed by their order)")
    bottom.legend(loc="best")
    figure.savefig(path, dpi=120)
    plt.close(figure)


def list_runs(factory: sessionmaker[Session], model: str | None = None, limit: int = 20) -> list[tuple]:
    """Stored eval runs, newest first: `(EvalRun, rollouts stored, mean exact or None)` per run."""
    from sqlalchemy import func, select

    from scaling_book.store.models import EvalRun, RolloutResult

    query = (select(EvalRun, func.count(RolloutResult.id), func.avg(RolloutResult.exact))
             .outerjoin(RolloutResult, RolloutResult.run_id == EvalRun.id)
             .group_by(EvalRun.id).order_by(EvalRun.id.desc()).limit(limit))
    if model:
        query = query.where(EvalRun.model == model)
    with factory() as session:
        return [tuple(row) for row in session.execute(query).all()]
