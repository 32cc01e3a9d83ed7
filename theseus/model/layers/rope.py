"""Rotary position embeddings (RoFormer), in the rotate-half layout of GPT-NeoX / LLaMA.

>>> import jax.numpy as jnp
>>> q = jnp.ones((1, 4, 2, 8))          # [B, T, n_head, head_dim]
>>> apply_rope(q, jnp.arange(4)).shape
(1, 4, 2, 8)
"""

import jax.numpy as jnp

from theseus.errors import BadInput


def rope_angles(positions, head_dim: int, base: float = 10000.0):
    """cos and sin tables for `positions` ([T], or [B, T] per row), each [..., head_dim // 2], in float32.

    >>> import jax.numpy as jnp
    >>> cos, sin = rope_angles(jnp.arange(3), 4)
    >>> cos.shape, float(sin[0, 0])
    ((3, 2), 0.0)
    """
    if head_dim % 2 != 0:
        raise BadInput(f"rope needs an even head_dim, got {head_dim}")
    inv_freq = 1.0 / (base ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    angles = jnp.asarray(positions, jnp.float32)[..., None] * inv_freq
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x, positions, base: float = 10000.0):
    """Rotate x [B, T, n_head, head_dim] by its positions, [T] (shared by the rows) or [B, T] (one per row,
    as decoding padded prompts needs); math in float32, result in x.dtype.

    Position 0 is the identity, and per-row positions rotate each row by its own:

    >>> import jax.numpy as jnp
    >>> x = jnp.arange(8.0).reshape(1, 1, 1, 8)
    >>> bool(jnp.allclose(apply_rope(x, jnp.arange(1)), x))
    True
    >>> pair = jnp.concatenate([x, x])
    >>> bool(jnp.allclose(apply_rope(pair, jnp.array([[0], [3]]))[1], apply_rope(x, jnp.array([3]))[0]))
    True
    """
    cos, sin = rope_angles(positions, x.shape[-1], base)
    if cos.ndim == 2:  # [T, D/2]: the same positions for every row
        cos, sin = cos[None], sin[None]
    cos = cos[:, :, None, :]
    sin = sin[:, :, None, :]
    x32 = x.astype(jnp.float32)
    x1, x2 = jnp.split(x32, 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)
