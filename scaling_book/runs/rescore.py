"""Re-grading a stored run with the current graders, without calling the model.

After a grader fix, `rescore_run` reads every stored response of a run, grades it again against the
item as exported now, and stores the result as a new run that records the run it came from
(`rescored_from_run_id`) and the grader version that scored it. Rollouts whose item has changed since
the run (a different content hash) cannot be re-graded fairly: the rescore is refused and names them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from scaling_book.content.export import (
    load_hidden_tests,
    read_config_rows,
    with_hidden_tests,
)
from scaling_book.grading.rubric import format_reward, total_reward
from scaling_book.runs.recording import RolloutOutcome, finish_run, start_run
from scaling_book.runs.runner import dataset_hash_of
from scaling_book.store import make_engine, make_session_factory, upgrade_to_head
from scaling_book.store.tracking import EvalRun, RolloutResult


class RescoreError(Exception):
    """The run cannot be rescored: items changed since it ran."""


class UnknownRun(RescoreError):
    """There is no run with the given id."""


@dataclass
class RescoreResult:
    new_run_id: int
    source_run_id: int
    status: str
    grader_version: str
    rollouts: int
    changed_exact: int


def heldout_flag(rollout: RolloutResult) -> float:
    """1.0 for a rollout of a held-out item, else 0.0."""
    return 1.0 if rollout.split == "heldout" else 0.0


def rescore_run(run_id: int, export_dir: Path, db_url: str | None = None, code_timeout_s: float = 20.0,
                allow_code_execution: bool | str = True,
                on_progress: Callable[[int, int], None] | None = None) -> RescoreResult:
    """Re-grade run `run_id`'s stored responses into a new run; return what changed.

    Raises `RescoreError` for an unknown run or items whose content changed since the run,
    `MissingExport` when `export_dir` has no export of the run's config, and `StaleExport` when the
    export's rows do not match its manifest.
    """
    from scaling_book.grading import GRADER_VERSION, grade
    from scaling_book.grading.sandbox import isolation_label

    upgrade_to_head(db_url)
    engine = make_engine(db_url)
    factory = make_session_factory(engine)
    try:
        with factory() as session:
            source = session.get(EvalRun, run_id)
            if source is None:
                raise UnknownRun(f"no eval run with id {run_id}")
            rollouts = list(session.scalars(
                select(RolloutResult).where(RolloutResult.run_id == run_id).order_by(RolloutResult.id)))
        digest = dataset_hash_of(export_dir, source.config)   # raises MissingExport before any row is read
        hidden = load_hidden_tests(export_dir)
        infos = {row["id"]: with_hidden_tests(row["info"], hidden)
                 for row in read_config_rows(export_dir, source.config, ["id", "info"])}
        changed = sorted({r.item_id for r in rollouts
                          if r.item_id not in infos or infos[r.item_id]["content_hash"] != r.item_content_hash})
        if changed:
            raise RescoreError(f"run {run_id} answered items that have changed or are gone since: "
                               f"{', '.join(changed)}; rescoring them against new content would be wrong")
        new_run_id = start_run(
            factory, model=source.model, config=source.config, rollouts_per_item=source.rollouts_per_item,
            sampling={"rescored_from_run_id": run_id}, dataset_hash=digest,
            grader_version=GRADER_VERSION, checkpoint=source.checkpoint, step=source.step,
            rescored_from_run_id=run_id, isolation=isolation_label(allow_code_execution),
        )
        rows, flips = [], 0
        for done, old in enumerate(rollouts, start=1):
            if old.status == "truncated":   # cut at the token limit: never graded, whatever the graders
                rows.append(RolloutOutcome(old.item_id, old.rollout_index, "truncated", old.response, 0.0, 0.0, 0.0,
                                           heldout_flag(old), 0.0, old.reason, None, old.grader, old.finish_reason,
                                           old.reasoning, old.reasoning_chars))
            elif old.status != "ok" or old.response is None:
                rows.append(RolloutOutcome(old.item_id, old.rollout_index, "error", old.response, 0.0, 0.0, 0.0,
                                           heldout_flag(old), 0.0, "not rescored: the original rollout errored",
                                           old.error, old.grader))
            else:
                result = grade(infos[old.item_id], old.response, allow_code_execution=allow_code_execution,
                               code_timeout_s=code_timeout_s)
                exact = 1.0 if result.exact else 0.0
                flips += exact != old.exact
                rows.append(RolloutOutcome(old.item_id, old.rollout_index, "ok", old.response, result.correctness,
                                           format_reward(result), exact, heldout_flag(old), total_reward(result),
                                           result.reason, None, old.grader, old.finish_reason, old.reasoning,
                                           old.reasoning_chars))
            if on_progress:
                on_progress(done, len(rollouts))
        versions = {item_id: (info["content_hash"], info["split"]) for item_id, info in infos.items()}
        status = finish_run(factory, new_run_id, rows, versions)
        return RescoreResult(new_run_id, run_id, status, GRADER_VERSION, len(rows), flips)
    finally:
        engine.dispose()
