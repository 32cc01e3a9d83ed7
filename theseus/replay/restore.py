"""A trainer restored from any checkpoint of a root: what ``theseus sample`` and ``theseus analyze`` start from.

A node id names that node's checkpoint; a nonce (6 hex characters) names that run's last
committed checkpoint. The trainer is the run's own job class (its parts and code overrides,
from the ``_job_source`` the run recorded: nothing named by the root is imported) built from
the checkpoint's ``config.yaml`` on this machine's devices; nothing is written to the root.

>>> import tempfile
>>> checkpoint_for(tempfile.mkdtemp(), "abc123")
Traceback (most recent call last):
...
theseus.errors.BadInput: run abc123 has no committed checkpoint in ...: there is no run with nonce 'abc123' ...
"""

from __future__ import annotations

import re
from typing import Any

from loguru import logger
from omegaconf import OmegaConf

from theseus.errors import BadInput
from theseus.jobs import get_job
from theseus.replay.verify import checkpoint_config, checkpoint_of, step_of
from theseus.store import EmptyResult, Node, Store, trust
from theseus.store.schema import JOB, JOB_SOURCE
from theseus.train.recipe import is_training
from theseus.train.trainer import Trainer

__all__ = ["checkpoint_for", "restored_trainer"]

_NONCE = re.compile(r"^[0-9a-f]{6}$")


def checkpoint_for(store: Store | str, target: str | Node) -> tuple[Node, str]:
    """``(node, checkpoint folder url)`` of a node id (that node's checkpoint) or a nonce (that run's last
    committed checkpoint); a clear ValueError for an unknown run or node, or one without a checkpoint.

    >>> import tempfile
    >>> checkpoint_for(tempfile.mkdtemp(), "not-an-id")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: malformed node id 'not-an-id': expected URL-safe base64 of 'name:nonce:seq'
    """
    store = store if isinstance(store, Store) else Store(store)
    if isinstance(target, str) and _NONCE.match(target):
        try:
            store.run_record(target)
        except EmptyResult:
            raise BadInput(f"run {target} has no committed checkpoint in {store.root}: there is no run with "
                             f"nonce {target!r} (`theseus ls {store.root}` lists the runs)") from None
        try:
            node = store.find().nonce(target).checkpoint().last()
        except EmptyResult:
            raise BadInput(f"run {target} has no committed checkpoint in {store.root}") from None
        return checkpoint_of(store, node)
    return checkpoint_of(store, target)


def restored_trainer(store: Store | str, target: str | Node, log: Any = None) -> Trainer:
    """The trainer of the run of ``target`` (a node id or nonce, see `checkpoint_for`) restored exactly from
    that checkpoint, built by the run's own job class from the checkpoint's config. A run that is not a
    training job, or whose job is not registered here, is a ValueError naming what to do.

    >>> import tempfile
    >>> restored_trainer(tempfile.mkdtemp(), "Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: no node Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA ...
    """
    store = store if isinstance(store, Store) else Store(store)
    node, folder = checkpoint_for(store, target)
    run = store.run_record(node.nonce, name=node.name)  # its own run, should another share the nonce
    recipe = get_job(run[JOB], run.get(JOB_SOURCE)) if run.get(JOB) else None
    if recipe is not None and not is_training(recipe):
        raise BadInput(f"node {node.id} is of a {run[JOB]} run, not a training job: it has no model to restore")
    config = checkpoint_config(node, folder)
    trust.plain_config(config, f"node {node.id} ({node.name}:{node.nonce}:{node.seq})")  # no tags, no resolvers
    config = OmegaConf.create(config)
    if OmegaConf.select(config, "training.per_device_batch_size") == -1:
        config.training.per_device_batch_size = 1  # sampling runs no train step: nothing to probe a size for
    # peak_flops NaN: no CPU peak is measured (or cached into the root) to sample
    trainer = Trainer(config, store.root, recipe=recipe, log=log or logger, peak_flops=float("nan"), progress=False)
    try:  # the folder checked as it is read, and checked to be this node's own (not a swapped one)
        trainer.restore(folder, partial=False, node=node, step=step_of(store, node))
        frozen = getattr(recipe, "restore_frozen", None)  # a job over a frozen base (LoRA) reads the base back
        if frozen is not None:
            frozen(trainer, store)
    except BaseException:
        trainer.close()
        raise
    return trainer
