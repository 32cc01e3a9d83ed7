"""Sample from any checkpoint: a node id or a nonce resolved to its checkpoint, the run's trainer restored from it.

``theseus sample ROOT NODE_ID|NONCE "prompt"``: a nonce means that run's last committed
checkpoint. The trainer is the run's own job class (its parts and code overrides, from
the ``_job_source`` the run recorded: nothing named by the root is imported) built from the
checkpoint's ``config.yaml`` on this machine's devices; nothing is written to the root.

>>> import tempfile
>>> checkpoint_for(tempfile.mkdtemp(), "abc123")
Traceback (most recent call last):
...
ValueError: no run with nonce 'abc123' in ...
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import fsspec
from loguru import logger
from omegaconf import OmegaConf

from theseus.jobs import get_job
from theseus.replay.verify import checkpoint_of
from theseus.store import EmptyResult, Node, Store, trust
from theseus.store.layout import CONFIG_FILE
from theseus.store.schema import JOB, JOB_SOURCE
from theseus.train.generate import Sample
from theseus.train.recipe import Recipe
from theseus.train.trainer import Trainer

__all__ = ["checkpoint_for", "restored_trainer", "sample"]

_NONCE = re.compile(r"^[0-9a-f]{6}$")
#: new tokens of a sample when none are asked for (fewer when the model's block size is shorter)
DEFAULT_NEW_TOKENS = 64


def checkpoint_for(store: Store | str, target: str | Node) -> tuple[Node, str]:
    """``(node, checkpoint folder url)`` of a node id (that node's checkpoint) or a nonce (that run's last
    committed checkpoint); a clear ValueError for an unknown run or node, or one without a checkpoint.

    >>> import tempfile
    >>> checkpoint_for(tempfile.mkdtemp(), "not-an-id")
    Traceback (most recent call last):
    ...
    ValueError: malformed node id 'not-an-id': expected URL-safe base64 of 'name:nonce:seq'
    """
    store = store if isinstance(store, Store) else Store(store)
    if isinstance(target, str) and _NONCE.match(target):
        try:
            store.run_record(target)
        except EmptyResult:
            raise ValueError(f"no run with nonce {target!r} in {store.root}; `theseus ls {store.root}` lists "
                             "the runs") from None
        try:
            node = store.find().nonce(target).checkpoint().last()
        except EmptyResult:
            raise ValueError(f"run {target} has no committed checkpoint in {store.root}") from None
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
    ValueError: no node Z2VuZXJhbC5kZWZhdWx0LnRyYWluLWdwdDo5NDllODg6MA (general.default.train-gpt:949e88:0) in ...
    """
    store = store if isinstance(store, Store) else Store(store)
    node, folder = checkpoint_for(store, target)
    run = store.run_record(node.nonce)
    recipe = get_job(run[JOB], run.get(JOB_SOURCE)) if run.get(JOB) else None
    if recipe is not None and not issubclass(recipe, Recipe):
        raise ValueError(f"node {node.id} is of a {run[JOB]} run, not a training job: nothing to sample from")
    with fsspec.open(f"{folder}/{CONFIG_FILE}", "r") as f:
        config = f.read()
    trust.plain_config(config, f"node {node.id} ({node.name}:{node.nonce}:{node.seq})")  # no tags, no resolvers
    config = OmegaConf.create(config)
    if OmegaConf.select(config, "training.per_device_batch_size") == -1:
        config.training.per_device_batch_size = 1  # sampling runs no train step: nothing to probe a size for
    # peak_flops NaN: no CPU peak is measured (or cached into the root) to sample
    trainer = Trainer(config, store.root, recipe=recipe, log=log or logger, peak_flops=float("nan"), progress=False)
    trainer.restore(folder, partial=False)
    return trainer


def sample(store: Store | str, target: str | Node, prompt: str, n: int = 1, *, max_new_tokens: int | None = None,
           temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
           stop: str | Sequence[str] | None = None, log: Any = None) -> tuple[Node, list[Sample]]:
    """``n`` samples continuing ``prompt`` from the checkpoint of ``target`` (node id or nonce) and that node.

    ``max_new_tokens`` None: `DEFAULT_NEW_TOKENS`, or as many as the model's block size leaves
    after the prompt. Sample i draws with the keys of (``seed``, i).

    >>> import tempfile
    >>> sample(tempfile.mkdtemp(), "abc123", "")
    Traceback (most recent call last):
    ...
    ValueError: the prompt is empty: give some text to continue
    """
    if not isinstance(prompt, str) or not prompt:
        raise ValueError("the prompt is empty: give some text to continue")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"the number of samples must be a positive integer, got {n!r}")
    store = store if isinstance(store, Store) else Store(store)
    node, _ = checkpoint_for(store, target)
    trainer = restored_trainer(store, node, log=log)
    try:
        if max_new_tokens is None:
            room = trainer.block_size - len(trainer.tokenizer.encode(prompt))
            max_new_tokens = min(DEFAULT_NEW_TOKENS, room) if room > 0 else DEFAULT_NEW_TOKENS  # none left: its error
        samples = trainer.generate([prompt] * n, max_new_tokens=max_new_tokens, temperature=temperature,
                                   top_k=top_k, top_p=top_p, seed=seed, stop=stop)
    finally:
        trainer.close()
    return node, samples
