"""Rendering results for the terminal: the tables and lines that `scaling-book` commands print.

Every function takes a result object of the module that produced it and prints with rich; none reads
the store or computes anything beyond formatting.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def fmt_interval(low: float | None, high: float | None, scale: float = 1.0, digits: int = 1) -> str:
    """`[low, high]` scaled and rounded, or `-` when either end is missing."""
    if low is None or high is None:
        return "-"
    # Round first, then + 0.0: float noise like -1e-15 would otherwise print as -0.0.
    low, high = round(scale * low, digits) + 0.0, round(scale * high, digits) + 0.0
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


def interval_ends(interval: Any) -> tuple[float | None, float | None]:
    """(low, high) of an interval object, or (None, None) when there is none."""
    return (None, None) if interval is None else (interval.low, interval.high)


def counts_table(title: str, counts: dict) -> Table:
    """A two-column table of counts with a total row; the key column is named by the title's last word."""
    table = Table(title=title, title_justify="left")
    table.add_column(title.split()[-1])
    table.add_column("items", justify="right")
    for key, value in counts.items():
        table.add_row(str(key), str(value))
    table.add_row("[bold]total[/bold]", f"[bold]{sum(counts.values())}[/bold]")
    return table


def print_build_report(console: Console, report: Any, elapsed_s: float) -> None:
    """The build's counts per chapter, grader, provenance and config, the gate's figures and errata."""
    console.print(f"[bold green]build ok[/bold green]: {report.items} items, store {report.db_url}")
    for title, counts in (("Items per chapter", report.by_chapter), ("Items per grader", report.by_grader),
                          ("Items per provenance", report.by_provenance)):
        console.print(counts_table(title, counts))
    configs = Table(title="Items per config", title_justify="left")
    for column in ("config", "items", "dataset hash"):
        configs.add_column(column)
    for config, n in report.by_config.items():
        digest = report.manifest.get("configs", {}).get(config, {}).get("dataset_hash", "")
        configs.add_row(config, str(n), digest[:12])
    console.print(configs)
    gate = report.gate
    console.print(
        f"gate: {gate.formulas_checked} formulas parsed, {gate.references_run} reference solutions passed "
        f"{gate.test_cases_run} test cases, sandbox mode [bold]{gate.isolation_mode}[/bold]"
        + ("" if gate.isolation_mode == "bwrap" else " (bwrap does not work here: no user namespaces?)")
    )
    if gate.hidden_cases:
        counts = sorted(set(gate.hidden_cases.values()))
        console.print(f"hidden tests: {sum(gate.hidden_cases.values())} drawn for {len(gate.hidden_cases)} code items "
                      f"({', '.join(map(str, counts))} per item; seeds stored with each item)")
    console.print(f"mutation check: {gate.mutants_run} mutants of the references, "
                  f"{len(gate.survivors)} survived, {len(gate.equivalent_mutants)} equivalent (same function on "
                  "every probe; not counted)")
    variants = getattr(report, "variants", None)
    if variants is not None:
        covered = ", ".join(f"ch{c} {e.parametric}/{e.arithmetic}" for c, e in variants.coverage.items())
        rejected = {i: variants.rejected_total(i) for i in variants.variants if variants.rejected_total(i)}
        console.print(f"variants: {variants.k} per parametric item rendered and checked for "
                      f"{len(variants.variants)} items ({variants.references_run} code references passed their "
                      f"variant tests); parametric/arithmetic items: {covered}")
        if rejected:
            console.print("rejected draws: " + ", ".join(f"{i} {n}" for i, n in sorted(rejected.items())),
                          highlight=False, soft_wrap=True)
    if gate.baselines:
        nonzero = {k: v for k, v in gate.baselines.items() if v[0] > 0}
        console.print(f"baselines: {len(gate.baselines)} code items measured, {len(nonzero)} with a constant "
                      f"passing some tests (max {max((v[0] for v in gate.baselines.values()), default=0):.2f})")
    stated = Table(title="Method stated in the question (rate per half and grader)", title_justify="left")
    graders = list(report.method_stated.get("train", {}))
    stated.add_column("half")
    for grader in graders:
        stated.add_column(grader)
    for split, row in report.method_stated.items():
        stated.add_row(split, *(f"{k}/{n} ({k / n:.0%})" if n else "-" for k, n in (row[g] for g in graders)))
    console.print(stated)
    wrong = report.wrong_hardware
    if wrong is not None:
        console.print(f"wrong-hardware check: passed, {wrong.items_checked} numeric items re-evaluated with other "
                      f"chips' constants ({wrong.variants_evaluated} variants); {len(wrong.train_coincidences)} "
                      f"train coincidences with GPU constants that no held-out item asks")
    if report.errata:
        console.print(f"errata recorded: {len(report.errata)} items ({', '.join(i for i, _ in report.errata)})")
    console.print(f"export: {report.export_dir if report.export_dir else 'skipped (--no-export)'}")
    console.print(f"took {elapsed_s:.1f} s")


def print_transfer_check(console: Console, result: Any, model: str, checkpoint: str | None,
                         step: int | None) -> None:
    """Each half's accuracy and interval, the per-grader table, the gap and the matched-grader gap."""
    report = result.report
    halves = Table(title=f"transfer check {result.transfer_check_id}: {model}"
                   + (f" @ {checkpoint}" if checkpoint else "") + (f" (step {step})" if step is not None else ""),
                   title_justify="left")
    for column in ("half", "run", "items", "rollouts", "truncated", "exact accuracy", "95% interval"):
        halves.add_column(column, justify="left" if column == "half" else "right")
    halves.add_row("train", str(result.runs["train"].run_id), str(report.train_items), str(report.train_rollouts),
                   str(result.runs["train"].truncated), f"{100 * report.train_accuracy:.1f}%",
                   fmt_interval(*interval_ends(report.train_interval), 100))
    halves.add_row("heldout", str(result.runs["heldout"].run_id), str(report.heldout_items),
                   str(report.heldout_rollouts), str(result.runs["heldout"].truncated),
                   f"{100 * report.heldout_accuracy:.1f}%", fmt_interval(*interval_ends(report.heldout_interval), 100))
    console.print(halves)
    labels = sorted({result.runs[half].isolation or "unknown" for half in ("train", "heldout")})
    console.print(f"code isolation: {_isolation_cell(' / '.join(labels))}")
    graders = Table(title="per grader (exact accuracy)", title_justify="left")
    for column in ("grader", "train items", "train", "heldout items", "heldout", "in"):
        graders.add_column(column, justify="left" if column in ("grader", "in") else "right")
    for row in report.per_grader:
        graders.add_row(row.grader, str(row.train_items),
                        "-" if row.train_accuracy is None else f"{100 * row.train_accuracy:.1f}%",
                        str(row.heldout_items),
                        "-" if row.heldout_accuracy is None else f"{100 * row.heldout_accuracy:.1f}%", row.status)
    console.print(graders)
    console.print(f"gap (train - heldout): [bold]{report.gap_points:+.1f} points[/bold] "
                  f"95% {fmt_interval(*interval_ends(report.gap_interval))}")
    if report.matched_gap_points is None:
        console.print("matched-grader gap: none (no grader is present in both halves)")
    else:
        console.print(f"matched-grader gap: [bold]{report.matched_gap_points:+.1f} points[/bold] "
                      f"95% {fmt_interval(*interval_ends(report.matched_gap_interval))}")
    for grader, status in report.unmatched.items():
        console.print(f"  grader {grader} is in the {status.replace(' only', '')} half only: "
                      "left out of the matched-grader gap")
    memorisation = getattr(result, "memorisation", None)
    if memorisation is not None:
        console.print(f"memorisation gap (original - variants, {memorisation.items} parametric train items, "
                      f"{memorisation.variants_per_item} variants each, run {result.runs['train_variants'].run_id}): "
                      f"[bold]{memorisation.gap_points:+.1f} points[/bold] "
                      f"95% {fmt_interval(*interval_ends(memorisation.interval))} "
                      f"(original {100 * memorisation.original_accuracy:.1f}%, "
                      f"variants {100 * memorisation.variant_accuracy:.1f}%)")


def print_history(console: Console, rows: list) -> None:
    """One row per completed transfer check: step, each half with its interval, gap, matched gap."""
    table = Table(title="transfer checks", title_justify="left")
    for column in ("id", "model", "checkpoint", "step", "train", "heldout", "truncated (train/heldout)",
                   "gap (pts)", "gap 95%", "matched (pts)", "matched 95%", "memorisation (pts)", "memorisation 95%",
                   "isolation"):
        table.add_column(column, justify="left" if column in ("model", "checkpoint") else "right")
    for r in rows:
        truncated = "-" if r.train_truncated is None else f"{r.train_truncated}/{r.heldout_truncated}"
        table.add_row(str(r.transfer_check_id), r.model, r.checkpoint or "-", "-" if r.step is None else str(r.step),
                      f"{100 * r.train_accuracy:.1f}% {fmt_interval(*r.train_ci, 100, 0)}",
                      f"{100 * r.heldout_accuracy:.1f}% {fmt_interval(*r.heldout_ci, 100, 0)}", truncated,
                      f"{r.gap_points:+.1f}", fmt_interval(*r.gap_ci),
                      "-" if r.matched_gap_points is None else f"{r.matched_gap_points:+.1f}",
                      fmt_interval(*r.matched_gap_ci),
                      "-" if r.memorisation_gap_points is None else f"{r.memorisation_gap_points:+.1f}",
                      fmt_interval(*r.memorisation_gap_ci), _isolation_cell(r.isolation))
    console.print(table)


def _isolation_cell(label: str) -> str:
    """The isolation label, in bold red unless code ran under bwrap (or the run predates the record)."""
    return label if label.startswith("bwrap") or label == "unknown" else f"[bold red]{label}[/bold red]"


STATUS_STYLE = {"complete": "green", "failed": "red", "interrupted": "yellow", "running": "cyan"}


def run_status_text(status: str, stale: bool) -> str:
    """A run's status for a table: `running (stale)` when its process is gone, coloured by status."""
    if stale:
        return "[bold red]running (stale)[/bold red]"
    return f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]"


def print_runs(console: Console, found: list) -> None:
    """Stored runs, newest first: (run, rollouts, mean exact, truncated, stale) rows."""
    table = Table(title="eval runs (newest first)", title_justify="left")
    for column in ("run", "model", "checkpoint", "step", "config", "status", "rollouts", "truncated", "exact",
                   "transfer check", "rescored from", "graders", "isolation"):
        table.add_column(column, justify="right" if column in ("run", "step", "rollouts", "truncated", "exact")
                         else "left")
    for run, n, exact, truncated, stale in found:
        table.add_row(str(run.id), run.model, run.checkpoint or "-", "-" if run.step is None else str(run.step),
                      run.config, run_status_text(run.status, stale), str(n), str(truncated),
                      "-" if exact is None else f"{exact:.3f}",
                      "-" if run.transfer_check_id is None else str(run.transfer_check_id),
                      "-" if run.rescored_from_run_id is None else str(run.rescored_from_run_id), run.grader_version,
                      _isolation_cell(run.isolation or "unknown"))
    console.print(table)


def print_comparison(console: Console, result: Any) -> None:
    """Items that flipped each way between two runs, the paired difference, and what was not compared."""
    run_a, run_b = result.run_a, result.run_b
    for key, (a, b) in (result.sampling_differences or {}).items():
        console.print(f"[yellow]warning:[/yellow] runs were sampled differently: {key} = {a} in run {run_a}, "
                      f"{b} in run {run_b}", highlight=False)
    console.print(f"runs {run_a} -> {run_b}: {result.common_items} common items; "
                  f"difference {result.difference_points:+.1f} points, paired 95% {fmt_interval(*result.interval)}")
    console.print(f"right in {run_b} only ({len(result.gained)}): {', '.join(result.gained) or '-'}")
    console.print(f"right in {run_a} only ({len(result.lost)}): {', '.join(result.lost) or '-'}")
    if result.changed_items:
        console.print(f"[yellow]not compared, item changed between the runs ({len(result.changed_items)}):[/yellow] "
                      + ", ".join(result.changed_items))
    for label, ids in ((f"only in run {run_a}", result.only_in_a), (f"only in run {run_b}", result.only_in_b)):
        if ids:
            console.print(f"{label} ({len(ids)}): {', '.join(ids)}")
