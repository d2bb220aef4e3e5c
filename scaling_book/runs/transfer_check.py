"""The transfer check: evaluate one model checkpoint on `train` and on `heldout`, store both runs
under one transfer-check record, and compute the report of `scaling_book.runs.gap_statistics`.

The record is committed as `running` first; it becomes `complete` (with every figure of the report
and the truncated rollouts of each half) only when both runs completed, `interrupted` when a signal
stopped a half (resume it with `resume_check_id`: complete halves are kept, the interrupted one
resumes, a missing one starts; the variant half of a `--variants K` check too, with the K stored on
the check), and `failed` otherwise. History views show complete checks only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from rich.console import Console
from sqlalchemy import select

from scaling_book.runs.gap_statistics import (
    MemorisationGap,
    ScoredRollout,
    TransferReport,
    memorisation_gap,
    transfer_report,
)
from scaling_book.runs.recording import stored_outcomes
from scaling_book.runs.runner import (
    EvalRequest,
    EvalSummary,
    MissingExport,
    dataset_hash_of,
    run_and_record,
)
from scaling_book.store import make_engine, make_session_factory, upgrade_to_head
from scaling_book.store.tracking import EvalRun, RolloutResult, TransferCheck

HALVES = ("train", "heldout")
VARIANT_HALF = "train_variants"


@dataclass
class TransferCheckResult:
    """The stored transfer check: its id, status, both runs and (when complete) the report."""

    transfer_check_id: int
    status: str
    runs: dict[str, EvalSummary]
    report: TransferReport | None
    error: str | None
    memorisation: MemorisationGap | None = None


def scored_rollouts(factory, run_id: int) -> list[ScoredRollout]:
    """Every rollout of run `run_id` as (item, grader, exact)."""
    with factory() as session:
        rows = session.scalars(select(RolloutResult).where(RolloutResult.run_id == run_id))
        return [ScoredRollout(r.item_id, r.grader, float(r.exact)) for r in rows]


def _set_status(factory, check_id: int, status: str, error: str | None) -> None:
    with factory() as session, session.begin():
        check = session.get(TransferCheck, check_id)
        check.status, check.error = status, error


def outcomes_by(factory, run_id: int, key: str) -> dict[str, list[float]]:
    """{item id (key="item") or parent item id (key="parent"): [exact of each rollout]} of run `run_id`."""
    out: dict[str, list[float]] = {}
    with factory() as session:
        for r in session.scalars(select(RolloutResult).where(RolloutResult.run_id == run_id)):
            out.setdefault(r.item_id if key == "item" else r.parent_item_id, []).append(float(r.exact))
    return out


def check_runs(factory, check_id: int) -> dict[str, EvalRun]:
    """The newest run of each half of transfer check `check_id`."""
    with factory() as session:
        runs = session.scalars(select(EvalRun).where(EvalRun.transfer_check_id == check_id).order_by(EvalRun.id))
        return {run.config: run for run in runs}


def _combined_hashes(request: EvalRequest, ks: range) -> dict[int, str]:
    """{K: the check's dataset hash} for each K in `ks`: both halves' exports, and for K > 0 the variant
    export and K. Raises `MissingExport`."""
    combined = "\n".join(dataset_hash_of(request.export_dir, half) for half in HALVES)
    variant_hash = dataset_hash_of(request.export_dir, VARIANT_HALF) if any(ks) else ""
    return {k: hashlib.sha256((combined + (f"\n{variant_hash}:{k}" if k else "")).encode()).hexdigest() for k in ks}


def _combined_hash(request: EvalRequest, variants: int) -> str:
    return _combined_hashes(request, range(variants, variants + 1))[variants]


def started_variants(check: TransferCheck, request: EvalRequest, most: int = 100) -> int:
    """The K (`--variants`) transfer check `check` was started with: stored on it since it is created; for a check created before
    that, the K (up to `most`) whose combined hash is the check's; 0 when none is."""
    if check.variants_per_item:
        return check.variants_per_item
    try:
        by_k = _combined_hashes(request, range(1, most + 1))
    except MissingExport:
        return 0
    return next((k for k, digest in by_k.items() if digest == check.dataset_hash), 0)


def run_transfer_check(request: EvalRequest, db_url: str | None = None,
                       console: Console | None = None, resume_check_id: int | None = None,
                       variants: int = 0) -> TransferCheckResult:
    """Evaluate `request` (its `config` is ignored) on train and heldout and store the transfer check;
    with `resume_check_id`, finish that interrupted check instead (same request, as stored; every half
    it had, the variant half with the K it was started with: `variants` 0 reads it from the check).
    With `variants` = K > 0, also evaluate the first K exported variants of every parametric train
    item (config `train_variants`) and store the memorisation gap: original minus variant accuracy
    over those items, with a paired interval.

    Raises `MissingExport` when there is no export, and `ResumeRefused` when the check to resume is not
    interrupted or its export changed; never raises on a failed rollout (the check is stored as failed).
    """
    from scaling_book.runs.resume import ResumeRefused

    combined_hash = _combined_hash(request, variants)
    upgrade_to_head(db_url)
    engine = make_engine(db_url)
    factory = make_session_factory(engine)
    try:
        existing: dict[str, EvalRun] = {}
        if resume_check_id is None:
            with factory() as session, session.begin():
                check = TransferCheck(
                    model=request.model, checkpoint=request.checkpoint, step=request.step,
                    created_at=datetime.now(UTC), dataset_hash=combined_hash,
                    sampling_json=json.dumps({"rollouts_per_item": request.rollouts_per_item,
                                              "max_concurrent": request.max_concurrent,
                                              **request.stored_sampling()}, sort_keys=True),
                    status="running", variants_per_item=variants or None,
                )
                session.add(check)
                session.flush()
                check_id = check.id
        else:
            check_id = resume_check_id
            with factory() as session:
                check = session.get(TransferCheck, check_id)
                if check is None or check.status not in ("interrupted", "running"):
                    raise ResumeRefused(f"transfer check {check_id} is "
                                        f"{'unknown' if check is None else check.status}; nothing to resume")
                variants = variants or started_variants(check, request)
                combined_hash = _combined_hash(request, variants)
                if check.dataset_hash != combined_hash:
                    raise ResumeRefused(f"the export changed since transfer check {check_id} started")
            existing = check_runs(factory, check_id)
            _set_status(factory, check_id, "running", None)
        runs: dict[str, EvalSummary] = {}
        halves = {half: replace(request, config=half) for half in HALVES}
        if variants:
            halves[VARIANT_HALF] = replace(request, config=VARIANT_HALF,
                                           taskset_options={**request.taskset_options, "variants_per_item": variants})
        try:
            for half, half_request in halves.items():
                previous = existing.get(half)
                if previous is not None and previous.status == "complete":
                    rows = stored_outcomes(factory, previous.id)
                    runs[half] = EvalSummary(previous.id, "complete", None, len(rows), 0.0, rows, len(rows))
                    continue
                runs[half] = run_and_record(half_request, db_url=db_url, console=console, transfer_check_id=check_id,
                                            resume_run_id=None if previous is None else previous.id)
                if runs[half].status != "complete":
                    break   # the check has failed or stopped: do not spend the other halves' rollouts
        except KeyboardInterrupt:
            _set_status(factory, check_id, "interrupted", "interrupted")
            raise
        except BaseException as exc:   # crashed: never leave the check `running`
            _set_status(factory, check_id, "failed", f"{type(exc).__name__}: {exc}")
            raise
        stopped = [half for half, run in runs.items() if run.status == "interrupted"]
        if stopped:
            error = f"{stopped[0]} run {runs[stopped[0]].run_id} interrupted"
            _set_status(factory, check_id, "interrupted", error)
            return TransferCheckResult(check_id, "interrupted", runs, None, error)
        failed = [half for half, run in runs.items() if run.status != "complete"]
        with factory() as session, session.begin():
            check = session.get(TransferCheck, check_id)
            if failed:
                check.status = "failed"
                check.error = "; ".join(f"{half} run {runs[half].run_id}: {runs[half].error}" for half in failed)
                return TransferCheckResult(check_id, "failed", runs, None, check.error)
            report = transfer_report(scored_rollouts(factory, runs["train"].run_id),
                                     scored_rollouts(factory, runs["heldout"].run_id))
            check.train_accuracy, check.heldout_accuracy = report.train_accuracy, report.heldout_accuracy
            check.train_ci_low, check.train_ci_high = report.train_interval.low, report.train_interval.high
            check.heldout_ci_low, check.heldout_ci_high = report.heldout_interval.low, report.heldout_interval.high
            check.gap_points = report.gap_points
            check.gap_ci_low, check.gap_ci_high = report.gap_interval.low, report.gap_interval.high
            check.matched_gap_points = report.matched_gap_points
            if report.matched_gap_interval is not None:
                check.matched_gap_ci_low = report.matched_gap_interval.low
                check.matched_gap_ci_high = report.matched_gap_interval.high
            check.train_truncated, check.heldout_truncated = runs["train"].truncated, runs["heldout"].truncated
            memorisation = None
            if variants:
                memorisation = memorisation_gap(outcomes_by(factory, runs["train"].run_id, "item"),
                                                outcomes_by(factory, runs[VARIANT_HALF].run_id, "parent"),
                                                variants)
                check.variants_per_item = variants
                check.variant_train_accuracy = memorisation.variant_accuracy
                check.memorisation_gap_points = memorisation.gap_points
                check.memorisation_gap_ci_low = memorisation.interval.low
                check.memorisation_gap_ci_high = memorisation.interval.high
            check.status, check.error = "complete", None
            return TransferCheckResult(check_id, "complete", runs, report, None, memorisation)
    finally:
        engine.dispose()
