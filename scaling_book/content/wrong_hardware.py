"""The wrong-hardware check: a numeric target must tell the item's hardware from every other chip.

A held-out item asks the chapter 1-8 method on GPU hardware. If a model ignored the stated GPU figures
and answered with another chip's constants (the counterpart's TPU, or another GPU), that answer must
not land inside the item's tolerance. Targets are expressions over named constants, so the check
re-evaluates each numeric / numeric_multi item's `given` and `targets` with every chip the item uses
replaced by another chip of `hardware.toml`:

- a field the other chip has under the same name takes that value;
- otherwise a field of the same role (peak FLOP/s, HBM bandwidth, HBM capacity, interconnect
  bandwidth, low-precision FLOP/s) does, trying every such field the other chip has;
- if a used field has no counterpart at all, that chip is not applicable to the item.

A wrong-hardware value equal to the target (the two chips share the constant) is not a failure: the
answer is right for both. Held-out items are checked against every chip they do not use, and any
wrong-hardware value inside the tolerance fails. Train items are checked against the GPU chips; a
train value that a GPU's constants reproduce (TPU v5p's C / W_ici = 2550 against a B200's C / W_NVLink
= 2556, say) is listed as a coincidence, and fails only when a held-out item asks for that value
(a held-out target within the train item's tolerance of it), since then a memorised train answer
would score on the held-out half. `check_wrong_hardware(specs, hardware, derive)` returns a report
whose `failures` are `SeedIssue`s (file, item id, `targets[i]`).
"""

from __future__ import annotations

import ast
import itertools
import math
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

from scaling_book.content.namespace import MAGNITUDES, SAFE_BUILTINS
from scaling_book.content.specs import ItemSpec, SeedIssue

ROLES: tuple[frozenset[str], ...] = (
    frozenset({"bf16_flops_per_s", "bf16_flops_per_s_as_in_text"}),
    frozenset({"fp8_flops_per_s", "int8_ops_per_s"}),
    frozenset({"hbm_bytes_per_s", "hbm_bytes_per_s_as_in_text", "hbm_bytes_per_s_as_in_ch1",
               "hbm_bytes_per_s_as_in_memory_section"}),
    frozenset({"hbm_capacity_bytes"}),
    frozenset({"nvlink_gpu_egress_bytes_per_s", "node_egress_bytes_per_s", "ici_bytes_per_s_per_link_bidi",
               "ici_bytes_per_s_per_link_one_way", "dcn_bytes_per_s"}),
)
MAX_VARIANTS_PER_CHIP = 256


@dataclass
class WrongHardwareReport:
    """Per item: chips tried, chips not applicable, and the closest wrong-hardware miss (relative)."""

    items_checked: int = 0
    variants_evaluated: int = 0
    closest: dict[str, tuple[float, str]] = field(default_factory=dict)
    failures: list[SeedIssue] = field(default_factory=list)
    train_coincidences: list[SeedIssue] = field(default_factory=list)


def _used_fields(spec: ItemSpec, chips: dict[str, SimpleNamespace]) -> dict[str, set[str]]:
    """{chip: fields} read by the item's given and target expressions (`chip.field` attribute accesses)."""
    used: dict[str, set[str]] = {}
    for expression in [*spec.given_expressions.values(), *spec.target_expressions]:
        if not isinstance(expression, str):
            continue
        for node in ast.walk(ast.parse(expression, mode="eval")):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in chips:
                used.setdefault(node.value.id, set()).add(node.attr)
    return used


def _candidates(field_name: str, other: SimpleNamespace) -> list[float]:
    if hasattr(other, field_name):
        return [getattr(other, field_name)]
    role = next((r for r in ROLES if field_name in r), frozenset())
    return sorted({getattr(other, f) for f in role if hasattr(other, f)})


def _variants(used: dict[str, set[str]], other: SimpleNamespace) -> list[dict[str, SimpleNamespace]]:
    """Every replacement of the used chips by `other` (one namespace per combination of role fields)."""
    slots = [(chip, name) for chip in sorted(used) for name in sorted(used[chip])]
    options = [_candidates(name, other) for _, name in slots]
    if any(not o for o in options):
        return []
    variants = []
    for combination in itertools.islice(itertools.product(*options), MAX_VARIANTS_PER_CHIP):
        replaced: dict[str, dict[str, float]] = {chip: {} for chip in used}
        for (chip, name), value in zip(slots, combination, strict=True):
            replaced[chip][name] = value
        variants.append({chip: SimpleNamespace(**values) for chip, values in replaced.items()})
    return variants


def _evaluate_targets(spec: ItemSpec, namespace: dict[str, Any]) -> list[float] | None:
    local = dict(namespace)
    try:
        for name, expression in spec.given_expressions.items():
            local[name] = eval(expression, {"__builtins__": SAFE_BUILTINS}, local) if isinstance(expression, str) \
                else expression  # noqa: S307 - seed expressions, as in the loader
        return [float(eval(e, {"__builtins__": SAFE_BUILTINS}, local)) for e in spec.target_expressions]  # noqa: S307
    except (ArithmeticError, TypeError, ValueError):
        return None


def check_wrong_hardware(specs: list[ItemSpec], chips: dict[str, SimpleNamespace],
                         derive: ModuleType) -> WrongHardwareReport:
    """Run the check over every numeric / numeric_multi item; failures are listed, not raised."""
    report = WrongHardwareReport()
    base = {**chips, **MAGNITUDES, "derive": derive, "math": math}
    gpu_chips = [c for c in chips if c.startswith("gpu_")]
    heldout = [s for s in specs if s.split == "heldout"]
    for spec in specs:
        if spec.grader not in ("numeric", "numeric_multi") or spec.tolerance is None:
            continue
        used = _used_fields(spec, chips)
        if not used:
            continue
        others = [c for c in chips if c not in used] if spec.split == "heldout" else \
            [c for c in gpu_chips if c not in used]
        report.items_checked += 1
        closest = (math.inf, "")
        for other in others:
            for variant in _variants(used, chips[other]):
                values = _evaluate_targets(spec, {**base, **variant})
                report.variants_evaluated += 1
                if values is None:
                    continue
                for position, (value, target) in enumerate(zip(values, spec.targets, strict=True)):
                    if target == 0 or math.isclose(value, target, rel_tol=1e-9):
                        continue
                    miss = abs(value - target) / abs(target)
                    if miss < closest[0]:
                        closest = (miss, f"{other} targets[{position}] = {value:.6g}")
                    if miss > spec.tolerance:
                        continue
                    issue = SeedIssue(spec.source_file, spec.id, f"targets[{position}]",
                                      f"{other}'s constants give {value:.6g}, {miss:.2%} from the target {target:.6g}, "
                                      f"inside the tolerance {spec.tolerance:.0%}: the item cannot tell the hardware apart")
                    if spec.split == "heldout":
                        report.failures.append(issue)
                        continue
                    asked = [h.id for h in heldout if any(abs(t - value) <= spec.tolerance * abs(value)
                                                           for t in h.targets)]
                    if asked:
                        report.failures.append(SeedIssue(issue.file, issue.item_id, issue.field,
                                                         f"{issue.message}, and held-out {', '.join(asked)} asks it"))
                    else:
                        report.train_coincidences.append(issue)
        if closest[1]:
            report.closest[spec.id] = closest
    report.failures = list(dict.fromkeys(report.failures))
    report.train_coincidences = list(dict.fromkeys(report.train_coincidences))
    return report
