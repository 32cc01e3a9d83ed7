"""Training: jobs composed of parts (model, data, optimizer, schedule, loss, evaluations, analyses), the trainer
that runs them.

The names an experiment file needs::

    from theseus.train import Pretrain, Sampling, analyses, optimizers, schedules

``Pretrain`` is the registered job ``gpt/train/pretrain``; subclass it and replace parts
(see `theseus.train.recipe`). Each name is imported when first asked for, so a light
submodule (``theseus.train.parts``) loads without JAX.

>>> import theseus.train
>>> theseus.train.Pretrain.key, theseus.train.optimizers.AdamW.name
('gpt/train/pretrain', 'adamw')
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Pretrain", "Recipe", "Sampling", "analyses", "evaluations", "losses", "models", "optimizers", "schedules"]

#: Where each public name lives (the submodules name themselves).
_HOMES = {"Pretrain": "theseus.train.jobs", "Recipe": "theseus.train.recipe", "Sampling": "theseus.train.recipe"}


def __getattr__(name: str) -> Any:
    """A public name, imported on first use: its module loads JAX, which the CLI's light commands must not.

    >>> from theseus.train.recipe import Recipe
    >>> __getattr__("Recipe") is Recipe, __getattr__("schedules").__name__
    (True, 'theseus.train.schedules')
    >>> __getattr__("Recipes")
    Traceback (most recent call last):
    ...
    AttributeError: module 'theseus.train' has no attribute 'Recipes'
    """
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    if name in __all__:
        return importlib.import_module(f"theseus.train.{name}")
    raise AttributeError(f"module 'theseus.train' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names, the lazy ones included (for completion and ``dir()``).

    >>> "Pretrain" in __dir__()
    True
    """
    return sorted({*globals(), *__all__})
