"""Causal multi-head self-attention with a fused qkv projection (`c_attn`) and `c_proj`.

Scores and softmax are computed in float32 (`jax.nn.dot_product_attention`, XLA
implementation); queries and keys are rotated by RoPE when `config.rope`. ``decode``
is the same layer over a key/value cache (see `theseus.model.decode`).

>>> import jax, jax.numpy as jnp
>>> from theseus.model.config import GPTConfig
>>> cfg = GPTConfig(n_embd=32, n_head=4, n_layers=2, activation_dtype="float32")
>>> out, _ = CausalSelfAttention(cfg).init_with_output(jax.random.PRNGKey(0), jnp.ones((2, 5, 32)))
>>> out.shape
(2, 5, 32)
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from theseus.model import kv_cache
from theseus.model.config import GPTConfig
from theseus.model.layers.dense import dense, residual_std
from theseus.model.layers.rope import apply_rope


class CausalSelfAttention(nn.Module):
    """Causal self-attention over x [B, T, n_embd].

    Parameters: `c_attn/{kernel,bias}` [n_embd, 3 * n_embd] (q, k, v side by side),
    `c_proj/{kernel,bias}` [n_embd, n_embd]. The output goes through residual dropout. Packed rows pass
    ``positions`` and a segment ``mask`` to ``__call__``.
    ``decode(x, positions, cache)`` runs the same parameters over a key/value cache.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model.config import GPTConfig
    >>> cfg = GPTConfig(n_embd=32, n_head=4, n_layers=2, rope=False)
    >>> params = CausalSelfAttention(cfg).init(jax.random.PRNGKey(0), jnp.ones((1, 3, 32)))["params"]
    >>> params["c_attn"]["kernel"].shape
    (32, 96)
    """

    config: GPTConfig

    def setup(self):
        self.c_attn = dense(self.config, 3 * self.config.n_embd)
        self.c_proj = dense(self.config, self.config.n_embd, std=residual_std(self.config))
        self.dropout = nn.Dropout(rate=self.config.dropout)

    def _qkv(self, x: jax.Array, positions: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """q, k, v [B, T, n_head, head_dim] of x, q and k rotated to ``positions`` ([T] or [B, T]) under RoPE."""
        cfg = self.config
        B, T, _ = x.shape
        qkv = self.c_attn(x)
        q, k, v = jnp.split(qkv, 3, axis=-1)
        q = q.reshape(B, T, cfg.n_head, cfg.head_dim)
        k = k.reshape(B, T, cfg.n_head, cfg.head_dim)
        v = v.reshape(B, T, cfg.n_head, cfg.head_dim)
        if cfg.rope:
            q = apply_rope(q, positions)
            k = apply_rope(k, positions)
        return q, k, v

    def __call__(self, x: jax.Array, deterministic: bool = True, positions: jax.Array | None = None,
                 mask: jax.Array | None = None) -> jax.Array:
        """Causal attention of x [B, T, n_embd]; ``positions`` [B, T] rotate RoPE (default 0..T-1) and ``mask``
        [B, 1, T, T] narrows what each query sees (packed rows: `theseus.model.layers.packed.packed_mask`).

        >>> import jax, jax.numpy as jnp
        >>> from theseus.model.config import GPTConfig
        >>> from theseus.model.layers.packed import packed_mask
        >>> cfg = GPTConfig(n_embd=32, n_head=4, n_layers=1, activation_dtype="float32")
        >>> x = jax.random.normal(jax.random.PRNGKey(1), (1, 4, 32))
        >>> layer = CausalSelfAttention(cfg)
        >>> params = layer.init(jax.random.PRNGKey(0), x)
        >>> positions, segments = jnp.array([[0, 1, 0, 1]]), jnp.array([[1, 1, 2, 2]])
        >>> packed = layer.apply(params, x, positions=positions, mask=packed_mask(segments, positions, 0))
        >>> bool(jnp.allclose(packed[:, 2:], layer.apply(params, x[:, 2:]), atol=1e-6))
        True
        """
        B, T, C = x.shape
        q, k, v = self._qkv(x, jnp.arange(T) if positions is None else positions)
        y = jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=True)
        y = y.reshape(B, T, C)
        y = self.c_proj(y)
        y = self.dropout(y, deterministic=deterministic)
        return y

    def decode(self, x: jax.Array, positions: jax.Array,
               cache: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        """Attention of x [B, T, n_embd] at ``positions`` [B, T] over a cache ``(keys, values)``, each
        [B, S, n_head, head_dim]: x's keys and values are written at ``positions``, then query t of
        row b attends to the cached positions <= ``positions[b, t]``. Returns ``(y, (keys, values))``.

        On the positions 0..T-1 of an empty cache it is the causal attention of ``__call__``:

        >>> import jax, jax.numpy as jnp
        >>> from theseus.model.config import GPTConfig
        >>> cfg = GPTConfig(n_embd=32, n_head=4, n_layers=1, activation_dtype="float32")
        >>> x = jax.random.normal(jax.random.PRNGKey(1), (1, 3, 32))
        >>> layer = CausalSelfAttention(cfg)
        >>> params = layer.init(jax.random.PRNGKey(0), x)
        >>> empty = (jnp.zeros((1, 8, 4, 8)), jnp.zeros((1, 8, 4, 8)))
        >>> y, (keys, _) = layer.apply(params, x, jnp.arange(3)[None], empty, method="decode")
        >>> bool(jnp.allclose(y, layer.apply(params, x), atol=1e-6)), keys.shape
        (True, (1, 8, 4, 8))
        """
        B, T, C = x.shape
        q, k, v = self._qkv(x, positions)
        keys, values = kv_cache.write(cache, k, v, positions)
        visible = jnp.arange(keys.shape[1])[None, None, None, :] <= positions[:, None, :, None]  # [B, 1, T, S]
        y = jax.nn.dot_product_attention(q, keys, values, mask=visible)
        y = self.c_proj(y.reshape(B, T, C))
        return y, (keys, values)
