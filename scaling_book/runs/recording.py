"""Recording eval runs in the store: the per-rollout record, the run's writes and its liveness.

No process death can leave a run marked complete: `start_run` commits a row with status `running`
(with the host and pid running it and a heartbeat); `record_rollouts` stores finished rollouts as
they come (refreshing the heartbeat), and `close_run` sets the final status from what is stored:
`complete` only when every planned (item, rollout) pair is stored and none errored, `interrupted`
when a signal stopped the run (`scaling-book resume` completes it), else `failed`. `finish_run` writes
a whole run at once (rescore). A run that never finishes stays `running`; `is_stale` tells a dead one
from a live one. Only complete runs appear in the history views. A complete run's per-item
aggregates (`run_item_aggregates`: mean exact, mean correctness, rollouts, truncated) are written
once, in the transaction that completes it; the history views read them rather than every rollout.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import case, func, insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from scaling_book.store.tracking import EvalRun, RolloutResult, RunItemAggregate


@dataclass
class RolloutOutcome:
    """One rollout of one item. Rewards and `exact` are 0.0 when status is "error";
    `heldout_flag` is the item's, whatever the status."""

    item_id: str
    rollout_index: int
    """0-based index among this item's rollouts."""
    status: str
    """"ok", "error", or "truncated" (cut at the token limit; scored 0)."""
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
    finish_reason: str | None = None
    """Why the model stopped (`stop`, `length`, ...); None when no reply arrived."""
    reasoning: str | None = None
    """The reasoning, never graded, capped at `REASONING_STORED_CHARS`."""
    reasoning_chars: int | None = None
    """Full length of the reasoning before the cap."""


HEARTBEAT_S = 30.0
"""Seconds between heartbeats of a running run."""


def _finite_unit(value: float) -> float:
    """Clamp a score into [0, 1]; NaN (which should never happen) becomes 0."""
    if value != value:  # NaN
        return 0.0
    return min(1.0, max(0.0, float(value)))


def start_run(
    factory: sessionmaker[Session], *, model: str, config: str, rollouts_per_item: int, sampling: dict[str, Any],
    dataset_hash: str, grader_version: str, checkpoint: str | None = None, step: int | None = None,
    rescored_from_run_id: int | None = None, transfer_check_id: int | None = None,
    base_url: str | None = None, api_key_var: str | None = None, item_limit: int | None = None,
    isolation: str | None = None,
) -> int:
    """Commit a new run with status `running`, this process's host and pid, and a heartbeat; return its id.
    `isolation`: how code submissions ran (`scaling_book.grading.sandbox.isolation_label`)."""
    now = datetime.now(UTC)
    with factory() as session, session.begin():
        run = EvalRun(
            model=model, checkpoint=checkpoint, step=step, config=config, rollouts_per_item=rollouts_per_item,
            sampling_json=json.dumps(sampling, sort_keys=True), dataset_hash=dataset_hash,
            grader_version=grader_version, status="running", started_at=now,
            rescored_from_run_id=rescored_from_run_id, transfer_check_id=transfer_check_id,
            base_url=base_url, api_key_var=api_key_var, item_limit=item_limit, isolation=isolation,
            host=socket.gethostname(), pid=os.getpid(), heartbeat_at=now,
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
        _add_rollouts(session, run_id, rollouts, item_versions)
        failed = error is not None or any(row.status == "error" for row in rollouts) or not rollouts
        run.status = "failed" if failed else "complete"
        run.error = error if error is not None or not failed else failure_summary(rollouts)
        run.finished_at = datetime.now(UTC)
        if run.status == "complete":
            session.flush()
            _write_aggregates(session, run_id)
        return run.status


def _write_aggregates(session: Session, run_id: int) -> None:
    """Insert run `run_id`'s per-item aggregates, computed from its stored rollouts."""
    x = RolloutResult
    per_item = (
        select(x.run_id, x.item_id, func.min(x.item_content_hash), func.min(x.grader), func.min(x.split),
               func.avg(x.exact), func.avg(x.correctness), func.count(),
               func.sum(case((x.status == "truncated", 1), else_=0)))
        .where(x.run_id == run_id)
        .group_by(x.run_id, x.item_id)
    )
    columns = ["run_id", "item_id", "item_content_hash", "grader", "split", "mean_exact", "mean_correctness",
               "rollouts", "truncated"]
    session.execute(insert(RunItemAggregate).from_select(columns, per_item))


def _add_rollouts(session: Session, run_id: int, rollouts: list[RolloutOutcome],
                  item_versions: dict[str, tuple]) -> None:
    """Add `rollouts` of run `run_id`, in order, in one table-level INSERT (no ORM objects: this
    runs once per finished rollout). `item_versions[item id]` is (content hash, split) or, for a
    counterfactual variant, (content hash, split, parent item id, variant seed, drawn inputs JSON).
    Raises KeyError, before writing anything, for an item missing from `item_versions`."""
    values = []
    for row in rollouts:
        content_hash, split, *variant = item_versions[row.item_id]
        parent, seed, inputs = (variant + [None, None, None])[:3]
        values.append(dict(
            run_id=run_id, item_id=row.item_id, item_content_hash=content_hash,
            grader=row.grader, split=split, rollout_index=row.rollout_index,
            status=row.status, correctness=_finite_unit(row.correctness), format=_finite_unit(row.format),
            exact=1 if row.exact >= 1.0 else 0, reward=row.reward if row.reward == row.reward else 0.0,
            reason=row.reason, response=row.response, error=row.error, finish_reason=row.finish_reason,
            reasoning=row.reasoning, reasoning_chars=row.reasoning_chars,
            parent_item_id=parent, variant_seed=seed, variant_inputs_json=inputs,
        ))
    if values:
        session.execute(insert(RolloutResult.__table__), values)


def _touch(session: Session, run_id: int) -> None:
    """Refresh the heartbeat of run `run_id` with one UPDATE (the run row is not loaded)."""
    runs = EvalRun.__table__
    session.execute(update(runs).where(runs.c.id == run_id).values(heartbeat_at=datetime.now(UTC)))


def record_rollouts(factory: sessionmaker[Session], run_id: int, rollouts: Iterable[RolloutOutcome],
                    item_versions: dict[str, tuple[str, str]]) -> None:
    """Store finished rollouts of running run `run_id` and refresh its heartbeat, in one transaction.
    Raises KeyError for an item missing from `item_versions` and IntegrityError for an (item, rollout
    index) already stored (nothing is written then)."""
    with factory() as session, session.begin():
        _add_rollouts(session, run_id, list(rollouts), item_versions)
        _touch(session, run_id)


def heartbeat(factory: sessionmaker[Session], run_id: int) -> None:
    """Refresh the heartbeat of running run `run_id`."""
    with factory() as session, session.begin():
        _touch(session, run_id)


def stored_outcomes(factory: sessionmaker[Session], run_id: int) -> list[RolloutOutcome]:
    """Every stored rollout of run `run_id`, in storage order."""
    from sqlalchemy import select

    with factory() as session:
        rows = session.scalars(select(RolloutResult).where(RolloutResult.run_id == run_id).order_by(RolloutResult.id))
        return [RolloutOutcome(r.item_id, r.rollout_index, r.status, r.response, r.correctness, r.format,
                               float(r.exact), 1.0 if r.split == "heldout" else 0.0, r.reward, r.reason, r.error,
                               r.grader, r.finish_reason, r.reasoning, r.reasoning_chars) for r in rows]


def close_run(factory: sessionmaker[Session], run_id: int, planned: int, *, interrupted: bool = False,
              error: str | None = None) -> tuple[str, str | None]:
    """Set the final status of run `run_id` from its stored rollouts; return (status, error).

    `planned` is the number of (item, rollout) pairs the run covers. `interrupted`: a signal stopped
    it (status `interrupted`, resumable). Else `failed` when `error` is given, a stored rollout errored,
    or fewer than `planned` rollouts are stored; `complete` otherwise.
    """
    rows = stored_outcomes(factory, run_id)
    if interrupted:
        status, message = "interrupted", f"interrupted with {len(rows)} of {planned} rollouts stored"
    elif error is not None:
        status, message = "failed", error
    elif any(r.status == "error" for r in rows):
        status, message = "failed", failure_summary(rows)
    elif len(rows) != planned:
        status, message = "failed", f"{len(rows)} of {planned} rollouts stored"
    else:
        status, message = "complete", None
    with factory() as session, session.begin():
        run = session.get(EvalRun, run_id)
        run.status, run.error = status, message
        run.finished_at = datetime.now(UTC)
        if status == "complete":
            _write_aggregates(session, run_id)
    return status, message


def is_stale(run: EvalRun, stale_after_s: float = 300.0, now: datetime | None = None) -> bool:
    """Whether `running` run `run` has no live process behind it. On the host that ran it: its pid is
    gone. Elsewhere (or without a pid): its heartbeat, refreshed at least every `HEARTBEAT_S` seconds
    while it runs, is older than `stale_after_s` seconds."""
    if run.status != "running":
        return False
    if run.host == socket.gethostname() and run.pid is not None:
        try:
            os.kill(run.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False   # a live process of another user
        return False
    beat = run.heartbeat_at or run.started_at
    if beat.tzinfo is None:
        beat = beat.replace(tzinfo=UTC)
    return ((now or datetime.now(UTC)) - beat).total_seconds() > stale_after_s


def failure_summary(rollouts: list[RolloutOutcome]) -> str:
    """'N of M rollouts errored; first: <error>': the cause a person needs to see first."""
    if not rollouts:
        return "no rollouts were run"
    errored = [r for r in rollouts if r.status == "error"]
    first = next((r.error for r in errored if r.error), "no error text recorded")
    return f"{len(errored)} of {len(rollouts)} rollouts errored; first: {first}"


def mark_failed(factory: sessionmaker[Session], run_id: int, error: str) -> None:
    """Mark run `run_id` failed with `error`, writing no rollouts (the evaluation itself crashed)."""
    with factory() as session, session.begin():
        run = session.get(EvalRun, run_id)
        run.status = "failed"
        run.error = error
        run.finished_at = datetime.now(UTC)
