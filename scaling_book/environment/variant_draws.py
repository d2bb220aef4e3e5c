"""Fresh counterfactual variants at load time: `--env.taskset.variant-seed epoch:N` or `random`.

RL training draws new numbers every epoch without an export per epoch: each loaded row whose item
is parametric (`seed/variants/`) is replaced by a freshly rendered variant of its parent item
(`scaling_book.content.variants`), with the seed `epoch_seed(N, k)` for the parent's k-th row of
the config. The same `epoch:N` gives the same rows on every machine; `random` draws N from the OS.
Rows of fixed items pass through unchanged.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import Any

VARIANT_SEED_PATTERN = re.compile(r"^(epoch:\d+|random)$")


def epoch_of(variant_seed: str) -> int:
    """The epoch number of a `variant_seed` ("epoch:N" -> N; "random" -> a fresh random N).
    Raises ValueError for anything else."""
    if not VARIANT_SEED_PATTERN.match(variant_seed):
        raise ValueError(f"variant_seed must be 'epoch:N' or 'random', got {variant_seed!r}")
    if variant_seed == "random":
        return random.SystemRandom().randrange(10**6)
    return int(variant_seed.split(":", 1)[1])


@lru_cache(maxsize=2)
def _context(seed_dir: Path):
    from scaling_book.content.variants import load_context

    return load_context(seed_dir)


def fresh_variant_rows(rows: list[dict[str, Any]], variant_seed: str, seed_dir: Path) -> list[dict[str, Any]]:
    """`rows` with every parametric item's row replaced by a fresh variant (see module docstring)."""
    from scaling_book.content.export import variant_record
    from scaling_book.content.variants import epoch_seed, variant
    from scaling_book.grading.prompt import SYSTEM_PROMPT

    epoch = epoch_of(variant_seed)
    context = _context(Path(seed_dir))
    parametric = set(context.parametric_ids())
    seen: dict[str, int] = defaultdict(int)
    out = []
    for row in rows:
        parent = row["info"].get("parent_id") or row["id"]
        if parent not in parametric:
            out.append(row)
            continue
        index = seen[parent]
        seen[parent] += 1
        out.append(variant_record(variant(context, parent, epoch_seed(epoch, index)), SYSTEM_PROMPT))
    return out
