"""A built recipe's steps on its mesh: the train step compiled ahead of time, the eval step jitted, batches placed.

- `compile_train_step`: ``(state, batch, base_key) -> (state, metrics)``, state donated, compiled from
  abstract shapes for one micro-batch size (autobatch compiles each candidate this way); with a
  ``frozen`` tree it takes it as a fourth argument (`theseus.train.objective`).
- `jit_eval_step`: ``(params, batch[, frozen]) -> {"loss", "tokens"}`` with the layout's shardings.
- `place_batch`: batch ``k`` of a loader on the mesh, each device's rows read only for it.
- `batch_keys`: the keys a loader's batches hold: `BATCH_KEYS`, then the optional ones (a packed
  loader's ``segment_ids``, ``positions``), which the step passes to the model.

>>> import jax.numpy as jnp
>>> from types import SimpleNamespace
>>> batch_keys(SimpleNamespace()), batch_keys(SimpleNamespace(batch_keys=("x", "y", "padding_mask", "positions")))
(('x', 'y', 'padding_mask'), ('x', 'y', 'padding_mask', 'positions'))
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from theseus.errors import BadInput
from theseus.model import GPT, GPTConfig
from theseus.model.gpt import cross_entropy
from theseus.train.built import Layout, StepParts
from theseus.train.objective import BATCH_KEYS, OPTIONAL_KEYS, TokenObjective, model_forward
from theseus.train.sharding import ShardConfig, make_mesh
from theseus.train.step import make_eval_step, make_train_step

__all__ = ["abstract_batch", "batch_keys", "compile_train_step", "example_parts", "jit_eval_step", "place_batch",
           "place_example"]


def batch_keys(loader: Any) -> tuple[str, ...]:
    """`BATCH_KEYS`, then the `OPTIONAL_KEYS` the batches of ``loader`` hold: those its ``batch_keys`` names, else
    all of them for a packed loader (``loader.packed``, or its dataset's: `theseus.data.packing`); another key
    is refused.

    >>> from types import SimpleNamespace
    >>> batch_keys(SimpleNamespace(dataset=SimpleNamespace(packed=True)))
    ('x', 'y', 'padding_mask', 'segment_ids', 'positions')
    """
    packed = getattr(loader, "packed", getattr(getattr(loader, "dataset", None), "packed", False))
    declared = tuple(getattr(loader, "batch_keys", BATCH_KEYS + OPTIONAL_KEYS if packed else BATCH_KEYS))
    unknown = [k for k in declared if k not in BATCH_KEYS + OPTIONAL_KEYS]
    if unknown:
        raise BadInput(f"a batch key the step does not read: {unknown}; a step reads "
                       f"{list(BATCH_KEYS + OPTIONAL_KEYS)}")
    return (*BATCH_KEYS, *(k for k in OPTIONAL_KEYS if k in declared))


def abstract_batch(layout: Layout, rows: int, block_size: int, keys: tuple[str, ...] = BATCH_KEYS) -> dict[str, Any]:
    """ShapeDtypeStructs of a batch of ``rows`` x ``block_size`` on the layout's batch sharding (the mask bool,
    every other key int32).

    >>> abstract_batch(example_parts()[1], 4, 8)["x"].shape
    (4, 8)
    """
    return {k: jax.ShapeDtypeStruct((rows, block_size), jnp.bool_ if k == "padding_mask" else jnp.int32,
                                    sharding=layout.batch_sharding) for k in keys}




def compile_train_step(parts: StepParts, layout: Layout, batch_size: int, per_device: int, block_size: int,
                       base_key: Any, *, keys: tuple[str, ...] = BATCH_KEYS, frozen: Any = None) -> Any:
    """The AOT-compiled train step for a per-device micro-batch of ``per_device`` rows (module doc): the global
    batch of ``batch_size`` rows of ``keys``, the key shaped as ``base_key``; ``frozen``: the abstract frozen tree
    (placed like the params) the step then takes as a fourth argument.

    >>> parts, layout = example_parts()
    >>> step = compile_train_step(parts, layout, 4, 2, 8, jax.random.PRNGKey(0))
    >>> state, metrics = step(jax.jit(lambda: jax.tree.map(jax.numpy.zeros_like, layout.abstract_state))(),
    ...                       {k: v for k, v in place_example(4, 8).items()}, jax.random.PRNGKey(0))
    >>> int(state["step"]), sorted(metrics)
    (1, ['grad_norm', 'loss', 'lr', 'tokens'])
    """
    data_parallel = int(layout.mesh.shape["data"])
    accumulation = batch_size // (per_device * data_parallel)
    step = make_train_step(parts.model, parts.optimizer, accumulation, schedule=parts.schedule,
                           objective=parts.objective, forward=parts.forward)
    key = jax.ShapeDtypeStruct(base_key.shape, base_key.dtype, sharding=layout.replicated)
    batch = abstract_batch(layout, batch_size, block_size, keys)
    shardings = (layout.state_shardings, {k: layout.batch_sharding for k in keys}, layout.replicated)
    if frozen is None:
        def three(state, batch, rng):  # pretraining: no frozen tree, the three-argument step
            return step(state, batch, rng)

        jitted = jax.jit(three, in_shardings=shardings, out_shardings=(layout.state_shardings, layout.replicated),
                         donate_argnums=0)
        return jitted.lower(layout.abstract_state, batch, key).compile()
    jitted = jax.jit(step, in_shardings=(*shardings, jax.tree.map(lambda a: a.sharding, frozen)),
                     out_shardings=(layout.state_shardings, layout.replicated), donate_argnums=0)
    return jitted.lower(layout.abstract_state, batch, key, frozen).compile()


def example_parts(block_size: int = 8) -> tuple[StepParts, Layout]:
    """The step parts (a one-layer GPT, cross-entropy, SGD at 0.1) and the layout on one device of the examples.

    >>> parts, layout = example_parts()
    >>> type(parts.model).__name__, layout.mesh.size
    ('GPT', 1)
    """
    model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=1, vocab_size=64, block_size=block_size))
    parts = StepParts(model, cross_entropy, model_forward(model), TokenObjective(cross_entropy), optax.sgd(0.1),
                      lambda step: 0.1)
    return parts, Layout.of(model, parts.optimizer, make_mesh(1), ShardConfig(), block_size)


def place_example(rows: int, block_size: int) -> dict[str, np.ndarray]:
    """A batch of zeros with every token counted (an example input).

    >>> place_example(2, 4)["padding_mask"].all()
    np.True_
    """
    return {"x": np.zeros((rows, block_size), np.int32), "y": np.zeros((rows, block_size), np.int32),
            "padding_mask": np.ones((rows, block_size), bool)}


def jit_eval_step(parts: StepParts, layout: Layout, keys: tuple[str, ...] = BATCH_KEYS, frozen: bool = False) -> Any:
    """The eval step ``(params, batch[, frozen]) -> {"loss", "tokens"}`` jitted with the layout's shardings
    (the params', the batch's; replicated results); ``frozen``: it takes the frozen tree too.

    >>> parts, layout = example_parts()
    >>> model = parts.model
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    >>> int(jit_eval_step(parts, layout)(params, place_example(2, 8))["tokens"])
    16
    """
    step = make_eval_step(parts.model, objective=parts.objective, forward=parts.forward)
    shardings: tuple = (layout.state_shardings["params"], {k: layout.batch_sharding for k in keys})
    if not frozen:
        def two(params, batch):  # pretraining: no frozen tree
            return step(params, batch)

        return jax.jit(two, in_shardings=shardings, out_shardings=layout.replicated)
    return jax.jit(step, in_shardings=(*shardings, None), out_shardings=layout.replicated)


def place_batch(loader: Any, k: int, layout: Layout, block_size: int, keys: tuple[str, ...] = BATCH_KEYS) -> dict:
    """Batch ``k`` of ``loader`` on the mesh (``keys`` of it); each device's rows are read only for it.

    >>> from types import SimpleNamespace
    >>> layout = example_parts()[1]
    >>> example = place_example(2, 8)
    >>> loader = SimpleNamespace(batch_size=2, batch=lambda k, rows: {n: v[rows] for n, v in example.items()})
    >>> place_batch(loader, 0, layout, 8)["x"].shape
    (2, 8)
    """
    rows = loader.batch_size
    pieces: dict[tuple[int, int], dict[str, np.ndarray]] = {}

    def piece(index: tuple, name: str) -> np.ndarray:
        start, stop, _ = index[0].indices(rows)
        if (start, stop) not in pieces:
            pieces[(start, stop)] = loader.batch(k, rows=slice(start, stop))
        return pieces[(start, stop)][name]

    return {name: jax.make_array_from_callback((rows, block_size), layout.batch_sharding,
                                               lambda index, n=name: piece(index, n))
            for name in keys}
