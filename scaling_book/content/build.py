"""The main job: migrate the store, load `seed/`, run the gate, export.

`build()` does the four steps in order inside one database transaction for the content: the items
are replaced and the gate's baselines written only if every check passes, and the export is written
only after the transaction commits. Any failure raises (`SeedError` or `GateError`, both naming file,
item and field) and leaves the previous store content and export untouched. Re-running on the same
seed is idempotent: the same rows, byte-identical export files.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scaling_book.content.domains import load_domains
from scaling_book.content.export import (
    CONFIGS,
    VARIANT_CONFIGS,
    config_members,
    export,
    variant_config_members,
)
from scaling_book.content.gate import GateError, GateReport, run_gate
from scaling_book.content.loader import load_seed
from scaling_book.content.namespace import load_derive, load_hardware
from scaling_book.content.specs import ItemSpec, SeedError, SeedIssue
from scaling_book.content.variant_checks import (
    GATE_VARIANTS,
    VariantGateReport,
    run_variant_gate,
    store_definitions,
)
from scaling_book.content.variants import load_context
from scaling_book.content.wrong_hardware import (
    WrongHardwareReport,
    check_wrong_hardware,
)
from scaling_book.paths import SEED_DIR
from scaling_book.store import (
    make_engine,
    make_session_factory,
    resolve_db_url,
    upgrade_to_head,
)
from scaling_book.store.items import RowsRefused, replace_items


@dataclass
class BuildReport:
    """What a build produced: counts by chapter, grader, provenance and config, and the gate's figures."""

    db_url: str
    export_dir: Path | None
    items: int
    by_chapter: dict[int, int]
    by_grader: dict[str, int]
    by_provenance: dict[str, int]
    by_config: dict[str, int]
    gate: GateReport
    variants: VariantGateReport | None = None
    manifest: dict[str, Any] = field(default_factory=dict)
    errata: list[tuple[str, str]] = field(default_factory=list)
    method_stated: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    wrong_hardware: WrongHardwareReport | None = None


def method_stated_rates(specs: list[ItemSpec]) -> dict[str, dict[str, tuple[int, int]]]:
    """{split: {grader or "all": (items with method_stated, items)}}, splits "train" and "heldout"."""
    table: dict[str, dict[str, tuple[int, int]]] = {}
    for split in ("train", "heldout"):
        mine = [s for s in specs if s.split == split]
        row = {"all": (sum(s.method_stated for s in mine), len(mine))}
        for grader in sorted({s.grader for s in specs}):
            of_grader = [s for s in mine if s.grader == grader]
            row[grader] = (sum(s.method_stated for s in of_grader), len(of_grader))
        table[split] = row
    return table


def summarize(specs: list[ItemSpec]) -> tuple[dict[int, int], dict[str, int], dict[str, int], dict[str, int]]:
    """Counts per chapter, grader, provenance and config of a list of item specs."""
    by_chapter = dict(sorted(Counter(s.chapter for s in specs).items()))
    by_grader = dict(sorted(Counter(s.grader for s in specs).items()))
    by_provenance = dict(sorted(Counter(s.provenance for s in specs).items()))
    by_config = {c: sum(1 for s in specs if config_members(c, s.split, s.kind)) for c in CONFIGS}
    return by_chapter, by_grader, by_provenance, by_config


def protect_reference_solutions(seed_dir: Path) -> None:
    """Make `seed_dir/reference_solutions` owner-only (0700) when we own it: a code submission run
    without bwrap under another uid (the rlimit fallback as root) then cannot import the references.
    Git does not track a folder's mode, so the checkout stays clean."""
    folder = Path(seed_dir) / "reference_solutions"
    try:
        if folder.is_dir() and folder.stat().st_uid == os.geteuid():
            os.chmod(folder, 0o700)
    except OSError:
        pass


def build(
    db_url: str | None = None,
    seed_dir: Path = SEED_DIR,
    export_dir: Path | None = None,
    on_progress: Callable[[str], None] | None = None,
    variants_k: int = GATE_VARIANTS,
) -> BuildReport:
    """Migrate, load, gate (items, then `variants_k` variants of every parametric item) and (unless
    `export_dir` is None) export. Raises on any failure."""
    url = resolve_db_url(db_url)
    say = on_progress or (lambda _message: None)
    say("migrating the store to head")
    upgrade_to_head(url)
    say(f"loading {seed_dir}")
    specs = load_seed(seed_dir)
    say("checking that every numeric target tells its hardware from the other chips")
    wrong_hardware = check_wrong_hardware(specs, load_hardware(seed_dir / "hardware.toml"),
                                          load_derive(seed_dir / "derive.py"))
    if wrong_hardware.failures:
        raise GateError(wrong_hardware.failures)
    domains = load_domains(seed_dir)
    protect_reference_solutions(seed_dir)
    context = load_context(seed_dir)
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session, session.begin():
            try:
                replace_items(session, specs)
            except RowsRefused as exc:
                raise SeedError([SeedIssue(r.source_file, r.item_id, r.field, r.message) for r in exc.refused]) from None
            say(f"gate: checking {len(specs)} items")
            gate = run_gate(session, on_progress=lambda item_id: say(f"gate: ran reference of {item_id}"),
                            domains=domains)
            say(f"gate: rendering {variants_k} variants of {len(context.parametric_ids())} parametric items")
            variants = run_variant_gate(context, specs, variants_k)
            store_definitions(session, context)
        manifest: dict[str, Any] = {}
        if export_dir is not None:
            say(f"exporting to {export_dir}")
            with make_session_factory(engine)() as session:
                manifest = export(session, export_dir, variants=variants.variants)
    finally:
        engine.dispose()
    by_chapter, by_grader, by_provenance, by_config = summarize(specs)
    for config in VARIANT_CONFIGS:
        by_config[config] = sum(len(drawn) for parent, drawn in variants.variants.items()
                                if variant_config_members(config, next(s.split for s in specs if s.id == parent)))
    return BuildReport(
        db_url=url, export_dir=export_dir, items=len(specs), by_chapter=by_chapter, by_grader=by_grader,
        by_provenance=by_provenance, by_config=by_config, gate=gate, variants=variants, manifest=manifest,
        errata=[(s.id, s.book_value) for s in specs if s.book_value is not None],
        method_stated=method_stated_rates(specs), wrong_hardware=wrong_hardware,
    )
