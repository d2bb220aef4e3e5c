"""SQLAlchemy 2 models of the run history: transfer checks, eval runs, rollouts and per-item aggregates.

A run's `status` is `complete` only once every (item, rollout) is stored; constraints keep statuses,
scores and counts in their ranges so no code path can store a half-written or impossible run.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from scaling_book.store.models import (
    ROLLOUT_STATUSES,
    RUN_STATUSES,
    Base,
    _in,
)


class TransferCheck(Base):
    """One transfer check: a train run and a held-out run of the same model checkpoint."""

    __tablename__ = "transfer_checks"
    __table_args__ = (
        CheckConstraint(_in("status", RUN_STATUSES), name="status_known"),
        Index("ix_transfer_checks_model_step", "model", "step"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model: Mapped[str] = mapped_column(String(200))
    checkpoint: Mapped[str | None] = mapped_column(String(200))
    step: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    dataset_hash: Mapped[str] = mapped_column(String(64))
    sampling_json: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(12))
    # Seed of the bootstrap intervals of checks made before revision 0005; NULL since (score intervals).
    seed: Mapped[int | None] = mapped_column(Integer)
    train_accuracy: Mapped[float | None] = mapped_column(Float)
    train_ci_low: Mapped[float | None] = mapped_column(Float)
    train_ci_high: Mapped[float | None] = mapped_column(Float)
    heldout_accuracy: Mapped[float | None] = mapped_column(Float)
    heldout_ci_low: Mapped[float | None] = mapped_column(Float)
    heldout_ci_high: Mapped[float | None] = mapped_column(Float)
    gap_points: Mapped[float | None] = mapped_column(Float)
    gap_ci_low: Mapped[float | None] = mapped_column(Float)
    gap_ci_high: Mapped[float | None] = mapped_column(Float)
    matched_gap_points: Mapped[float | None] = mapped_column(Float)
    matched_gap_ci_low: Mapped[float | None] = mapped_column(Float)
    matched_gap_ci_high: Mapped[float | None] = mapped_column(Float)
    variants_per_item: Mapped[int | None] = mapped_column(Integer)
    variant_train_accuracy: Mapped[float | None] = mapped_column(Float)
    memorisation_gap_points: Mapped[float | None] = mapped_column(Float)
    """Original train accuracy minus variant train accuracy, over the parametric train items."""
    memorisation_gap_ci_low: Mapped[float | None] = mapped_column(Float)
    memorisation_gap_ci_high: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text)
    train_truncated: Mapped[int | None] = mapped_column(Integer)
    """Rollouts of the train run cut at the token limit (scored 0, counted in the accuracy)."""
    heldout_truncated: Mapped[int | None] = mapped_column(Integer)


class EvalRun(Base):
    """One evaluation of a model (checkpoint) on one config. `status` is `complete` only at the end."""

    __tablename__ = "eval_runs"
    __table_args__ = (
        CheckConstraint(_in("status", RUN_STATUSES), name="status_known"),
        CheckConstraint("rollouts_per_item >= 1", name="rollouts_positive"),
        Index("ix_eval_runs_model_step", "model", "step"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model: Mapped[str] = mapped_column(String(200))
    checkpoint: Mapped[str | None] = mapped_column(String(200))
    step: Mapped[int | None] = mapped_column(Integer)
    config: Mapped[str] = mapped_column(String(20))
    rollouts_per_item: Mapped[int] = mapped_column(Integer)
    sampling_json: Mapped[str] = mapped_column(Text)
    dataset_hash: Mapped[str] = mapped_column(String(64))
    grader_version: Mapped[str] = mapped_column(String(40))
    status: Mapped[str] = mapped_column(String(12))
    started_at: Mapped[datetime] = mapped_column(DateTime)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime)
    error: Mapped[str | None] = mapped_column(Text)
    rescored_from_run_id: Mapped[int | None] = mapped_column(ForeignKey("eval_runs.id"))
    transfer_check_id: Mapped[int | None] = mapped_column(ForeignKey("transfer_checks.id"))
    isolation: Mapped[str | None] = mapped_column(String(80))
    """How code submissions ran (e.g. "bwrap 0.11.0 (bundled)", "rlimit (UNISOLATED, opted in)",
    "none: no isolation available, code scored 0"); None for runs stored before migration 0004."""
    base_url: Mapped[str | None] = mapped_column(Text)
    """The endpoint the run was sent to (what `scaling-book resume` uses; no key is stored)."""
    api_key_var: Mapped[str | None] = mapped_column(String(200))
    """Name of the environment variable holding the API key (never the key)."""
    item_limit: Mapped[int | None] = mapped_column(Integer)
    """`--limit`: only the first N items of the config by id; None for all."""
    host: Mapped[str | None] = mapped_column(String(255))
    pid: Mapped[int | None] = mapped_column(Integer)
    """Host name and process id of the process running the run (to tell a live run from a dead one)."""
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime)
    """Last sign of life of a `running` run (UTC); refreshed while it runs."""

    rollouts: Mapped[list[RolloutResult]] = relationship(
        back_populates="run", cascade="all, delete-orphan", order_by="RolloutResult.id"
    )


class RolloutResult(Base):
    """One rollout of one item in an eval run, with its rewards, metrics and the grader's reason.

    No foreign key to `items`: run history outlives item edits; `item_content_hash` says which
    version of the item the rollout answered.
    """

    __tablename__ = "rollout_results"
    __table_args__ = (
        UniqueConstraint("run_id", "item_id", "rollout_index", name="uq_rollout_results_run_item_rollout"),
        CheckConstraint(_in("status", ROLLOUT_STATUSES), name="status_known"),
        CheckConstraint("correctness >= 0 AND correctness <= 1", name="correctness_in_unit_interval"),
        CheckConstraint("exact IN (0, 1)", name="exact_binary"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("eval_runs.id", ondelete="CASCADE"), index=True)
    item_id: Mapped[str] = mapped_column(String(80), index=True)
    item_content_hash: Mapped[str] = mapped_column(String(64))
    grader: Mapped[str] = mapped_column(String(20))
    split: Mapped[str] = mapped_column(String(10))
    rollout_index: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(12))
    correctness: Mapped[float] = mapped_column(Float)
    format: Mapped[float] = mapped_column(Float)
    exact: Mapped[int] = mapped_column(Integer)
    reward: Mapped[float] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(Text)
    response: Mapped[str | None] = mapped_column(Text)
    """The visible reply: what was graded (reasoning removed)."""
    error: Mapped[str | None] = mapped_column(Text)
    finish_reason: Mapped[str | None] = mapped_column(String(20))
    """Why the model stopped (`stop`, `length`, ...), as the endpoint reported it."""
    reasoning: Mapped[str | None] = mapped_column(Text)
    """The reasoning (server `reasoning_content`, or the text up to the last `</think>`), never graded;
    at most `REASONING_STORED_CHARS` characters."""
    reasoning_chars: Mapped[int | None] = mapped_column(Integer)
    """Full length of the reasoning in characters, before the cap."""
    parent_item_id: Mapped[str | None] = mapped_column(String(80))
    """For a counterfactual variant: the item it was rendered from (else NULL)."""
    variant_seed: Mapped[int | None] = mapped_column(Integer)
    variant_inputs_json: Mapped[str | None] = mapped_column(Text)
    """The drawn inputs as the question showed them, {name: text}."""

    run: Mapped[EvalRun] = relationship(back_populates="rollouts")


class RunItemAggregate(Base):
    """One item's outcome in one finished run: the means over its rollouts, written once when the
    run finishes (`scaling_book.runs.recording.finish_run`) and never changed (a rescore is a new
    run with its own rows). The `item_history` and `grader_accuracy` views read these rows, so
    their cost does not grow with the rollouts stored.
    """

    __tablename__ = "run_item_aggregates"
    __table_args__ = (
        CheckConstraint("mean_exact >= 0 AND mean_exact <= 1", name="mean_exact_in_unit_interval"),
        CheckConstraint("mean_correctness >= 0 AND mean_correctness <= 1", name="mean_correctness_in_unit_interval"),
        CheckConstraint("rollouts >= 1", name="rollouts_positive"),
        CheckConstraint("truncated >= 0 AND truncated <= rollouts", name="truncated_within_rollouts"),
    )

    run_id: Mapped[int] = mapped_column(ForeignKey("eval_runs.id", ondelete="CASCADE"), primary_key=True)
    item_id: Mapped[str] = mapped_column(String(80), primary_key=True)
    item_content_hash: Mapped[str] = mapped_column(String(64))
    grader: Mapped[str] = mapped_column(String(20))
    split: Mapped[str] = mapped_column(String(10))
    mean_exact: Mapped[float] = mapped_column(Float)
    """Mean of the rollouts' `exact` (0/1), in [0, 1]."""
    mean_correctness: Mapped[float] = mapped_column(Float)
    """Mean of the rollouts' correctness, in [0, 1]."""
    rollouts: Mapped[int] = mapped_column(Integer)
    """Rollouts of the item stored for the run."""
    truncated: Mapped[int] = mapped_column(Integer, server_default="0")
    """Rollouts whose reply was cut off by the token limit (0 until truncation is recorded)."""
