"""How every ``theseus`` command reports an error: one red line on stderr and an exit code.

The error family's kinds (:mod:`theseus.errors`: bad input, not found, corrupt or refused data)
and a root the OS refuses (``OSError``) are reported so, exit 2; another error of the family (a
launch that failed, a host that did not answer, a flush the disk refused) exit 1. Anything else is
a bug, not the caller's mistake: :func:`bug` prints its traceback and exits :data:`EXIT_BUG` (70).

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
# kinds (not its base, which also carries failures of the outside world: a launch that failed, a
# host that did not answer). A builtin KeyError, TypeError or NotImplementedError is not one:
# raised by no check, it is a bug (EXIT_BUG). A plain ValueError still is, until the checks that
# raise one raise BadInput.
BAD_INPUT = (BadInput, NotFound, CorruptData, Refused, ValueError, FileNotFoundError, FileExistsError)
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
        except ROOT_ERRORS as e:
            fail(message(e), 2)
        except TheseusError as e:  # the outside world failed (a launch, a host, a flush): not a bug
            fail(f"{type(e).__name__}: {e}", 1)
        except Exception as e:  # noqa: BLE001 - not raised by a check: a bug, reported as one
            bug(e)

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
