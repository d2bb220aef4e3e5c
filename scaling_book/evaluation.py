"""Evaluate a model on one exported config through verifiers, rollout by rollout.

`evaluate()` drives verifiers in-process, the way `vf-eval` does, minus its output folder,
dashboard and platform upload: it loads the scaling-book environment
(`vf.load_environment(vf.resolve_env_config(...))`), holds its serving resources
(`env.serving()`: the interception server the harness posts to), and runs each planned rollout
with `env.run_slot(...)` under a semaphore of `max_concurrent`. Every rollout becomes one
`RolloutOutcome`: the response text, each reward and metric, the grader's reason, and a status
that is "error" whenever verifiers recorded a failure (provider, harness, scoring) or a signal is
missing. Nothing here writes to the store; `scaling_book.history.finish_run` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TASKSET_ID = "scaling-book"
"""The id verifiers resolves to this package (`import scaling_book`)."""


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


@dataclass
class EvalOutcome:
    """Every rollout of one evaluation of `model` on exported config `config`."""

    config: str
    model: str
    rollouts_per_item: int
    sampling: dict
    """The sampling settings sent with every request (only those that were set)."""
    rollouts: list[RolloutOutcome]


def evaluate(
    *,
    config: str,
    model: str,
    base_url: str,
    api_key_var: str,
    rollouts_per_item: int = 1,
    max_concurrent: int = 8,
    export_dir: Path | None = None,
    sampling: dict | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> EvalOutcome:
    """Run `rollouts_per_item` rollouts of every item of exported config `config` against the
    OpenAI-compatible endpoint `base_url` (API key read from environment variable
    `api_key_var`), at most `max_concurrent` at once. `sampling` holds request settings such as
    `temperature` and `max_tokens`. `on_progress(done, total)` is called once before the first
    rollout and after each one finishes. A failed rollout is reported, never raised; errors
    loading the export or configuring verifiers are raised."""
    if rollouts_per_item < 1:
        raise ValueError(f"rollouts_per_item must be at least 1, got {rollouts_per_item}")
    if max_concurrent < 1:
        raise ValueError(f"max_concurrent must be at least 1, got {max_concurrent}")
    return asyncio.run(
        _evaluate(
            config=config,
            model=model,
            base_url=base_url,
            api_key_var=api_key_var,
            rollouts_per_item=rollouts_per_item,
            max_concurrent=max_concurrent,
            export_dir=export_dir,
            sampling=dict(sampling or {}),
            on_progress=on_progress,
        )
    )


async def _evaluate(
    *,
    config: str,
    model: str,
    base_url: str,
    api_key_var: str,
    rollouts_per_item: int,
    max_concurrent: int,
    export_dir: Path | None,
    sampling: dict,
    on_progress: Callable[[int, int], None] | None,
) -> EvalOutcome:
    import verifiers.v1 as vf

    taskset: dict[str, Any] = {"id": TASKSET_ID, "config": config}
    if export_dir is not None:
        taskset["export_dir"] = str(Path(export_dir).resolve())
    env = vf.load_environment(vf.resolve_env_config({"taskset": taskset}))
    tasks = list(env.taskset)
    sampling_config = vf.SamplingConfig.model_validate(sampling)
    ctx = vf.ModelContext(
        client=vf.EvalClientConfig(base_url=base_url, api_key_var=api_key_var),
        model=model,
        sampling=sampling_config,
    )
    planned = [
        (task, index, slot)
        for task in tasks
        for index, slot in enumerate(env.slots(task, rollouts_per_item))
    ]
    total = len(planned)
    done = 0
    semaphore = asyncio.Semaphore(max_concurrent)

    def progress() -> None:
        if on_progress is not None:
            on_progress(done, total)

    async def completed(_episode: Any) -> None:
        nonlocal done
        done += 1
        progress()

    progress()
    async with env.serving():
        results = await asyncio.gather(
            *(env.run_slot(slot, ctx, semaphore, completed) for _, _, slot in planned),
            return_exceptions=True,
        )
    rollouts = [
        _outcome(task, index, result)
        for (task, index, _), result in zip(planned, results, strict=True)
    ]
    return EvalOutcome(
        config=config,
        model=model,
        rollouts_per_item=rollouts_per_item,
        sampling=sampling_config.model_dump(exclude_none=True),
        rollouts=rollouts,
    )


def _outcome(task: Any, index: int, result: Any) -> RolloutOutcome:
    """The outcome of one finished slot: an `Episode`, or the exception `run_slot` raised."""
    info = task.data.info
    base = {
        "item_id": task.data.id,
        "rollout_index": index,
        "grader": info.get("grader", ""),
        # A property of the item, not a score: known even when the rollout failed.
        "heldout_flag": 1.0 if info.get("split") == "heldout" else 0.0,
    }
    if isinstance(result, BaseException):
        return _failed(base, None, f"{type(result).__name__}: {result}")
    episode = result
    trace = episode.traces[-1] if episode.traces else None
    if trace is None:
        return _failed(base, None, _errors_text(episode.errors) or "the episode ran no rollout")
    response = trace.last_reply if trace.assistant_messages else None
    errors = [*episode.errors, *trace.errors] if not (episode.ok and trace.ok) else []
    values = {
        "correctness": _score(trace.rewards.get("correctness")),
        "format": _score(trace.rewards.get("format")),
        "exact": trace.metrics.get("exact"),
        "heldout_flag": trace.metrics.get("heldout_flag"),
    }
    if not (episode.ok and trace.ok):
        return _failed(base, response, _errors_text(errors) or "verifiers marked the rollout failed")
    if trace.is_timeout:
        return _failed(base, response, f"a stage deadline expired ({trace.stop_condition})")
    missing = [name for name, value in values.items() if value is None]
    if missing:
        return _failed(base, response, f"signals not scored: {', '.join(missing)}")
    kept = trace.info.get("grade") or {}
    return RolloutOutcome(
        **base,
        status="ok",
        response=response,
        correctness=float(values["correctness"]),
        format=float(values["format"]),
        exact=float(values["exact"]),
        reward=float(trace.reward),
        reason=str(kept.get("reason", "")),
        error=None,
    )


def _failed(base: dict[str, Any], response: str | None, error: str) -> RolloutOutcome:
    return RolloutOutcome(
        **base,
        status="error",
        response=response,
        correctness=0.0,
        format=0.0,
        exact=0.0,
        reward=0.0,
        reason="",
        error=error,
    )


def _score(reward: Any) -> float | None:
    return None if reward is None else float(reward.score)


def _errors_text(errors: list[Any]) -> str:
    """The recorded errors, newest last, as `Type: message` lines."""
    return "\n".join(f"{error.type}: {error.message}" for error in errors)


__all__ = ["EvalOutcome", "RolloutOutcome", "evaluate"]
