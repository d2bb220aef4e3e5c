"""Resuming a run that a signal (or a process death) stopped: only its missing (item, rollout) pairs run.

A run can be resumed when it is `interrupted`, or `running` with no live process behind it
(`recording.is_stale`). The resumed run keeps its id, its stored rollouts and its sampling arguments
(read back from `sampling_json`, `item_limit`, `base_url`, `api_key_var`); it is refused when the
export's dataset hash differs from the one the run recorded (the items changed). A run of a transfer
check resumes the whole check (`scaling_book.runs.transfer_check.run_transfer_check`).
"""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from scaling_book.runs.recording import is_stale
from scaling_book.runs.runner import (
    DEFAULT_REQUEST_TIMEOUT_S,
    EvalRequest,
    dataset_hash_of,
)
from scaling_book.store.tracking import EvalRun, RolloutResult

SAMPLING_KEYS = ("temperature", "top_p", "max_tokens", "seed")
"""The keys of `sampling_json` that are sent with each request."""


class ResumeRefused(Exception):
    """The run cannot be resumed (unknown, finished, still live, or its export changed)."""


def resumable(run: EvalRun | None, run_id: int) -> EvalRun:
    """`run` if it can be resumed; raises `ResumeRefused` naming why not."""
    if run is None:
        raise ResumeRefused(f"no eval run with id {run_id}")
    if run.status == "running" and not is_stale(run):
        raise ResumeRefused(f"run {run_id} is still running (pid {run.pid} on {run.host})")
    if run.status not in ("interrupted", "running"):
        raise ResumeRefused(f"run {run_id} is {run.status}; only an interrupted (or dead running) run can be resumed")
    if run.rescored_from_run_id is not None:
        raise ResumeRefused(f"run {run_id} is a rescore; run `scaling-book rescore` again instead")
    return run


def request_for(run: EvalRun, export_dir: Path, *, base_url: str | None = None, api_key_var: str | None = None,
                max_concurrent: int = 8) -> EvalRequest:
    """The request that started `run`, from what it stored; `base_url`/`api_key_var` override the stored
    endpoint. Raises `ResumeRefused` when the export changed or no endpoint is known."""
    stored = json.loads(run.sampling_json or "{}")
    if dataset_hash_of(export_dir, run.config) != run.dataset_hash:
        raise ResumeRefused(f"the export of config {run.config!r} at {export_dir} has changed since run {run.id} "
                            "started (its dataset hash differs); start a new run instead")
    url = base_url or run.base_url
    if not url:
        raise ResumeRefused(f"run {run.id} stored no endpoint; pass --base-url")
    return EvalRequest(
        model=run.model, base_url=url, api_key_var=api_key_var or run.api_key_var or "OPENAI_API_KEY",
        config=run.config, export_dir=export_dir, rollouts_per_item=run.rollouts_per_item, checkpoint=run.checkpoint,
        step=run.step, max_concurrent=max_concurrent,
        sampling={key: stored[key] for key in SAMPLING_KEYS if key in stored}, limit=run.item_limit,
        request_timeout=float(stored.get("request_timeout", DEFAULT_REQUEST_TIMEOUT_S)),
        system_prompt_mode=stored.get("system_prompt_mode", "system"),
    )


def reopen_run(factory: sessionmaker[Session], run_id: int) -> frozenset[tuple[str, int]]:
    """Mark run `run_id` running again under this process; return its stored (item, rollout index) pairs.
    Raises `ResumeRefused` when it cannot be resumed."""
    with factory() as session, session.begin():
        run = resumable(session.get(EvalRun, run_id), run_id)
        run.status, run.error, run.finished_at = "running", None, None
        run.host, run.pid, run.heartbeat_at = socket.gethostname(), os.getpid(), datetime.now(UTC)
        pairs = session.execute(select(RolloutResult.item_id, RolloutResult.rollout_index)
                                .where(RolloutResult.run_id == run_id)).all()
    return frozenset((item_id, index) for item_id, index in pairs)
