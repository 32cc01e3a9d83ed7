"""``training.init_from``: a training job started from another checkpoint's parameters.

The job runs on a new lineage whose first node's parent is the source node, from step 0 with a fresh
optimizer and base key; the architecture and the tokenizer are the source's (its checkpoint's
``config.yaml``). A key of ``architecture`` set to another value than the source's is kept when the
parameters keep their shapes (``dropout``, the dtypes) and is an error naming the key when they would not.

>>> import tempfile
>>> from theseus.store import Store
>>> source_of(Store(tempfile.mkdtemp()), "abc123")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
theseus.errors.BadInput: training.init_from=abc123: there is no run with nonce 'abc123' in ...
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError

from theseus.errors import BadInput
from theseus.store import EmptyResult, Node, Store, trust
from theseus.store import fs as rootfs
from theseus.store.layout import CONFIG_FILE
from theseus.store.schema import CHECKPOINT
from theseus.train import manifest as mf

__all__ = ["adopt", "source_of"]

_NONCE = re.compile(r"^[0-9a-f]{6}$")
#: the sections a job takes from its source: what the parameters were trained with
ADOPTED = ("architecture", "tokenizer")


def source_of(store: Store, target: str) -> tuple[Node, str, dict]:
    """``(node, checkpoint folder url, its config)`` of ``training.init_from``: a node id with a checkpoint, or a
    nonce (that run's last committed checkpoint); a ValueError naming the setting otherwise."""
    setting = f"training.init_from={target}"
    try:
        if _NONCE.match(target):
            try:
                node = store.find().nonce(target).checkpoint().last()
            except EmptyResult:
                raise BadInput(f"{setting}: there is no run with nonce {target!r} in {store.root}, or it has no "
                                 "committed checkpoint") from None
        else:
            node = Node.from_id(target)
        record = store.record(node)
    except EmptyResult:
        raise BadInput(f"{setting}: no such node in {store.root}") from None
    path = record.get(CHECKPOINT)
    if not path:
        raise BadInput(f"{setting}: node {node.id} has no committed checkpoint; query with .checkpoint() to pick "
                         "one that has")
    try:  # the rule audit applies: only a folder inside the root is followed
        folder = rootfs.url(store.fs, trust.checkpoint_folder(store.fs, store.path(), path))
    except ValueError as e:
        raise BadInput(f"{setting}: {e}") from None
    text = bytes(mf.Sealed(folder).read(CONFIG_FILE)).decode()
    trust.plain_config(text, f"node {node.id}")  # no tags, no resolvers: a root is data
    config = yaml.safe_load(text)
    if not isinstance(config, dict) or not all(isinstance(config.get(s), dict) for s in ADOPTED):
        raise BadInput(f"{setting}: the checkpoint of node {node.id} records no {' and '.join(ADOPTED)}")
    return node, folder, config


def _shapes(recipe: Any, config: DictConfig) -> dict[str, tuple[int, ...]]:
    """The shape of every parameter of ``recipe``'s model built from ``config`` (abstract: no memory)."""
    model = recipe.model(config)
    params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros((1, 1), jnp.int32))["params"])
    return {jax.tree_util.keystr(path): leaf.shape for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]}


def _dotted(tree: Any, prefix: str) -> dict[str, Any]:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def adopt(config: DictConfig, defaults: DictConfig, source: dict, recipe: Any) -> None:
    """Set ``config``'s architecture and tokenizer to the ``source`` checkpoint's config's, keeping a value the job
    set (differing from its ``defaults``) that changes no parameter's shape; a ValueError naming a key that would.

    >>> from theseus.train.recipe import Recipe
    >>> from theseus.train.config import load_config
    >>> defaults = load_config(None, Recipe.Config)
    >>> source = {"architecture": {"n_embd": 32, "n_head": 4, "n_layers": 1, "vocab_size": 64, "block_size": 8},
    ...           "tokenizer": {"backend": "tiktoken", "name": "cl100k_base"}}
    >>> mine = load_config({"architecture": {"dropout": 0.1}}, Recipe.Config)
    >>> adopt(mine, defaults, source, Recipe()); mine.architecture.n_embd, mine.architecture.dropout
    (32, 0.1)
    >>> adopt(load_config({"architecture": {"n_layers": 2}}, Recipe.Config), defaults, source, Recipe())
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: architecture.n_layers=2 changes the shape of the parameters training.init_from starts from (1 in its checkpoint): leave it unset
    """  # noqa: E501 - a doctest's expected output, printed on one line
    mine = OmegaConf.to_container(config, resolve=True)
    base = OmegaConf.to_container(defaults, resolve=True)
    changed = {}
    for section in ADOPTED:
        theirs = _dotted(source[section], f"{section}.")
        for key, value in _dotted(mine[section], f"{section}.").items():
            if value != _dotted(base[section], f"{section}.").get(key) and value != theirs.get(key, value):
                changed[key] = value
    try:
        adopted = OmegaConf.merge(config, {s: source[s] for s in ADOPTED})
    except ConfigKeyError as e:  # another model part's architecture (a llama checkpoint for a gpt job, say)
        model = getattr(getattr(recipe, "MODEL", None), "name", "this job's")
        raise BadInput(f"training.init_from: the checkpoint's {e.full_key} is not a setting of a {model} model: "
                         "start from it with the training job of its own model (<family>/train/pretrain, the "
                         "family its run's job names)") from None
    reference = _shapes(recipe, adopted)
    for key, value in changed.items():
        if key.startswith("tokenizer."):
            raise BadInput(f"{key}={value} differs from the tokenizer of the checkpoint training.init_from starts "
                             f"from ({OmegaConf.select(adopted, key)}): leave it unset")
        trial = OmegaConf.merge(adopted, OmegaConf.from_dotlist([f"{key}={value}"]))
        if _shapes(recipe, trial) != reference:
            raise BadInput(f"{key}={value} changes the shape of the parameters training.init_from starts from "
                             f"({OmegaConf.select(adopted, key)} in its checkpoint): leave it unset")
        OmegaConf.update(adopted, key, value)
    for section in ADOPTED:
        config[section] = adopted[section]
