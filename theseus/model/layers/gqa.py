"""Grouped-query causal self-attention for the decoder: separate q/k/v projections (bias by config), optional
RMSNorm of each query and key head (Qwen3), RoPE on the leading rotary dims, an optional sliding window.

Attention runs through `jax.nn.dot_product_attention` (`causal_attention`: cuDNN's fused kernel on a GPU in
bf16/fp16, XLA's elsewhere); key/value heads are shared by ``group_size`` query heads without being copied.
``decode`` is the same layer over a cache.

>>> import jax, jax.numpy as jnp
>>> from theseus.model.decoder_config import DecoderConfig
>>> cfg = DecoderConfig(n_embd=32, n_head=4, n_kv_head=2, activation_dtype="float32")
>>> out, params = GroupedQueryAttention(cfg).init_with_output(jax.random.PRNGKey(0), jnp.ones((2, 5, 32)))
>>> out.shape, params["params"]["k_proj"]["kernel"].shape
((2, 5, 32), (32, 16))
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from theseus.model import kv_cache
from theseus.model.decoder_config import DecoderConfig
from theseus.model.layers.feedforward import projection
from theseus.model.layers.norms import RMSNorm
from theseus.model.layers.rotary import apply_rotary, inverse_frequencies


def visible_positions(query_positions: jax.Array, length: int, window: int) -> jax.Array:
    """[B, 1, T, S] mask: which of ``length`` cached positions each query (at ``query_positions`` [B, T]) sees:
    those at or before it, and within ``window`` of it when ``window`` > 0.

    >>> import jax.numpy as jnp
    >>> visible_positions(jnp.array([[3]]), 5, 2)[0, 0, 0].tolist()
    [False, False, True, True, False]
    """
    keys = jnp.arange(length)[None, None, None, :]
    queries = query_positions[:, None, :, None]
    visible = keys <= queries
    return visible & (keys > queries - window) if window else visible


def causal_attention(q: jax.Array, k: jax.Array, v: jax.Array, window: int, mode: str,
                     mask: jax.Array | None = None) -> jax.Array:
    """Causal attention of q [B, T, n_head, D] over k, v [B, T, kv_heads, D] (within ``window`` when > 0) through
    `jax.nn.dot_product_attention`: cuDNN's fused kernel when ``mode`` is "auto", the backend a GPU and q bf16 or
    fp16 (a shape cuDNN refuses when traced falls back), else XLA's, which is the CPU's result.

    A ``mask`` [B, 1, T, T] (packed rows, `theseus.model.layers.packed.packed_mask`) replaces the window, which it
    already holds, and always runs XLA's: cuDNN's fused kernel, as `jax.nn.dot_product_attention` exposes it, has
    no segment-id mask (an arbitrary mask becomes a dense bias) and this path is checked on the CPU only.

    >>> import jax.numpy as jnp
    >>> q = jnp.ones((1, 3, 2, 4))
    >>> causal_attention(q, q[:, :, :1], q[:, :, :1], 0, "auto").shape
    (1, 3, 2, 4)
    """
    if mask is not None:
        return jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=True, implementation="xla")
    options = dict(is_causal=True, local_window_size=(window - 1, 0) if window else None)
    if mode == "auto" and jax.default_backend() == "gpu" and q.dtype in (jnp.bfloat16, jnp.float16):
        try:
            return jax.nn.dot_product_attention(q, k, v, implementation="cudnn", **options)
        except (NotImplementedError, ValueError, RuntimeError):  # no cuDNN, or a shape it does not take
            pass
    return jax.nn.dot_product_attention(q, k, v, implementation="xla", **options)


class GroupedQueryAttention(nn.Module):
    """Causal attention over x [B, T, n_embd] with n_head query heads and kv_heads key/value heads.

    Parameters: `q_proj` [n_embd, n_head * head_size], `k_proj` / `v_proj` [n_embd, kv_heads * head_size] (bias
    when ``qkv_bias``), `o_proj` [n_head * head_size, n_embd] (bias when ``o_bias``), `q_norm` / `k_norm`
    [head_size] when ``qk_norm``.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model.decoder_config import DecoderConfig
    >>> cfg = DecoderConfig.for_family("qwen3", n_embd=32, n_head=4, n_kv_head=1)
    >>> sorted(GroupedQueryAttention(cfg).init(jax.random.PRNGKey(0), jnp.ones((1, 3, 32)))["params"])
    ['k_norm', 'k_proj', 'o_proj', 'q_norm', 'q_proj', 'v_proj']
    """

    config: DecoderConfig

    def setup(self):
        cfg = self.config
        self.q_proj = projection(cfg, cfg.n_head * cfg.head_size, cfg.qkv_bias)
        self.k_proj = projection(cfg, cfg.kv_heads * cfg.head_size, cfg.qkv_bias)
        self.v_proj = projection(cfg, cfg.kv_heads * cfg.head_size, cfg.qkv_bias)
        self.o_proj = projection(cfg, cfg.n_embd, cfg.o_bias, residual=True)
        if cfg.qk_norm:
            norm = dict(eps=cfg.norm_eps, unit_offset=cfg.norm_unit_offset, dtype=cfg.activation_jnp_dtype,
                        param_dtype=cfg.param_jnp_dtype)
            self.q_norm = RMSNorm(**norm)
            self.k_norm = RMSNorm(**norm)

    def _qkv(self, x: jax.Array, positions: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """q [B, T, n_head, head_size], k and v [B, T, kv_heads, head_size], q and k normed and rotated."""
        cfg = self.config
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, T, cfg.n_head, cfg.head_size)
        k = self.k_proj(x).reshape(B, T, cfg.kv_heads, cfg.head_size)
        v = self.v_proj(x).reshape(B, T, cfg.kv_heads, cfg.head_size)
        if cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        inv_freq = inverse_frequencies(cfg)
        return apply_rotary(q, positions, inv_freq), apply_rotary(k, positions, inv_freq), v

    def __call__(self, x: jax.Array, positions: jax.Array | None = None, mask: jax.Array | None = None) -> jax.Array:
        """Causal attention of x [B, T, n_embd]; ``positions`` [B, T] rotate RoPE (default 0..T-1) and ``mask``
        [B, 1, T, T] (packed rows: `theseus.model.layers.packed.packed_mask`, window included) replaces the causal
        window.

        >>> import jax, jax.numpy as jnp
        >>> from theseus.model.decoder_config import DecoderConfig
        >>> from theseus.model.layers.packed import packed_mask

        A window of 2 over a row whose last slot is padding (segment 0): the real tokens get what they get alone.

        >>> cfg = DecoderConfig(n_embd=32, n_head=4, sliding_window=2, activation_dtype="float32")
        >>> layer = GroupedQueryAttention(cfg)
        >>> x = jax.random.normal(jax.random.PRNGKey(1), (1, 4, 32))
        >>> params = layer.init(jax.random.PRNGKey(0), x)
        >>> mask = packed_mask(jnp.array([[1, 1, 1, 0]]), jnp.arange(4)[None], window=2)
        >>> real = layer.apply(params, x, jnp.arange(4)[None], mask)[:, :3]
        >>> bool(jnp.allclose(real, layer.apply(params, x[:, :3]), atol=1e-6))
        True
        """
        B, T, _ = x.shape
        q, k, v = self._qkv(x, jnp.arange(T) if positions is None else positions)
        y = causal_attention(q, k, v, self.config.sliding_window, self.config.attention, mask)
        return self.o_proj(y.reshape(B, T, -1))

    def decode(self, x: jax.Array, positions: jax.Array,
               cache: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        """Attention of x [B, T, n_embd] at ``positions`` [B, T] over ``(keys, values)`` [B, S, kv_heads,
        head_size]: x's keys and values are written at its positions, then each query sees the cached positions
        `visible_positions` allows. Returns ``(y, (keys, values))``; on an empty cache it is ``__call__``:

        >>> import jax, jax.numpy as jnp
        >>> from theseus.model.decoder_config import DecoderConfig
        >>> cfg = DecoderConfig(n_embd=32, n_head=4, n_kv_head=2, sliding_window=2, activation_dtype="float32")
        >>> x = jax.random.normal(jax.random.PRNGKey(1), (1, 4, 32))
        >>> layer = GroupedQueryAttention(cfg)
        >>> params = layer.init(jax.random.PRNGKey(0), x)
        >>> empty = (jnp.zeros((1, 6, 2, 8)), jnp.zeros((1, 6, 2, 8)))
        >>> y, _ = layer.apply(params, x, jnp.arange(4)[None], empty, method="decode")
        >>> bool(jnp.allclose(y, layer.apply(params, x), atol=1e-6))
        True
        """
        B, T, _ = x.shape
        q, k, v = self._qkv(x, positions)
        keys, values = kv_cache.write(cache, k, v, positions)
        mask = visible_positions(positions, keys.shape[1], self.config.sliding_window)
        y = jax.nn.dot_product_attention(q, keys.astype(q.dtype), values.astype(q.dtype), mask=mask)
        return self.o_proj(y.reshape(B, T, -1)), (keys, values)
