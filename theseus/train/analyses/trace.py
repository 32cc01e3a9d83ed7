"""One forward pass of a GPT or an open-model Decoder on a few rows, recorded: what enters and leaves each
block, each block's attention and MLP outputs, each query head's queries, keys and values, and the heads'
mixed values (`theseus.train.analyses.adapters` says where each model keeps them).

The pass is an eager `theseus.model.walk.walk`, which hands over each module call's arguments and
result and changes nothing: the model and its training step stay as they are, and the analyses read
these numbers instead of a path of the model switched on for them.

>>> import jax, jax.numpy as jnp
>>> from theseus.model import GPT, GPTConfig
>>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=64, block_size=8))
>>> tokens = jnp.zeros((1, 8), jnp.int32)
>>> params = model.init(jax.random.PRNGKey(0), tokens)["params"]
>>> trace = record(model, params, tokens)
>>> trace.n_layers, trace.queries.shape, trace.stream().shape
(2, (2, 1, 8, 4, 8), (3, 1, 8, 32))
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from theseus.errors import BadInput
from theseus.model.walk import Call, walk
from theseus.train.analyses.adapters import ADAPTERS, Adapter, adapter_for

__all__ = ["Trace", "local_params", "record"]


@dataclasses.dataclass(frozen=True)
class Trace:
    """The recorded forward pass of ``tokens`` ``[S, T]`` (the residual stream in float32; the heads in the
    model's activation dtype, as the attention computed with them).

    - ``config``: the model's config; ``params``: its parameter sub-tree; ``adapter``: how it is read
      (`theseus.train.analyses.adapters`);
    - ``embeddings`` ``[S, T, C]``: the residual stream entering the first block;
    - ``blocks`` ``[L, S, T, C]``: the residual stream leaving each block;
    - ``attn``, ``mlp`` ``[L, S, T, C]``: what each block's attention and MLP add to the stream (both read
      the block's input when the model adds them in parallel, as GPT-NeoX);
    - ``queries``, ``keys``, ``values`` ``[L, S, T, H, D]``: each query head's queries and the keys and
      values it attends with (positions applied; a key/value head repeated for each query head it serves);
    - ``mixed`` ``[L, S, T, H * D]``: the heads' outputs, the input of each attention's output projection.

    >>> Trace.__dataclass_fields__["queries"].name
    'queries'
    """

    tokens: np.ndarray
    config: Any
    params: Any
    adapter: Adapter
    embeddings: jax.Array
    blocks: jax.Array
    attn: jax.Array
    mlp: jax.Array
    queries: jax.Array
    keys: jax.Array
    values: jax.Array
    mixed: jax.Array

    @property
    def n_layers(self) -> int:
        """Number of blocks."""
        return int(self.blocks.shape[0])

    def stream(self) -> jax.Array:
        """The residual stream ``[L + 1, S, T, C]``: entering the first block, then leaving each block."""
        return jnp.concatenate([self.embeddings[None], self.blocks], axis=0)

    @property
    def n_head(self) -> int:
        """Query heads per attention."""
        return self.adapter.n_head(self.config)

    @property
    def window(self) -> int:
        """How many positions a query sees, itself included (0: every earlier one)."""
        return self.adapter.window(self.config)

    def read_out(self, point: jax.Array) -> jax.Array:
        """One stream point ``[S, T, C]`` through the model's final norm and unembedding: float32 logits."""
        return self.adapter.read_out(self.config, self.params)(point)


def local_params(params: Any) -> Any:
    """``params`` as arrays this process can compute on eagerly and read back.

    Arrays of a single-process mesh (sharded or not) are returned as they are; arrays spread over
    several processes are replicated first, and each process keeps its first local copy, since an
    eager computation or a read of a value needs every shard on this host.

    >>> import jax.numpy as jnp
    >>> local_params({"w": jnp.ones(2)})["w"].shape
    (2,)
    """
    def local(a: Any) -> Any:
        if not isinstance(a, jax.Array) or a.is_fully_addressable:
            return a
        whole = jax.jit(lambda x: x, out_shardings=NamedSharding(a.sharding.mesh, PartitionSpec()))(a)
        return whole.addressable_data(0)

    return jax.tree.map(local, params)


def record(model: nn.Module, params: Any, tokens: Any) -> Trace:
    """Run ``model`` (a theseus GPT or open-model Decoder, or a module that calls one) on ``tokens``
    ``[S, T]`` and record it.

    A model with neither inside is a ValueError naming its type: the analyses read the blocks,
    attention, MLPs, final norm and embedding of a model `theseus.train.analyses.adapters` knows.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model import GPT, GPTConfig
    >>> model = GPT(GPTConfig(n_embd=16, n_head=2, n_layers=1, vocab_size=32, block_size=4))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))["params"]
    >>> record(model, params, [[1, 2, 3]]).blocks.shape
    (1, 1, 3, 16)
    """
    tokens = np.asarray(tokens, np.int32)
    if tokens.ndim != 2 or tokens.shape[1] == 0:
        raise BadInput(f"tokens must be [rows, time] with at least one token, got shape {tokens.shape}")
    found = _capture(model, params, tokens)
    if found["top"] is None or not found["blocks"]:
        known = " or ".join(f"{a.model.__module__}.{a.model.__name__}" for a in ADAPTERS)
        raise BadInput(f"the analyses read a model they have an adapter for ({known}); this job's model "
                         f"{type(model).__name__} calls none")
    return _assemble(found, tokens, params)


def _capture(model: nn.Module, params: Any, tokens: np.ndarray) -> dict[str, Any]:
    """Walk ``model`` on ``tokens``, keeping the outermost model call its adapter and what that adapter reads.

    The result holds ``top`` and ``adapter`` (None when no adapter knows any call), and per module path the
    ``blocks`` (input, output), ``attn`` and ``mlp`` outputs and the adapter's own captures (``qkv``, ``mixed``).
    """
    found: dict[str, Any] = {"top": None, "adapter": None, "blocks": {}, "attn": {}, "mlp": {}, "qkv": {},
                             "mixed": {}}

    def as_float(x: jax.Array) -> jax.Array:
        return jnp.asarray(x, jnp.float32)

    def entered(call: Call) -> None:
        if found["top"] is None and call.is_call and adapter_for(call.module) is not None:
            found["top"], found["adapter"] = call.module, adapter_for(call.module)  # the outermost model call

    def returned(call: Call) -> None:
        adapter, path = found["adapter"], call.path
        if adapter is None:
            return
        captured = adapter.capture(call.module, call.method, path, call.args, call.output)
        if captured is not None:
            found[captured[1]].setdefault(captured[0], captured[2])
        elif not call.is_call:
            return
        elif isinstance(call.module, adapter.block):
            found["blocks"].setdefault(path, (as_float(call.args[0]), as_float(call.output)))
        elif isinstance(call.module, adapter.attention):
            found["attn"].setdefault(path, as_float(call.output))
        elif isinstance(call.module, adapter.mlp):
            found["mlp"].setdefault(path, as_float(call.output))

    walk(model, {"params": local_params(params)}, jnp.asarray(tokens), on_enter=entered, on_return=returned,
         deterministic=True)
    return found


def _assemble(found: dict[str, Any], tokens: np.ndarray, params: Any) -> Trace:
    """The `Trace` of what `_capture` found: per-layer arrays stacked in block order, the top model's params."""
    top, adapter = found["top"], found["adapter"]
    base = tuple(top.path)
    names = [base + (f"blocks_{i}",) for i in range(top.config.n_layers)]
    sub = local_params(params)
    for name in base:
        sub = sub[name]
    queries, keys, values = adapter.heads(top.config, [found["qkv"][p + ("attn",)] for p in names])
    return Trace(
        tokens=tokens,
        config=top.config,
        params=sub,
        adapter=adapter,
        embeddings=found["blocks"][names[0]][0],
        blocks=jnp.stack([found["blocks"][p][1] for p in names]),
        attn=jnp.stack([found["attn"][p + ("attn",)] for p in names]),
        mlp=jnp.stack([found["mlp"][p + ("mlp",)] for p in names]),
        queries=queries,
        keys=keys,
        values=values,
        mixed=jnp.stack([found["mixed"][p + ("attn",)] for p in names]),
    )
