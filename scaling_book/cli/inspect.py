"""`scaling-book items`, `items show`, `show` and `export-run`: looking at the items and at stored results.

All four only read (the export, or the store, which may be read-only).
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from scaling_book.cli.app import (
    EXIT_MISSING,
    EXIT_USAGE,
    DbOption,
    ExportOption,
    app,
    check_config,
    console,
    err,
    open_for_reading,
)
from scaling_book.paths import export_dir

items_app = typer.Typer(help="List the exported items, or show one as the model sees it.", invoke_without_command=True)
app.add_typer(items_app, name="items")


def _rows(config: str, export_from: Path | None) -> list[dict]:
    from scaling_book.environment.taskset import read_rows

    check_config(config)
    try:
        return read_rows(config, export_dir(export_from))
    except (FileNotFoundError, ValueError) as exc:
        err.print(f"[bold red]{exc}[/bold red]")
        raise typer.Exit(EXIT_MISSING) from None


@items_app.callback()
def items(
    ctx: typer.Context,
    config: Annotated[str, typer.Option("--config", help="Exported config to list.")] = "all",
    export_from: ExportOption = None,
) -> None:
    """List the items of an exported config: id, chapter, section, grader, split."""
    if ctx.invoked_subcommand is not None:
        return
    rows = sorted(_rows(config, export_from), key=lambda row: row["id"])
    table = Table(title=f"items of config {config} ({len(rows)})", title_justify="left")
    for column in ("id", "chapter", "section", "grader", "split"):
        table.add_column(column, justify="right" if column == "chapter" else "left")
    for row in rows:
        info = row["info"]
        table.add_row(row["id"], str(info.get("chapter")), str(info.get("section", "")), info["grader"], info["split"])
    console.print(table)


@items_app.command("show")
def items_show(
    item_id: Annotated[str, typer.Argument(help="Item id, e.g. ch01-... (see `scaling-book items`).")],
    export_from: ExportOption = None,
) -> None:
    """Print one item as the model sees it (system and user messages), then its key."""
    found = next((row for row in _rows("all", export_from) if row["id"] == item_id), None)
    if found is None:
        err.print(f"[bold red]no item {item_id!r} in the export[/bold red] (see `scaling-book items`)")
        raise typer.Exit(EXIT_MISSING)
    for message in found["prompt"]:
        console.rule(f"[bold]{message['role']}[/bold]")
        console.print(message["content"], markup=False, highlight=False)
    console.rule("[bold]key[/bold]")
    console.print(f"answer: {found['answer']}", markup=False, highlight=False)
    info = {k: v for k, v in found["info"].items() if v not in (None, "", [], {})}
    console.print(json.dumps(info, indent=2, sort_keys=True, default=str), markup=False, highlight=False)


def _stored(run: int, db: str | None):
    from sqlalchemy import select

    from scaling_book.store import make_session_factory
    from scaling_book.store.tracking import EvalRun, RolloutResult

    engine = open_for_reading(db)
    try:
        with make_session_factory(engine)() as session:
            stored = session.get(EvalRun, run)
            if stored is None:
                err.print(f"[bold red]no eval run with id {run}[/bold red] (see `scaling-book runs`)")
                raise typer.Exit(EXIT_MISSING)
            rollouts = list(session.scalars(select(RolloutResult).where(RolloutResult.run_id == run)
                                            .order_by(RolloutResult.item_id, RolloutResult.rollout_index)))
        return stored, rollouts
    finally:
        engine.dispose()


@app.command()
def show(
    run: Annotated[int, typer.Argument(help="Id of the stored run.")],
    item: Annotated[Optional[str], typer.Option("--item", help="Only this item's rollouts.")] = None,
    wrong: Annotated[bool, typer.Option("--wrong", help="Only rollouts without full credit.")] = False,
    db: DbOption = None,
) -> None:
    """Print a run's rollouts: status, finish reason, scores, the grader's reason (what it extracted) and
    the visible reply."""
    stored, rollouts = _stored(run, db)
    picked = [r for r in rollouts if (item is None or r.item_id == item) and (not wrong or not r.exact)]
    console.print(f"run {stored.id}: {stored.model} on {stored.config}, {stored.status}, sampling "
                  f"{stored.sampling_json}; {len(picked)} of {len(rollouts)} rollouts shown", highlight=False)
    for r in picked:
        console.rule(f"{r.item_id} #{r.rollout_index}  {r.status}  exact {r.exact}  correctness {r.correctness:.2f}  "
                     f"finish {r.finish_reason or '-'}", style="dim")
        if r.reason:
            console.print(f"grader: {r.reason}", markup=False, highlight=False)
        if r.error:
            console.print(f"error: {r.error}", markup=False, highlight=False, style="red")
        if r.reasoning_chars:
            console.print(f"(reasoning: {r.reasoning_chars} characters, not graded)", highlight=False, style="dim")
        console.print(r.response if r.response is not None else "(no reply)", markup=False, highlight=False)


EXPORT_COLUMNS = ("run_id", "model", "config", "item_id", "rollout_index", "split", "grader", "item_content_hash",
                  "status", "finish_reason", "correctness", "format", "exact", "reward", "reason", "error", "response",
                  "reasoning", "reasoning_chars")


@app.command("export-run")
def export_run(
    run: Annotated[int, typer.Argument(help="Id of the stored run.")],
    format: Annotated[str, typer.Option("--format", help="jsonl or csv.")] = "jsonl",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="File to write (default: stdout).")] = None,
    db: DbOption = None,
) -> None:
    """Write one row per rollout with its stored columns (and the run's model and config) as JSON lines or CSV."""
    if format not in ("jsonl", "csv"):
        err.print(f"[bold red]--format must be jsonl or csv, not {format!r}[/bold red]")
        raise typer.Exit(EXIT_USAGE)
    stored, rollouts = _stored(run, db)
    records = [{column: (stored.model if column == "model" else stored.config if column == "config"
                         else getattr(r, column)) for column in EXPORT_COLUMNS} for r in rollouts]
    stream = output.open("w", encoding="utf-8", newline="") if output else sys.stdout
    try:
        if format == "jsonl":
            for record in records:
                stream.write(json.dumps(record, ensure_ascii=False) + "\n")
        else:
            writer = csv.DictWriter(stream, fieldnames=EXPORT_COLUMNS)
            writer.writeheader()
            writer.writerows(records)
    finally:
        if output:
            stream.close()
    if output:
        err.print(f"{len(records)} rollouts of run {run} written to {output}")
