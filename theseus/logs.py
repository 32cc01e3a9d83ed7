"""Loguru setup for the ``theseus`` command.

Library code only calls ``loguru.logger``; applications decide where lines go.
``setup()`` sends them to the *current* ``sys.stderr`` (so rich progress bars and
test runners that swap stderr see them) in loguru's default format, at ``level``.

>>> import io, sys
>>> setup("INFO")  # doctest: +SKIP
"""

from __future__ import annotations

import os
import sys

from loguru import logger

from theseus.errors import BadInput

__all__ = ["FORMAT", "logger", "setup"]

FORMAT = (
    "<green>{time:YYYY-MM-DD HH:mm:ss.SSS}</green> | <level>{level: <8}</level> | "
    "<cyan>{name}</cyan>:<cyan>{function}</cyan>:<cyan>{line}</cyan> - <level>{message}</level>"
)

_handler: int | None = None

LEVELS = ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL")  # loguru's own


def setup(level: str | None = None) -> None:
    """Route loguru to the current stderr at ``level`` (default ``$THESEUS_LOG_LEVEL`` or DEBUG).

    Replaces loguru's default handler (and this function's earlier one).

    A level loguru does not know is a ValueError naming it, raised before the handler is
    replaced (so the earlier handler stays).

    >>> setup("WARNING"); setup("DEBUG")  # idempotent: one handler
    >>> setup("chatty")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: unknown log level 'CHATTY' (TRACE, DEBUG, INFO, SUCCESS, WARNING, ERROR, CRITICAL)
    """
    global _handler
    level = (level or os.environ.get("THESEUS_LOG_LEVEL") or "DEBUG").upper()
    try:
        logger.level(level)
    except ValueError:
        raise BadInput(f"unknown log level {level!r} ({', '.join(LEVELS)})") from None
    try:
        logger.remove(0)  # loguru's default handler, bound to the stderr of import time
    except ValueError:
        pass
    if _handler is not None:
        logger.remove(_handler)
    _handler = logger.add(lambda message: sys.stderr.write(message), level=level, format=FORMAT,
                          colorize=sys.stderr.isatty())
