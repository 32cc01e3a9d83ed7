"""The key/value cache both decoders (`theseus.model.gpt.GPT`, `theseus.model.decoder.Decoder`) take: its empty
layout, and the checks of a forward call with or without one.

>>> from theseus.model.config import GPTConfig
>>> cache = empty_cache(GPTConfig(n_embd=32, n_head=4, n_layers=2, block_size=8), 3, 8, heads=4, head_dim=8)
>>> len(cache), cache[0][0].shape
(2, (3, 8, 4, 8))
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from theseus.errors import BadInput


def empty_cache(config: Any, batch: int, length: int, heads: int,
                head_dim: int) -> tuple[tuple[jax.Array, jax.Array], ...]:
    """Per block of ``config.n_layers``, keys and values [batch, length, heads, head_dim] of zeros in the activation
    dtype; ``length`` must be 1..block_size.

    >>> from theseus.model.config import GPTConfig
    >>> empty_cache(GPTConfig(n_embd=32, n_head=4, block_size=8), 1, 9, heads=4, head_dim=8)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: a cache holds 1..block_size (8) positions, got 9
    """
    if not 0 < length <= config.block_size:
        raise BadInput(f"a cache holds 1..block_size ({config.block_size}) positions, got {length}")
    shape = (batch, length, heads, head_dim)
    dtype = config.activation_jnp_dtype
    return tuple((jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(config.n_layers))


def check_call(config: Any, owner: str, idx: jax.Array, positions: Any, cache: Any,
               segment_ids: Any = None) -> None:
    """Raise on a call ``owner`` (the model's class name) cannot run: idx not [batch, time], longer than block_size,
    a cache without positions, a cache of another depth, segment ids with a cache (decoding runs one sequence per
    row), or segment ids / positions of another shape than idx.

    >>> import jax.numpy as jnp
    >>> from theseus.model.config import GPTConfig
    >>> check_call(GPTConfig(n_embd=32, n_head=4, block_size=8), "GPT", jnp.zeros((1, 4)), None, ((0, 0),))
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: decoding needs positions [batch, time] with the cache (GPT.init_cache)
    """
    if idx.ndim != 2:
        raise BadInput(f"idx must be [batch, time], got shape {idx.shape}")
    if idx.shape[1] > config.block_size:
        raise BadInput(f"sequence length {idx.shape[1]} is longer than block_size {config.block_size}")
    if cache is not None and positions is None:
        raise BadInput(f"decoding needs positions [batch, time] with the cache ({owner}.init_cache)")
    if cache is not None and len(cache) != config.n_layers:
        raise BadInput(f"the cache has {len(cache)} layers, the model {config.n_layers}")
    if cache is not None and segment_ids is not None:
        raise BadInput(f"{owner} takes segment_ids for packed rows without a cache only; decoding takes none")
    for name, given in (("segment_ids", segment_ids), ("positions", positions)):
        if given is not None and tuple(given.shape) != tuple(idx.shape):
            raise BadInput(f"{name} must have idx's shape {tuple(idx.shape)}, got {tuple(given.shape)}")


def write(cache: tuple[jax.Array, jax.Array], k: jax.Array, v: jax.Array,
          positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One block's cache with the keys ``k`` and values ``v`` [batch, time, heads, head_dim] written at
    ``positions`` [batch, time] (each row at its own positions), cast to the cache's dtype.

    >>> keys = values = jnp.zeros((1, 4, 1, 2))
    >>> keys, _ = write((keys, values), jnp.ones((1, 2, 1, 2)), jnp.ones((1, 2, 1, 2)), jnp.array([[1, 2]]))
    >>> keys[0, :, 0, 0].tolist()
    [0.0, 1.0, 1.0, 0.0]
    """
    keys, values = cache
    rows = jnp.arange(k.shape[0])[:, None]
    return keys.at[rows, positions].set(k.astype(keys.dtype)), values.at[rows, positions].set(v.astype(values.dtype))
