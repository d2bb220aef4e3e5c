"""Reading run history back: completed transfer checks from the `transfer_gap` view (plotted by runs/plot.py)."""

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
    isolation: str = "unknown"
    """How the check's code submissions ran (its runs' `isolation`; "unknown" for runs before it was
    recorded; both labels, joined by " / ", when the two halves differ)."""
    train_truncated: int | None = None
    """Rollouts of the train half cut at the token limit (scored 0); None for checks stored before 0004."""
    heldout_truncated: int | None = None
    """Rollouts of the held-out half cut at the token limit."""
    memorisation_gap_points: float | None = None
    """Original minus variant train accuracy (points); None when the check ran no variants."""
    memorisation_gap_ci: tuple[float | None, float | None] = (None, None)


def transfer_history(factory: sessionmaker[Session], model: str | None = None) -> list[CheckpointRow]:
    """Completed transfer checks from the `transfer_gap` view, ordered by model, step, then id."""
    from sqlalchemy import text

    sql = ("SELECT g.*, t.train_truncated, t.heldout_truncated FROM transfer_gap AS g "
           "JOIN transfer_checks AS t ON t.id = g.transfer_check_id"
           + (" WHERE g.model = :model" if model else "")
           + " ORDER BY g.model, g.step IS NULL, g.step, g.transfer_check_id")
    with factory() as session:
        rows = session.execute(text(sql), {"model": model} if model else {}).mappings().all()
        isolation: dict[int, set[str]] = {}
        # a check's runs are its model's (ix_eval_runs_model_step): the query stays the model's size
        for check_id, label in session.execute(text(
                "SELECT transfer_check_id, isolation FROM eval_runs WHERE transfer_check_id IS NOT NULL"
                + (" AND model = :model" if model else "")), {"model": model} if model else {}):
            isolation.setdefault(check_id, set()).add(label or "unknown")
    return [
        CheckpointRow(
            r["transfer_check_id"], r["model"], r["checkpoint"], r["step"], r["train_accuracy"],
            (r["train_ci_low"], r["train_ci_high"]), r["heldout_accuracy"], (r["heldout_ci_low"], r["heldout_ci_high"]),
            r["gap_points"], (r["gap_ci_low"], r["gap_ci_high"]), r["matched_gap_points"],
            (r["matched_gap_ci_low"], r["matched_gap_ci_high"]),
            " / ".join(sorted(isolation.get(r["transfer_check_id"], {"unknown"}))),
            r["train_truncated"], r["heldout_truncated"],
            r["memorisation_gap_points"], (r["memorisation_gap_ci_low"], r["memorisation_gap_ci_high"]),
        )
        for r in rows
    ]


def list_runs(factory: sessionmaker[Session], model: str | None = None, limit: int = 20) -> list[tuple]:
    """Stored eval runs, newest first: `(EvalRun, rollouts stored, mean exact or None, truncated, stale)`
    per run; `stale` is True for a `running` run with no live process behind it."""
    from sqlalchemy import case, func, select

    from scaling_book.runs.recording import is_stale
    from scaling_book.store.tracking import EvalRun, RolloutResult

    truncated = func.coalesce(func.sum(case((RolloutResult.status == "truncated", 1), else_=0)), 0)
    query = (select(EvalRun, func.count(RolloutResult.id), func.avg(RolloutResult.exact), truncated)
             .outerjoin(RolloutResult, RolloutResult.run_id == EvalRun.id)
             .group_by(EvalRun.id).order_by(EvalRun.id.desc()).limit(limit))
    if model:
        query = query.where(EvalRun.model == model)
    with factory() as session:
        return [(*tuple(row), is_stale(row[0])) for row in session.execute(query).all()]


def prune_stale_runs(factory: sessionmaker[Session]) -> list[int]:
    """Mark every stale `running` run failed (and its running transfer check); return their ids."""
    from datetime import UTC, datetime

    from sqlalchemy import select

    from scaling_book.runs.recording import is_stale
    from scaling_book.store.tracking import EvalRun, TransferCheck

    pruned = []
    with factory() as session, session.begin():
        for run in session.scalars(select(EvalRun).where(EvalRun.status == "running")):
            if is_stale(run):
                run.status, run.finished_at = "failed", datetime.now(UTC)
                run.error = f"stale: its process (pid {run.pid} on {run.host}) is gone; pruned"
                pruned.append(run.id)
                check = session.get(TransferCheck, run.transfer_check_id) if run.transfer_check_id else None
                if check is not None and check.status == "running":
                    check.status, check.error = "failed", f"run {run.id} pruned as stale"
    return pruned
