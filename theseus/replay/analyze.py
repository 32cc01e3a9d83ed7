"""Run one analysis on any checkpoint: ``theseus analyze ROOT NODE --analysis attention --layer 1 --head 0``.

`analyze` restores the checkpoint of a node (or of a run's last checkpoint, given its nonce) into
the run's own job class (its model and data, as `theseus.replay.verify` does: nothing the root
names is imported), computes the analysis on the first validation rows of the run's data with the
options given, and returns its `AnalysisResult`. Nothing is written to the root.

>>> import tempfile
>>> analyze(tempfile.mkdtemp(), "Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA", "optimizer")
Traceback (most recent call last):
...
theseus.errors.BadInput: unknown analysis part 'optimizer'; known: attention, logit-lens, norms
"""

from __future__ import annotations

import dataclasses
from typing import Any

from theseus.errors import BadInput
from theseus.replay.restore import restored_trainer
from theseus.store import Node, Store
from theseus.train.analyses.base import AnalysisResult, ArrayAnalysis
from theseus.train.parts import get_part

__all__ = ["analyze"]


def analyze(store: Store | str, node: str | Node, analysis: str, *, log: Any = None,
            **options: int | None) -> AnalysisResult:
    """The analysis registered as ``analysis`` of the checkpoint of ``node`` (an id or a nonce), with
    ``options`` (``layer``, ``head``, ``sample``: those the analysis takes; None: its default).

    Bad input (an unknown analysis or option, an option out of range, a malformed or unknown
    node, a node without a checkpoint, a run whose job is not registered here) is a ValueError.

    >>> import tempfile
    >>> analyze(tempfile.mkdtemp(), "949e88", "norms", layer=0)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: analysis 'norms' takes no option layer (it takes none)
    """
    store = store if isinstance(store, Store) else Store(store)
    part = get_part("analysis", analysis)
    if not (isinstance(part, type) and issubclass(part, ArrayAnalysis)):
        raise BadInput(f"analysis {analysis!r} computes nothing outside training (it is not an "
                         "theseus.train.analyses.ArrayAnalysis); run it with training.analyze")
    part.check_options(options)
    trainer = restored_trainer(store, node, log=log)
    try:
        def refuse(name: str, data: bytes) -> str:
            raise BadInput(f"theseus analyze writes nothing to the root (the analysis tried to write {name!r})")

        context = dataclasses.replace(trainer.context(trainer.step), write=refuse)
        return part.compute(context, **options)
    finally:
        trainer.close()
