"""A rich progress bar for training: steps, loss, tokens/s; silent when not on a terminal.

>>> with TrainProgress(total=10, start=0, enabled=False) as bar:
...     bar.update(1, loss=2.5, tokens_per_second=1000.0)
>>> bar.step
1
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class TrainProgress:
    """Progress of steps ``start..total`` with the last loss and throughput.

    ``enabled=None`` shows the bar only when stderr is a terminal. Use it as a
    context manager; ``update(step, loss=, tokens_per_second=)`` moves it.

    >>> bar = TrainProgress(total=4, enabled=False)
    >>> with bar:
    ...     bar.update(2, loss=1.0)
    >>> bar.loss
    1.0
    """

    def __init__(self, total: int, start: int = 0, enabled: bool | None = None, description: str = "train"):
        console = Console(file=sys.stderr)
        self.enabled = console.is_terminal if enabled is None else bool(enabled)
        self.total, self.step = int(total), int(start)
        self.loss: float | None = None
        self.tokens_per_second: float | None = None
        self._progress: Progress | None = None
        self._task: Any = None
        self._console = console
        self._description = description

    def __enter__(self) -> TrainProgress:
        if self.enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"),
                TextColumn("{task.fields[tps]} tok/s"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=self._console,
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                self._description, total=self.total, completed=self.step, loss="-", tps="-"
            )
        return self

    def update(self, step: int, loss: float | None = None, tokens_per_second: float | None = None) -> None:
        """Show ``step`` done, with the latest loss / tokens per second when given."""
        self.step = int(step)
        if loss is not None:
            self.loss = float(loss)
        if tokens_per_second is not None:
            self.tokens_per_second = float(tokens_per_second)
        if self._progress is not None:
            self._progress.update(
                self._task,
                completed=self.step,
                loss="-" if self.loss is None else f"{self.loss:.4f}",
                tps="-" if self.tokens_per_second is None else f"{self.tokens_per_second:,.0f}",
            )

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
