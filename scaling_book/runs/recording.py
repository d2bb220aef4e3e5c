"""Recording eval runs in the store: the per-rollout record and the run's two-step write.

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

from sqlalchemy.orm import Session, sessionmaker

from scaling_book.store.models import EvalRun, RolloutResult


@dataclass
class RolloutOutcome:
    """One rollout of one item. Rewards and `exact` are 0.0 when status is "error";
    `heldout_flag` is the item's, whatever the status."""

    item_id: str
    rollout_index: int
    """0-based index among this item's rollouts."""
    status: str
    """"ok" or "error"."""
    response: str | None
    """The model's reply text; None when the rollout failed before one arrived."""
    correctness: float
    format: float
    exact: float
    heldout_flag: float
    reward: float
    """Weighted sum of the rewards: 1.0 * correctness + 0.2 * format."""
    reason: str
    """The grader's reason (what it extracted and why it scored so); "" for a failed rollout."""
    error: str | None
    """What failed, for status "error": the error type and message verifiers recorded."""
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


def finish_run(factory: sessionmaker[Session], run_id: int, rollouts: Iterable[RolloutOutcome],
               item_versions: dict[str, tuple], error: str | None = None) -> str:
    """Write every rollout of run `run_id` and its final status in one transaction; return the status.

    The status is `failed` when `error` is given or any rollout has status `error`, else `complete`.
    `item_versions` maps item id -> (content hash, split[, parent id, variant seed, drawn inputs JSON]) of
    the exported items the run answered (`runner.item_versions`);
    each rollout stores them, so runs over different item versions are never compared silently.
    Raises KeyError for a rollout of an item missing from `item_versions`, and the database's
    IntegrityError for a duplicate (item, rollout index); either way nothing is written and the run
    stays `running`.
    """
    rollouts = list(rollouts)
    with factory() as session, session.begin():
        run = session.get(EvalRun, run_id)
        for row in rollouts:
            content_hash, split, *variant = item_versions[row.item_id]
            parent, seed, inputs = (variant + [None, None, None])[:3]
            session.add(RolloutResult(
                run_id=run_id, item_id=row.item_id, item_content_hash=content_hash,
                grader=row.grader, split=split, rollout_index=row.rollout_index,
                status=row.status, correctness=_finite_unit(row.correctness), format=_finite_unit(row.format),
                exact=1 if row.exact >= 1.0 else 0, reward=row.reward if row.reward == row.reward else 0.0,
                reason=row.reason, response=row.response, error=row.error,
                parent_item_id=parent, variant_seed=seed, variant_inputs_json=inputs,
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
