"""How every ``theseus`` command reports an error: one red line on stderr and an exit code.

The error family's kinds (:mod:`theseus.errors`: bad input, not found, corrupt or refused data)
and a root the OS refuses (``OSError``) are reported so, exit 2; another error of the family (a
launch that failed, a host that did not answer, a flush the disk refused) exit 1. Anything else is
a bug, not the caller's mistake: :func:`bug` prints its traceback and exits :data:`EXIT_BUG` (70).
:func:`report` is that mapping, the only one: ``reported`` commands and the command group use it.

>>> import typer
>>> try:
...     fail("no run 'abc123' in /tmp/root", 2)
... except typer.Exit as e:
...     e.exit_code
2
"""

from __future__ import annotations

import functools
import traceback
from typing import Callable, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from theseus.errors import EXIT_BUG, BadInput, CorruptData, NotFound, Refused, TheseusError

# Errors that mean "bad input": a clear message and exit code 2, no traceback: the error family's
# kinds only (not its base, which also carries failures of the outside world: a launch that failed,
# a host that did not answer). No builtin is one: a ValueError, KeyError or FileNotFoundError that
# no check wrapped in a kind is a bug (EXIT_BUG), so a check that misses a case shows as one.
BAD_INPUT = (BadInput, NotFound, CorruptData, Refused)
# Errors of a root a command cannot use: the kinds, and an OSError, which is the OS answering about
# the root the caller named (read-only, unreadable, a disk error): the outside world, never a logic
# bug, so one line naming the error and exit 2, as the root given cannot be used.
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


def bug(error: BaseException) -> NoReturn:
    """Report ``error``, which no check raised, as a bug: its traceback on stderr and exit :data:`EXIT_BUG`.

    >>> import contextlib, io
    >>> with contextlib.redirect_stderr(io.StringIO()) as err:
    ...     try:
    ...         raise KeyError("step")
    ...     except KeyError as e:
    ...         try:
    ...             bug(e)
    ...         except typer.Exit as exit:
    ...             code = exit.exit_code
    >>> code, "Traceback" in err.getvalue() and "KeyError: 'step'" in err.getvalue()
    (70, True)
    """
    traceback.print_exception(error)
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"[bold red]internal error:[/bold red] {escape(type(error).__name__)} is a bug in theseus, not bad input "
        f"(exit {EXIT_BUG})")
    raise typer.Exit(EXIT_BUG)


def message(error: Exception) -> str:
    """The ``error:`` line of an exception: bad input says what is wrong by itself, other errors
    (PermissionError, OSError) are named.

    >>> from theseus.errors import BadInput
    >>> message(BadInput("bad nonce")), message(PermissionError(13, "Permission denied", "/r/log"))
    ('bad nonce', "PermissionError: [Errno 13] Permission denied: '/r/log'")
    """
    return str(error) if isinstance(error, BAD_INPUT) else f"{type(error).__name__}: {error}"


def reported(command: Callable) -> Callable:
    """``command`` ending with one ``error:`` line and exit code 2, not a traceback, on :data:`ROOT_ERRORS`;
    with a traceback and exit code :data:`EXIT_BUG` on any other error (a bug).

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
        except (typer.Exit, typer.Abort):  # the command's own exit code (fail's)
            raise
        except Exception as e:  # noqa: BLE001 - report() tells a check's error from a bug
            report(e)

    return run


def report(error: Exception) -> NoReturn:
    """End the command on ``error``: one ``error:`` line and exit 2 for :data:`ROOT_ERRORS`, exit 1
    for another :class:`~theseus.errors.TheseusError` (the outside world failed: a launch, a host, a
    flush), and a bug's traceback and exit :data:`EXIT_BUG` for anything else.

    >>> from theseus.errors import NotFound
    >>> def code(error):
    ...     try:
    ...         report(error)
    ...     except typer.Exit as e:
    ...         return e.exit_code
    >>> import contextlib, io
    >>> with contextlib.redirect_stderr(io.StringIO()):
    ...     codes = code(NotFound("no run abcdef")), code(TheseusError("host down")), code(ValueError("a bug"))
    >>> codes
    (2, 1, 70)
    """
    if isinstance(error, ROOT_ERRORS):
        fail(message(error), 2)
    if isinstance(error, TheseusError):
        fail(f"{type(error).__name__}: {error}", 1)
    bug(error)


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
    except BadInput as e:
        fail(f"--log-level: {e}", 2)
