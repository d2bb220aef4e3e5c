"""Comparing two stored runs item by item (paired), over the items both answered in the same version."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from scaling_book.store.tracking import EvalRun, RolloutResult


def run_item_scores(factory: sessionmaker[Session], run_id: int) -> tuple[EvalRun, dict[str, list[float]], dict[str, str]]:
    """A run, its per-item `exact` outcomes, and the content hash of the item version each answered.

    Raises LookupError if the run does not exist.
    """
    with factory() as session:
        run = session.get(EvalRun, run_id)
        if run is None:
            raise LookupError(f"no eval run with id {run_id}")
        scores: dict[str, list[float]] = {}
        hashes: dict[str, str] = {}
        for rollout in session.scalars(select(RolloutResult).where(RolloutResult.run_id == run_id)):
            scores.setdefault(rollout.item_id, []).append(float(rollout.exact))
            hashes[rollout.item_id] = rollout.item_content_hash
        return run, scores, hashes


@dataclass
class RunComparison:
    """Paired comparison of two runs over the items both answered in the same version."""

    run_a: int
    run_b: int
    common_items: int
    gained: list[str]                 # wrong (mean exact < 0.5) in A, right in B
    lost: list[str]                   # right in A, wrong in B
    difference_points: float          # mean exact of B minus A, in points
    interval: tuple[float, float]
    changed_items: list[str]          # same id, different content hash: not compared
    only_in_a: list[str]
    only_in_b: list[str]
    sampling_differences: dict[str, tuple] = None   # key -> (value in A, value in B); empty when alike


def compare_runs(factory: sessionmaker[Session], run_a: int, run_b: int, seed: int = 0) -> RunComparison:
    """Paired per-item comparison of runs `run_a` and `run_b`.

    Items whose content hash differs between the runs are listed in `changed_items` and left out,
    never compared silently. Raises LookupError for an unknown run, ValueError with no common item.
    """
    from scaling_book.runs.gap_statistics import paired_difference

    stored_a, scores_a, hashes_a = run_item_scores(factory, run_a)
    stored_b, scores_b, hashes_b = run_item_scores(factory, run_b)
    shared = set(scores_a) & set(scores_b)
    changed = sorted(i for i in shared if hashes_a[i] != hashes_b[i])
    common = sorted(shared - set(changed))
    a = {i: scores_a[i] for i in common}
    b = {i: scores_b[i] for i in common}
    difference, interval = paired_difference(a, b, seed=seed)

    def right(outcomes: list[float]) -> bool:
        return sum(outcomes) / len(outcomes) >= 0.5

    return RunComparison(
        run_a=run_a, run_b=run_b, common_items=len(common),
        gained=[i for i in common if not right(a[i]) and right(b[i])],
        lost=[i for i in common if right(a[i]) and not right(b[i])],
        difference_points=difference, interval=(interval.low, interval.high), changed_items=changed,
        only_in_a=sorted(set(scores_a) - shared), only_in_b=sorted(set(scores_b) - shared),
        sampling_differences=sampling_differences(run_sampling(factory, stored_a), run_sampling(factory, stored_b)),
    )


def run_sampling(factory: sessionmaker[Session], run: EvalRun) -> dict:
    """What a run was sampled with (`sampling_json`); a rescored run's is its source run's."""
    import json

    seen = set()
    with factory() as session:
        while run.rescored_from_run_id is not None and run.id not in seen:
            seen.add(run.id)
            source = session.get(EvalRun, run.rescored_from_run_id)
            if source is None:
                break
            run = source
    return json.loads(run.sampling_json or "{}")


def sampling_differences(a: dict, b: dict) -> dict[str, tuple]:
    """key -> (value in a, value in b) for every sampling setting that differs (missing is None)."""
    return {key: (a.get(key), b.get(key)) for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)}
