"""One finished verifiers slot as one `RolloutOutcome`: status, scores, visible reply and reasoning.

The status is "error" whenever verifiers recorded a failure (provider, harness, scoring) or a signal
is missing; "truncated" when the reply was cut at the token limit (`trace.is_truncated`), which
scores 0 on every signal whatever the reply holds; "ok" otherwise. The stored response is the
visible reply (`visible_reply`: what was graded); the reasoning, from the server's
`reasoning_content` and from any text up to the last `</think>`, is kept apart, capped at
`REASONING_STORED_CHARS` characters, with its full length.
"""

from __future__ import annotations

import re
from typing import Any

from scaling_book.grading.extract import visible_reply
from scaling_book.runs.recording import RolloutOutcome
from scaling_book.store.models import REASONING_STORED_CHARS

_CLOSING_TAG = re.compile(r"</(?:think|thinking|reasoning)\s*>$", re.I)


def rollout_outcome(task: Any, index: int, result: Any) -> RolloutOutcome:
    """The outcome of rollout `index` of `task`: `result` is the `Episode` that `run_slot` returned
    or the exception it raised."""
    info = task.data.info
    base: dict[str, Any] = {
        "item_id": task.data.id,
        "rollout_index": index,
        "grader": info.get("grader", ""),
        # A property of the item, not a score: known even when the rollout failed.
        "heldout_flag": 1.0 if info.get("split") == "heldout" else 0.0,
    }
    if isinstance(result, BaseException):
        return _zero(base, "error", None, f"{type(result).__name__}: {result}")
    episode = result
    trace = episode.traces[-1] if episode.traces else None
    if trace is None:
        return _zero(base, "error", None, _errors_text(episode.errors) or "the episode ran no rollout")
    base.update(_reply_parts(trace))
    response = base.pop("response")
    if not (episode.ok and trace.ok):
        errors = [*episode.errors, *trace.errors]
        return _zero(base, "error", response, _errors_text(errors) or "verifiers marked the rollout failed")
    if trace.is_truncated:
        from scaling_book.environment.taskset import TRUNCATED_REASON

        return _zero(base, "truncated", response, None, reason=TRUNCATED_REASON)
    if trace.is_timeout:
        return _zero(base, "error", response, f"a stage deadline expired ({trace.stop_condition})")
    values = {
        "correctness": _score(trace.rewards.get("correctness")),
        "format": _score(trace.rewards.get("format")),
        "exact": trace.metrics.get("exact"),
        "heldout_flag": trace.metrics.get("heldout_flag"),
    }
    missing = [name for name, value in values.items() if value is None]
    if missing:
        return _zero(base, "error", response, f"signals not scored: {', '.join(missing)}")
    kept = trace.info.get("grade") or {}
    return RolloutOutcome(
        **base, status="ok", response=response, correctness=float(values["correctness"]),
        format=float(values["format"]), exact=float(values["exact"]), reward=float(trace.reward),
        reason=str(kept.get("reason", "")), error=None,
    )


def _reply_parts(trace: Any) -> dict[str, Any]:
    """response (the visible reply, None without a reply), finish_reason, reasoning (capped) and
    reasoning_chars of the trace's last model reply."""
    finish = next((call.finish_reason for call in reversed(trace.calls) if call.error is None), None)
    messages = trace.assistant_messages
    if not messages:
        return {"response": None, "finish_reason": finish, "reasoning": None, "reasoning_chars": None}
    message = messages[-1]
    raw = message.content if isinstance(message.content, str) else trace.last_reply
    raw = raw or ""
    visible = visible_reply(raw)
    inline = raw[: len(raw) - len(visible)] if raw.endswith(visible) else raw
    inline = _CLOSING_TAG.sub("", inline.rstrip())
    parts = [part for part in (getattr(message, "reasoning_content", None), inline.strip()) if part]
    reasoning = "\n\n".join(parts)
    return {
        "response": visible.strip(),
        "finish_reason": finish,
        "reasoning": reasoning[:REASONING_STORED_CHARS] if reasoning else None,
        "reasoning_chars": len(reasoning) if reasoning else None,
    }


def _zero(base: dict[str, Any], status: str, response: str | None, error: str | None,
          reason: str = "") -> RolloutOutcome:
    return RolloutOutcome(**base, status=status, response=response, correctness=0.0, format=0.0, exact=0.0,
                          reward=0.0, reason=reason, error=error)


def _score(reward: Any) -> float | None:
    return None if reward is None else float(reward.score)


def _errors_text(errors: list[Any]) -> str:
    """The recorded errors, newest last, as `Type: message` lines."""
    return "\n".join(f"{error.type}: {error.message}" for error in errors)
