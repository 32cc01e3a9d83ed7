"""The attention mask of packed rows: several sequences side by side in one row, told apart by segment ids
(0 marks padding), each with positions that restart at 0, so no token attends across a sequence's edge.

>>> import jax.numpy as jnp
>>> mask = packed_mask(jnp.array([[1, 1, 2, 2, 0]]), jnp.array([[0, 1, 0, 1, 0]]), window=0)
>>> mask[0, 0].astype(int).tolist()
[[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 0, 1]]
"""

import jax
import jax.numpy as jnp


def packed_mask(segment_ids: jax.Array, positions: jax.Array, window: int) -> jax.Array:
    """[B, 1, T, T] mask over a row's own tokens: query t sees key s when s <= t, both carry the same segment id
    (``segment_ids`` [B, T]) and, when ``window`` > 0, key s lies within ``window`` positions of query t
    (``positions`` [B, T], so a sliding window counts positions within the sequence, not slots in the row).

    Padding (segment 0) attends to padding only, so each query sees at least itself and no softmax row is empty:

    >>> import jax.numpy as jnp
    >>> mask = packed_mask(jnp.ones((1, 4), jnp.int32), jnp.arange(4)[None], window=2)
    >>> mask[0, 0, 3].tolist()
    [False, False, True, True]
    """
    length = segment_ids.shape[1]
    slots = jnp.arange(length)
    causal = (slots[None, :] <= slots[:, None])[None]  # [1, T, T]
    same_segment = segment_ids[:, :, None] == segment_ids[:, None, :]  # [B, T, T]
    visible = causal & same_segment
    if window:
        visible = visible & (positions[:, None, :] > positions[:, :, None] - window)
    return visible[:, None]


def packed_inputs(idx: jax.Array, segment_ids: jax.Array | None, positions: jax.Array | None,
                  window: int) -> tuple[jax.Array | None, jax.Array | None]:
    """``(positions, mask)`` for a forward pass over idx [B, T] without a cache: ``(None, None)`` when neither
    ``segment_ids`` nor ``positions`` is given (the plain causal pass), else the positions (0..T-1 per row when
    absent) and their `packed_mask` (one segment per row when ``segment_ids`` is absent).

    >>> import jax.numpy as jnp
    >>> packed_inputs(jnp.zeros((1, 3), jnp.int32), None, None, 0)
    (None, None)
    >>> positions, mask = packed_inputs(jnp.zeros((2, 3), jnp.int32), jnp.array([[1, 1, 2], [1, 0, 0]]), None, 0)
    >>> positions.tolist(), mask.shape
    ([[0, 1, 2], [0, 1, 2]], (2, 1, 3, 3))
    """
    if segment_ids is None and positions is None:
        return None, None
    shape = idx.shape
    segment_ids = jnp.ones(shape, jnp.int32) if segment_ids is None else segment_ids
    positions = jnp.broadcast_to(jnp.arange(shape[1])[None, :], shape) if positions is None else positions
    return positions, packed_mask(segment_ids, positions, window)
