"""Checks every docs test shares: a module's docstring examples run, and its public names have one."""

from __future__ import annotations

import doctest
import importlib
import inspect


def examples_fail(name: str) -> tuple[int, int]:
    """(failed, attempted) of module ``name``'s docstring examples, run with ELLIPSIS.

    >>> examples_fail("theseus.store.layout")[0]
    0
    """
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    return result.failed, result.attempted


def names_without_examples(name: str) -> list[str]:
    """The public functions and classes defined in module ``name`` whose docstring has no example.

    >>> names_without_examples("tests.docstrings")
    []
    """
    module = importlib.import_module(name)
    return [attr for attr, obj in vars(module).items()
            if not attr.startswith("_") and getattr(obj, "__module__", None) == name
            and (inspect.isfunction(obj) or inspect.isclass(obj)) and ">>>" not in (obj.__doc__ or "")]
