"""Run history: writing eval runs into the store, reading them back.

A run is written in two steps so that no process death can leave one marked complete: `start_run`
commits a row with status `running`; `finish_run` then writes every rollout and sets the final
status (`complete`, or `failed` when any rollout errored) in one transaction. A run that never
finishes stays `running` and is excluded from every history view.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from scaling_book.evaluation import RolloutOutcome
from scaling_book.store.models import EvalRun, RolloutResult


def _finite_unit(value: float) -> float:
    """Clamp a score into [0, 1]; NaN (which should never happen) becomes 0."""
    if value != value:  # NaN
        return 0.0
    return min(1.0, max(0.0, float(value)))


def start_run(
    factory: sessionmaker[Session], *, model: str, config: str, rollouts_per_item: int, sampling: dict[str, Any],
    dataset_hash: str, grader_version: str, checkpoint: str | None = None, step: int | None = None,
    rescored_from_run_id: int | None = None, transfer_check_id: int | None = None,
) -> int:
    """Commit a new run with status `running`; return its id."""
    with factory() as session, session.begin():
        run = EvalRun(
            model=model, checkpoint=checkpoint, step=step, config=config, rollouts_per_item=rollouts_per_item,
            sampling_json=json.dumps(sampling, sort_keys=True), dataset_hash=dataset_hash,
            grader_version=grader_version, status="running", started_at=datetime.now(UTC),
            rescored_from_run_id=rescored_from_run_id, transfer_check_id=transfer_check_id,
        )
        session.add(run)
        session.flush()
        return run.id


def finish_run(factory: sessionmaker[Session], run_id: int, rollouts: Iterable[RolloutOutcome],
               item_versions: dict[str, tuple[str, str]], error: str | None = None) -> str:
    """Write every rollout of run `run_id` and its final status in one transaction; return the status.

    The status is `failed` when `error` is given or any rollout has status `error`, else `complete`.
    `item_versions` maps item id -> (content hash, split) of the exported items the run answered;
    each rollout stores them, so runs over different item versions are never compared silently.
    Raises KeyError for a rollout of an item missing from `item_versions`, and the database's
    IntegrityError for a duplicate (item, rollout index); either way nothing is written and the run
    stays `running`.
    """
    rollouts = list(rollouts)
    with factory() as session, session.begin():
        run = session.get(EvalRun, run_id)
        for row in rollouts:
            content_hash, split = item_versions[row.item_id]
            session.add(RolloutResult(
                run_id=run_id, item_id=row.item_id, item_content_hash=content_hash,
                grader=row.grader, split=split, rollout_index=row.rollout_index,
                status=row.status, correctness=_finite_unit(row.correctness), format=_finite_unit(row.format),
                exact=1 if row.exact >= 1.0 else 0, reward=row.reward if row.reward == row.reward else 0.0,
                reason=row.reason, response=row.response, error=row.error,
            ))
        failed = error is not None or any(row.status != "ok" for row in rollouts) or not rollouts
        run.status = "failed" if failed else "complete"
        run.error = error if error is not None or not failed else failure_summary(rollouts)
        run.finished_at = datetime.now(UTC)
        return run.status


def failure_summary(rollouts: list[RolloutOutcome]) -> str:
    """'N of M rollouts errored; first: <error>': the cause a person needs to see first."""
    if not rollouts:
        return "no rollouts were run"
    errored = [r for r in rollouts if r.status != "ok"]
    first = next((r.error for r in errored if r.error), "no error text recorded")
    return f"{len(errored)} of {len(rollouts)} rollouts errored; first: {first}"


def mark_failed(factory: sessionmaker[Session], run_id: int, error: str) -> None:
    """Mark run `run_id` failed with `error`, writing no rollouts (the evaluation itself crashed)."""
    with factory() as session, session.begin():
        run = session.get(EvalRun, run_id)
        run.status = "failed"
        run.error = error
        run.finished_at = datetime.now(UTC)


# ----------------------------------------------------------------------------------------------
# Reading history back


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
            (r["matched_gap_ci_low"], r["matched_gap_ci_high"]),
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
    if high - low < 10:   # a flat gap: show +-5 points rather than float noise
        middle = (high + low) / 2
        bottom.set_ylim(middle - 5, middle + 5)
    bottom.set_ylabel("gap (points)")
    bottom.set_xlabel("training step" if all(r.step is not None for r in rows)
                      else "training step (checks without a step placed by their order)")
    bottom.legend(loc="best")
    figure.savefig(path, dpi=120)
    plt.close(figure)


def run_item_scores(factory: sessionmaker[Session], run_id: int) -> tuple[EvalRun, dict[str, list[float]], dict[str, str]]:
    """A run, its per-item `exact` outcomes, and the content hash of the item version each answered.

    Raises LookupError if the run does not exist.
    """
    with factory() as session:
        run = session.get(EvalRun, run_id)
        if run is None:
            raise LookupError(f"no eval run with id {run_id}")
        scores: dict[str, list[float]] = {}
        hashes: dict[str, str] = {}
        for rollout in session.scalars(select(RolloutResult).where(RolloutResult.run_id == run_id)):
            scores.setdefault(rollout.item_id, []).append(float(rollout.exact))
            hashes[rollout.item_id] = rollout.item_content_hash
        return run, scores, hashes


@dataclass
class RunComparison:
    """Paired comparison of two runs over the items both answered in the same version."""

    run_a: int
    run_b: int
    common_items: int
    gained: list[str]                 # wrong (mean exact < 0.5) in A, right in B
    lost: list[str]                   # right in A, wrong in B
    difference_points: float          # mean exact of B minus A, in points
    interval: tuple[float, float]
    changed_items: list[str]          # same id, different content hash: not compared
    only_in_a: list[str]
    only_in_b: list[str]


def compare_runs(factory: sessionmaker[Session], run_a: int, run_b: int, seed: int = 0) -> RunComparison:
    """Paired per-item comparison of runs `run_a` and `run_b`.

    Items whose content hash differs between the runs are listed in `changed_items` and left out,
    never compared silently. Raises LookupError for an unknown run, ValueError with no common item.
    """
    from scaling_book.transfer import paired_difference

    _, scores_a, hashes_a = run_item_scores(factory, run_a)
    _, scores_b, hashes_b = run_item_scores(factory, run_b)
    shared = set(scores_a) & set(scores_b)
    changed = sorted(i for i in shared if hashes_a[i] != hashes_b[i])
    common = sorted(shared - set(changed))
    a = {i: scores_a[i] for i in common}
    b = {i: scores_b[i] for i in common}
    difference, interval = paired_difference(a, b, seed=seed)

    def right(outcomes: list[float]) -> bool:
        return sum(outcomes) / len(outcomes) >= 0.5

    return RunComparison(
        run_a=run_a, run_b=run_b, common_items=len(common),
        gained=[i for i in common if not right(a[i]) and right(b[i])],
        lost=[i for i in common if right(a[i]) and not right(b[i])],
        difference_points=difference, interval=(interval.low, interval.high), changed_items=changed,
        only_in_a=sorted(set(scores_a) - shared), only_in_b=sorted(set(scores_b) - shared),
    )
