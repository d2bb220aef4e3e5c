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

from scaling_book.store.models import EvalRun, Item, RolloutResult


@dataclass(frozen=True)
class RolloutRow:
    """One rollout as stored: what the history tables need of an evaluation's outcome."""

    item_id: str
    rollout_index: int
    status: str
    response: str | None
    correctness: float
    format: float
    exact: float
    reward: float
    reason: str
    error: str | None
    grader: str


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


def finish_run(factory: sessionmaker[Session], run_id: int, rollouts: Iterable[RolloutRow],
               error: str | None = None) -> str:
    """Write every rollout of run `run_id` and its final status in one transaction; return the status.

    The status is `failed` when `error` is given or any rollout has status `error`, else `complete`.
    Each rollout carries the content hash of the item version it answered.
    """
    rollouts = list(rollouts)
    with factory() as session, session.begin():
        run = session.get(EvalRun, run_id)
        items = {item.id: item for item in session.scalars(select(Item))}
        for row in rollouts:
            item = items.get(row.item_id)
            session.add(RolloutResult(
                run_id=run_id, item_id=row.item_id, item_content_hash=item.content_hash if item else "",
                grader=row.grader, split=item.split if item else "", rollout_index=row.rollout_index,
                status=row.status, correctness=_finite_unit(row.correctness), format=_finite_unit(row.format),
                exact=1 if row.exact >= 1.0 else 0, reward=row.reward if row.reward == row.reward else 0.0,
                reason=row.reason, response=row.response, error=row.error,
            ))
        failed = error is not None or any(row.status != "ok" for row in rollouts) or not rollouts
        run.status = "failed" if failed else "complete"
        run.error = error or (
            None if not failed else
            f"{sum(r.status != 'ok' for r in rollouts)} of {len(rollouts)} rollouts errored" if rollouts else "no rollouts"
        )
        run.finished_at = datetime.now(UTC)
        return run.status


def mark_failed(factory: sessionmaker[Session], run_id: int, error: str) -> None:
    """Mark run `run_id` failed with `error`, writing no rollouts (the evaluation itself crashed)."""
    with factory() as session, session.begin():
        run = session.get(EvalRun, run_id)
        run.status = "failed"
        run.error = error
        run.finished_at = datetime.now(UTC)
