"""How every ``theseus`` command reports bad input: one red line on stderr and an exit code.

>>> import typer
>>> try:
...     fail("no run 'abc123' in /tmp/root", 2)
... except typer.Exit as e:
...     e.exit_code
2
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

# Errors that mean "bad input": a clear message and exit code 2, no traceback.
BAD_INPUT = (KeyError, ValueError, TypeError, FileNotFoundError, FileExistsError, NotImplementedError)


def fail(message: str, code: int = 2) -> None:
    """Print ``error: message`` on stderr and exit with ``code`` (2: bad input; 1: the run failed).

    >>> import typer
    >>> try:
    ...     fail("unknown key", 1)
    ... except typer.Exit as e:
    ...     e.exit_code
    1
    """
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/bold red] {escape(message)}")
    raise typer.Exit(code)
