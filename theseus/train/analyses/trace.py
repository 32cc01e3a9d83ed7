"""One forward pass of a GPT on a few rows, recorded: what enters and leaves each block, each block's
attention and MLP outputs, the attention's fused queries, keys and values, and the heads' mixed values.

The pass runs eagerly under `flax.linen.intercept_methods`, which hands over each module call's
arguments and result and changes nothing: the model and its training step stay as they are, and the
analyses read these numbers instead of a path of the model switched on for them.

>>> import jax, jax.numpy as jnp
>>> from theseus.model import GPT, GPTConfig
>>> model = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=64, block_size=8))
>>> tokens = jnp.zeros((1, 8), jnp.int32)
>>> params = model.init(jax.random.PRNGKey(0), tokens)["params"]
>>> trace = record(model, params, tokens)
>>> trace.n_layers, trace.qkv.shape, trace.stream().shape
(2, (2, 1, 8, 96), (3, 1, 8, 32))
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from theseus.model.config import GPTConfig
from theseus.model.gpt import GPT
from theseus.model.layers.attention import CausalSelfAttention
from theseus.model.layers.block import Block
from theseus.model.layers.mlp import MLP

__all__ = ["Trace", "local_params", "record"]


@dataclasses.dataclass(frozen=True)
class Trace:
    """The recorded forward pass of ``tokens`` ``[S, T]`` (the residual stream in float32; ``qkv`` and
    ``mixed`` in the model's activation dtype, as the attention computed with them).

    - ``config``: the GPT's `GPTConfig`; ``params``: its parameter sub-tree (``wte``, ``ln_f``, ``blocks_i``);
    - ``embeddings`` ``[S, T, C]``: the residual stream entering the first block;
    - ``blocks`` ``[L, S, T, C]``: the residual stream leaving each block;
    - ``attn``, ``mlp`` ``[L, S, T, C]``: what each block's attention and MLP add to the stream;
    - ``qkv`` ``[L, S, T, 3C]``: each attention's fused projection (queries, keys, values side by side);
    - ``mixed`` ``[L, S, T, C]``: the heads' outputs, the input of each attention's ``c_proj``.

    >>> Trace.__dataclass_fields__["qkv"].name
    'qkv'
    """

    tokens: np.ndarray
    config: GPTConfig
    params: Any
    embeddings: jax.Array
    blocks: jax.Array
    attn: jax.Array
    mlp: jax.Array
    qkv: jax.Array
    mixed: jax.Array

    @property
    def n_layers(self) -> int:
        """Number of blocks."""
        return int(self.blocks.shape[0])

    def stream(self) -> jax.Array:
        """The residual stream ``[L + 1, S, T, C]``: entering the first block, then leaving each block."""
        return jnp.concatenate([self.embeddings[None], self.blocks], axis=0)


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


def _path(module: nn.Module) -> tuple[str, ...]:
    return tuple(module.path)


def record(model: nn.Module, params: Any, tokens: Any) -> Trace:
    """Run ``model`` (a theseus GPT, or a module that calls one) on ``tokens`` ``[S, T]`` and record it.

    A model with no `theseus.model.gpt.GPT` inside is a ValueError naming its type: the analyses
    read the GPT's blocks, attention, MLPs, final norm and embedding.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model import GPT, GPTConfig
    >>> model = GPT(GPTConfig(n_embd=16, n_head=2, n_layers=1, vocab_size=32, block_size=4))
    >>> params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))["params"]
    >>> record(model, params, [[1, 2, 3]]).blocks.shape
    (1, 1, 3, 16)
    """
    tokens = np.asarray(tokens, np.int32)
    if tokens.ndim != 2 or tokens.shape[1] == 0:
        raise ValueError(f"tokens must be [rows, time] with at least one token, got shape {tokens.shape}")
    found: dict[str, Any] = {"gpt": None, "blocks": {}, "attn": {}, "mlp": {}, "qkv": {}, "mixed": {}}

    def as_float(x: jax.Array) -> jax.Array:
        return jnp.asarray(x, jnp.float32)

    def intercept(next_fun, args, kwargs, context):
        module, method = context.module, context.method_name
        out = next_fun(*args, **kwargs)
        if method != "__call__":
            return out
        path = _path(module)
        if isinstance(module, GPT) and found["gpt"] is None:
            found["gpt"] = module
        elif isinstance(module, Block):
            found["blocks"].setdefault(path, (as_float(args[0]), as_float(out)))
        elif isinstance(module, CausalSelfAttention):
            found["attn"].setdefault(path, as_float(out))
        elif isinstance(module, MLP):
            found["mlp"].setdefault(path, as_float(out))
        elif len(path) >= 2 and path[-1] == "c_attn":
            found["qkv"].setdefault(path[:-1], out)
        elif len(path) >= 2 and path[-1] == "c_proj":
            found["mixed"].setdefault(path[:-1], args[0])
        return out

    with nn.intercept_methods(intercept):
        model.apply({"params": local_params(params)}, jnp.asarray(tokens), deterministic=True)
    gpt = found["gpt"]
    if gpt is None or not found["blocks"]:
        raise ValueError(f"the analyses read a theseus GPT (theseus.model.gpt.GPT); this job's model "
                         f"{type(model).__name__} calls none")
    base = _path(gpt)
    names = [base + (f"blocks_{i}",) for i in range(gpt.config.n_layers)]
    sub = local_params(params)
    for name in base:
        sub = sub[name]
    first = names[0]
    return Trace(
        tokens=tokens,
        config=gpt.config,
        params=sub,
        embeddings=found["blocks"][first][0],
        blocks=jnp.stack([found["blocks"][p][1] for p in names]),
        attn=jnp.stack([found["attn"][p + ("attn",)] for p in names]),
        mlp=jnp.stack([found["mlp"][p + ("mlp",)] for p in names]),
        qkv=jnp.stack([found["qkv"][p + ("attn",)] for p in names]),
        mixed=jnp.stack([found["mixed"][p + ("attn",)] for p in names]),
    )
