"""How every ``theseus`` command reports bad input: one red line on stderr and an exit code.

>>> import typer
>>> try:
...     fail("no run 'abc123' in /tmp/root", 2)
... except typer.Exit as e:
...     e.exit_code
2
"""

from __future__ import annotations

import functools
from typing import Callable

import typer
from rich.console import Console
from rich.markup import escape

# Errors that mean "bad input": a clear message and exit code 2, no traceback.
BAD_INPUT = (KeyError, ValueError, TypeError, FileNotFoundError, FileExistsError, NotImplementedError)
# Errors of a root a command cannot use (missing, corrupt, read-only, unreadable): bad input too.
ROOT_ERRORS = (*BAD_INPUT, OSError)


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


def message(error: Exception) -> str:
    """The ``error:`` line of an exception: bad input says what is wrong by itself, other errors
    (PermissionError, OSError) are named.

    >>> message(ValueError("bad nonce")), message(PermissionError(13, "Permission denied", "/r/log"))
    ('bad nonce', "PermissionError: [Errno 13] Permission denied: '/r/log'")
    """
    return str(error) if isinstance(error, BAD_INPUT) else f"{type(error).__name__}: {error}"


def reported(command: Callable) -> Callable:
    """``command`` ending with one ``error:`` line and exit code 2, not a traceback, on :data:`ROOT_ERRORS`.

    >>> def ls(root: str) -> None:
    ...     raise PermissionError(13, "Permission denied", root + "/log")
    >>> try:
    ...     reported(ls)("/r")
    ... except typer.Exit as e:
    ...     e.exit_code
    2
    """

    @functools.wraps(command)  # typer reads the wrapped command's parameters and help
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except ROOT_ERRORS as e:
            fail(message(e), 2)

    return run


def log_to_stderr(level: str) -> None:
    """Set the command's log level (``theseus.logs.setup``); an unknown level is bad input
    (one ``error:`` line, exit 2), found before any handler is replaced.

    >>> try:
    ...     log_to_stderr("chatty")
    ... except typer.Exit as e:
    ...     print(e.exit_code)
    2
    """
    from theseus import logs

    try:
        logs.setup(level)
    except ValueError as e:
        fail(f"--log-level: {e}", 2)
