"""Causal multi-head self-attention with a fused qkv projection (`c_attn`) and `c_proj`.

Scores and softmax are computed in float32 (`jax.nn.dot_product_attention`, XLA
implementation); queries and keys are rotated by RoPE when `config.rope`.

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

from theseus.model.config import GPTConfig
from theseus.model.layers.dense import dense, residual_std
from theseus.model.layers.rope import apply_rope


class CausalSelfAttention(nn.Module):
    """Causal self-attention over x [B, T, n_embd].

    Parameters: `c_attn/{kernel,bias}` [n_embd, 3 * n_embd] (q, k, v side by side),
    `c_proj/{kernel,bias}` [n_embd, n_embd]. The output goes through residual dropout.

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

    def __call__(self, x: jax.Array, deterministic: bool = True) -> jax.Array:
        cfg = self.config
        B, T, C = x.shape
        qkv = self.c_attn(x)
        q, k, v = jnp.split(qkv, 3, axis=-1)
        q = q.reshape(B, T, cfg.n_head, cfg.head_dim)
        k = k.reshape(B, T, cfg.n_head, cfg.head_dim)
        v = v.reshape(B, T, cfg.n_head, cfg.head_dim)
        if cfg.rope:
            positions = jnp.arange(T)
            q = apply_rope(q, positions)
            k = apply_rope(k, positions)
        y = jax.nn.dot_product_attention(q, k, v, is_causal=True)
        y = y.reshape(B, T, C)
        y = self.c_proj(y)
        y = self.dropout(y, deterministic=deterministic)
        return y
