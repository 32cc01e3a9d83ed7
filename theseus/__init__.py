"""theseus: a JAX language-model trainer on an event-sourced store.

Each name is imported when first used, so a light part of the package (the store, the
``theseus`` command's listings) loads none of the others' dependencies.

>>> import theseus.quick   # the submodule: ``theseus.quick`` stays the function
>>> from theseus import Store, Node, quick, init
>>> Node.start("doc-run").seq, quick.__name__, theseus.quick is quick
(0, 'quick', True)
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = ["Store", "Node", "quick", "init"]

#: Where each public name lives.
_HOMES = {"Store": "theseus.store", "Node": "theseus.store", "quick": "theseus.quick", "init": "theseus.quick"}


def __getattr__(name: str) -> Any:
    """A public name, imported on first use (``theseus.quick`` loads OmegaConf and loguru, which the
    command's listings do not need).

    >>> from theseus.store import Store
    >>> __getattr__("Store") is Store
    True
    >>> __getattr__("Stores")
    Traceback (most recent call last):
    ...
    AttributeError: module 'theseus' has no attribute 'Stores'
    """
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'theseus' has no attribute {name!r}")


class _Package(types.ModuleType):
    """The package's module type: importing the submodule ``theseus.quick`` leaves the name ``quick`` to the
    function, as ``from theseus import quick`` has always meant."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "quick" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __dir__() -> list[str]:
    """The module's names, the lazy ones included.

    >>> "quick" in __dir__()
    True
    """
    return sorted({*globals(), *__all__})
