"""Run one analysis on any checkpoint: ``theseus analyze ROOT NODE --analysis attention --layer 1 --head 0``.

`analyze` restores the checkpoint of a node (or of a run's last checkpoint, given its nonce) into
the run's own job class (its model and data, as `theseus.replay.verify` does: nothing the root
names is imported), computes the analysis on the first validation rows of the run's data with the
options given, and returns its `AnalysisResult`. Nothing is written to the root.

>>> import tempfile
>>> analyze(tempfile.mkdtemp(), "Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA", "optimizer")
Traceback (most recent call last):
...
ValueError: unknown analysis part 'optimizer'; known: attention, logit-lens, norms
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import fsspec
from loguru import logger

from theseus.jobs import get_job
from theseus.replay.verify import checkpoint_of
from theseus.store import EmptyResult, Node, Store, trust
from theseus.store.layout import CONFIG_FILE
from theseus.store.schema import JOB, JOB_SOURCE
from theseus.train.analyses.base import AnalysisResult, ArrayAnalysis
from theseus.train.parts import get_part
from theseus.train.trainer import Trainer

__all__ = ["analyze", "node_of"]

_NONCE = re.compile(r"^[0-9a-f]{6}$")


def node_of(store: Store, node: str | Node) -> Node:
    """The node a command names: a node id, or a run's nonce (6 hex characters) for its last checkpoint.

    >>> import tempfile
    >>> node_of(Store(tempfile.mkdtemp()), "949e88")
    Traceback (most recent call last):
    ...
    ValueError: run 949e88 has no committed checkpoint in ...
    """
    if isinstance(node, Node) or not _NONCE.match(str(node)):
        return node if isinstance(node, Node) else Node.from_id(str(node))
    try:
        return store.find().nonce(str(node)).checkpoint().last()
    except EmptyResult:
        raise ValueError(f"run {node} has no committed checkpoint in {store.root}; `theseus ls {store.root}` "
                         "lists the runs") from None


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
    ValueError: analysis 'norms' takes no option layer (it takes none)
    """
    store = store if isinstance(store, Store) else Store(store)
    part = get_part("analysis", analysis)
    if not (isinstance(part, type) and issubclass(part, ArrayAnalysis)):
        raise ValueError(f"analysis {analysis!r} computes nothing outside training (it is not an "
                         "theseus.train.analyses.ArrayAnalysis); run it with training.analyze")
    part.check_options(options)
    node, folder = checkpoint_of(store, node_of(store, node))
    run = store.run_record(node.nonce)
    recipe = get_job(run[JOB], run.get(JOB_SOURCE)) if run.get(JOB) else None
    with fsspec.open(f"{folder}/{CONFIG_FILE}", "r") as f:
        config = f.read()
    trust.plain_config(config, f"node {node.id} ({node.name}:{node.nonce}:{node.seq})")  # no tags, no resolvers
    # peak_flops NaN: no CPU peak is measured (or cached into the root) for an analysis
    trainer = Trainer(config, store.root, recipe=recipe, log=log or logger, peak_flops=float("nan"), progress=False)
    try:
        trainer.restore(folder, partial=False)

        def refuse(name: str, data: bytes) -> str:
            raise ValueError(f"theseus analyze writes nothing to the root (the analysis tried to write {name!r})")

        context = dataclasses.replace(trainer._context(trainer.step), write=refuse)
        return part.compute(context, **options)
    finally:
        trainer.close()
