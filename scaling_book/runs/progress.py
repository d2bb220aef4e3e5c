"""Progress of a run on the console: a live bar on a terminal, plain lines in a log."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)


class ProgressReporter:
    """Progress on the console: a live bar on a terminal, else one line every `every` rollouts or
    `LINE_EVERY_S` seconds, whichever comes first."""

    LINE_EVERY_S = 30.0

    def __init__(self, console: Console, label: str) -> None:
        self.console, self.label = console, label
        self.started = self.last_line = time.monotonic()
        self.last_done = 0
        self.live = console.is_terminal
        self.progress = Progress(TextColumn(f"[bold]{label}[/bold] rollouts"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, transient=True) if self.live else None
        self.task = None

    def __enter__(self) -> ProgressReporter:
        if self.progress is not None:
            self.progress.__enter__()
            self.task = self.progress.add_task("rollouts", total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.__exit__(None, None, None)

    def update(self, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=done, total=total)
            return
        every = max(1, total // 10)
        now = time.monotonic()
        if done and (done == total or done - self.last_done >= every or now - self.last_line >= self.LINE_EVERY_S):
            self.console.print(f"{self.label}: {done}/{total} rollouts, {now - self.started:.1f} s", highlight=False)
            self.last_done, self.last_line = done, now
