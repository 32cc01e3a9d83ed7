"""A run's training state on its mesh: fresh, restored from a checkpoint, or started from another's parameters.

Each function reads a `theseus.train.built.Layout` (the abstract state and its shardings) and returns a
state laid out on the mesh; every checkpoint file read is checked against its folder's MANIFEST.json as it
is read (`theseus.train.checkpoint.restore`). The trainer keeps the state; these only place it.

>>> from theseus.train.trainer import Trainer
>>> root, config = tiny_example()
>>> trainer = Trainer(config, root, peak_flops=1e12, progress=False)
>>> state = fresh_state(trainer.built, trainer.base_key)
>>> int(state["step"]), sorted(state)
(0, ['opt_state', 'params', 'step'])
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from theseus.errors import BadInput
from theseus.store.layout import RNG_FILE
from theseus.store.node import describe as describe_node
from theseus.train import checkpoint as ckpt
from theseus.train import manifest as mf
from theseus.train.built import Built
from theseus.train.example import tiny_example  # noqa: F401 - the doctests' example run
from theseus.train.rng import init_key, key_from_json
from theseus.train.step import init_state

__all__ = ["RunKey", "fresh_state", "params_from", "read_rng", "restore_checked", "restored_state", "sealed_of",
           "started_from"]


def fresh_state(built: Built, base_key: jax.Array) -> dict:
    """A fresh state (params from `theseus.train.rng.init_key` of ``base_key``) laid out on the mesh; step 0.

    >>> from theseus.train.trainer import Trainer
    >>> built = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False).built
    >>> a, b = fresh_state(built, jax.random.PRNGKey(0)), fresh_state(built, jax.random.PRNGKey(0))
    >>> bool((a["params"]["wte"]["embedding"] == b["params"]["wte"]["embedding"]).all())
    True
    """
    model, optimizer, T = built.model, built.optimizer, built.block_size
    init_fn = jax.jit(lambda k: init_state(model, optimizer, k, T), out_shardings=built.layout.state_shardings)
    return init_fn(init_key(base_key))


def sealed_of(folder: str, node: Any, verify: bool) -> mf.Sealed:
    """``folder`` opened for checked reads, refused when its ``job.json`` names another node than ``node``.

    >>> import tempfile
    >>> try:
    ...     sealed_of(tempfile.mkdtemp(), None, True)
    ... except FileNotFoundError as e:
    ...     print("no MANIFEST.json" in str(e))
    True
    """
    sealed = mf.Sealed(folder)
    owner = ckpt.saved_for(sealed, verify)
    if node is not None and owner is not None and owner != node.id:
        raise mf.DamagedFolder(f"{folder} holds the checkpoint of {describe_node(owner)}, not of "
                               f"node {node.id}: not restored")
    return sealed


def params_from(built: Built, folder: str, sealed: mf.Sealed, verify: bool) -> Any:
    """The parameters of the checkpoint in ``folder`` on the mesh, cast to the model's parameter dtypes;
    a parameter missing from it or of another shape is a BadInput naming it.

    >>> import tempfile
    >>> from theseus.train.trainer import Trainer
    >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
    >>> folder = tempfile.mkdtemp() + "/ckpt"; trainer.save(folder); trainer.wait()
    >>> params = params_from(trainer.built, folder, sealed_of(folder, None, True), verify=True)
    >>> sorted(params) == sorted(trainer.params)
    True
    """
    stored = {e["path"]: e for e in ckpt.read_index(folder)["leaves"]}
    abstract = {"params": built.layout.abstract_state["params"]}
    names = ckpt.leaf_paths(abstract)
    wrong = [f"{n} ({'missing' if n not in stored else tuple(stored[n]['shape'])} != {tuple(a.shape)})"
             for n, a in zip(names, jax.tree.leaves(abstract), strict=True)
             if n not in stored or tuple(stored[n]["shape"]) != tuple(a.shape)]
    if wrong:
        raise BadInput(f"the parameters of {folder} do not fit this model: {', '.join(wrong[:8])}")
    target = jax.tree.unflatten(jax.tree.structure(abstract), [
        jax.ShapeDtypeStruct(a.shape, np.dtype(stored[n]["dtype"]), sharding=a.sharding)
        for n, a in zip(names, jax.tree.leaves(abstract), strict=True)])
    restored, _ = ckpt.restore(folder, target, partial=True, verify=verify, sealed=sealed)
    return jax.jit(lambda p: jax.tree.map(lambda x, a: x.astype(a.dtype), p, abstract["params"]),
                   out_shardings=built.layout.state_shardings["params"])(restored["params"])


def started_from(built: Built, params: Any) -> dict:
    """A state at step 0 holding ``params`` (on the mesh) with a fresh optimizer state.

    >>> from theseus.train.trainer import Trainer
    >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
    >>> int(started_from(trainer.built, trainer.params)["step"])
    0
    """
    shardings = built.layout.state_shardings
    opt_state = jax.jit(built.optimizer.init, out_shardings=shardings["opt_state"])(params)
    return {"params": params, "opt_state": opt_state,
            "step": jax.device_put(jnp.zeros((), jnp.int32), shardings["step"])}


def restored_state(built: Built, folder: str, sealed: mf.Sealed, partial: bool, verify: bool,
                   fresh: Any) -> tuple[dict, ckpt.RestoreReport]:
    """The state of the checkpoint in ``folder`` and what was restored. A params-only checkpoint (an import)
    gets a fresh optimizer; with ``partial``, leaves missing or of another shape keep ``fresh()``'s values
    (``fresh``: a callable returning a fresh state); without, any difference is an error.

    >>> import tempfile
    >>> from theseus.train.trainer import Trainer
    >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
    >>> folder = tempfile.mkdtemp() + "/ckpt"; trainer.save(folder); trainer.wait()
    >>> state, report = restored_state(trainer.built, folder, sealed_of(folder, None, True), False, True, None)
    >>> report.exact, int(state["step"])
    (True, 0)
    """
    index = {e["path"]: (tuple(e["shape"]), e["dtype"]) for e in ckpt.read_index(folder)["leaves"]}
    if not any(name.startswith("opt_state/") for name in index):  # params only (an import): fresh optimizer
        state = started_from(built, params_from(built, folder, sealed, verify))
        return state, ckpt.RestoreReport(restored=ckpt.leaf_paths({"params": state["params"]}))
    abstract = built.layout.abstract_state
    wanted = {name: (tuple(leaf.shape), np.dtype(leaf.dtype).name)
              for name, leaf in zip(ckpt.leaf_paths(abstract), jax.tree.leaves(abstract), strict=True)}
    if index == wanted or not partial:
        return ckpt.restore(folder, abstract, partial=False, verify=verify, sealed=sealed)
    return ckpt.restore(folder, fresh(), partial=True, verify=verify, sealed=sealed)


def read_rng(sealed: mf.Sealed, verify: bool) -> str | None:
    """The text of the folder's ``rng.json`` (the run's base key and seed), None when it has none.

    >>> import tempfile, json
    >>> from theseus.train.trainer import Trainer
    >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
    >>> folder = tempfile.mkdtemp() + "/ckpt"; trainer.save(folder); trainer.wait()
    >>> json.loads(read_rng(sealed_of(folder, None, True), verify=True))["seed"]
    0
    """
    if RNG_FILE not in sealed.listed:
        return None
    return sealed.read(RNG_FILE, check=verify).decode()


class RunKey(NamedTuple):
    """A run's base key and the seed it was drawn from (what ``rng.json`` holds).

    >>> RunKey(jax.random.PRNGKey(3), 3).seed
    3
    """

    key: jax.Array
    seed: int


def restore_checked(built: Built, folder: str, node: Any, step: int | None, run_key: RunKey, *, partial: bool,
                    verify: bool, log: Any) -> tuple[dict, ckpt.RestoreReport, RunKey]:
    """The state of the checkpoint in ``folder``, what was restored and the run key of its ``rng.json`` (without
    one: ``run_key``, refused unless ``partial``). The folder must be ``node``'s (its ``job.json``) and hold
    ``step`` (the step that node recorded) when they are given.

    >>> import tempfile
    >>> from theseus.train.trainer import Trainer
    >>> trainer = Trainer(*reversed(tiny_example()), peak_flops=1e12, progress=False)
    >>> folder = tempfile.mkdtemp() + "/ckpt"; trainer.save(folder); trainer.wait()
    >>> state, report, key = restore_checked(trainer.built, folder, None, 0, RunKey(trainer.base_key, 5),
    ...                                      partial=False, verify=True, log=None)
    >>> report.exact, key.seed
    (True, 0)
    """
    sealed = sealed_of(folder, node, verify)
    rng_text = read_rng(sealed, verify)
    if rng_text is not None:
        run_key = RunKey(key_from_json(rng_text), json.loads(rng_text).get("seed", run_key.seed))
    elif not partial:
        raise FileNotFoundError(f"{folder} has no {RNG_FILE}")
    else:
        log.warning(f"RESTORE | {folder} has no {RNG_FILE}; keeping base key of seed {run_key.seed}")
    state, report = restored_state(built, folder, sealed, partial, verify, lambda: fresh_state(built, run_key.key))
    saved = int(jax.device_get(state["step"]))
    if step is not None and saved != step:
        raise mf.DamagedFolder(f"checkpoint {folder} holds step {saved}, not step {step}: it is another node's")
    return state, report, run_key
