"""The GPT language model (flax.linen), its parameter count and its loss.

>>> import jax, jax.numpy as jnp
>>> from theseus.model.config import GPTConfig
>>> cfg = GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=256, block_size=16)
>>> model = GPT(cfg)
>>> idx = jnp.zeros((2, 16), jnp.int32)
>>> params = model.init(jax.random.PRNGKey(0), idx)["params"]
>>> logits = model.apply({"params": params}, idx)
>>> logits.shape, logits.dtype
((2, 16, 256), dtype('float32'))
>>> loss = loss_fn(logits, idx, jnp.ones((2, 16), bool))
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from theseus.model.config import GPTConfig
from theseus.model.kv_cache import check_call, empty_cache
from theseus.model.layers.block import Block
from theseus.model.layers.dense import INIT_STD, layer_norm
from theseus.model.layers.packed import packed_inputs


class GPT(nn.Module):
    """Decoder-only transformer: wte (+ wpe), blocks_0..blocks_{L-1}, ln_f, tied unembedding.

    Parameter tree (bias leaves only when `config.bias`, `wpe` only when not `config.rope`):

        wte/embedding                       [vocab_size, n_embd]
        wpe/embedding                       [block_size, n_embd]
        blocks_i/ln_1/{scale,bias}          [n_embd]
        blocks_i/attn/c_attn/{kernel,bias}  [n_embd, 3*n_embd], [3*n_embd]
        blocks_i/attn/c_proj/{kernel,bias}  [n_embd, n_embd], [n_embd]
        blocks_i/ln_2/{scale,bias}          [n_embd]
        blocks_i/mlp/c_fc/{kernel,bias}     [n_embd, mlp_dim], [mlp_dim]
        blocks_i/mlp/c_proj/{kernel,bias}   [mlp_dim, n_embd], [n_embd]
        ln_f/{scale,bias}                   [n_embd]

    `__call__(idx [B, T] int, deterministic=True)` returns float32 logits [B, T, vocab_size];
    the unembedding multiplies by `wte/embedding` in the activation dtype and accumulates
    in float32. With `deterministic=False` and `config.dropout > 0` it needs a 'dropout' rng.

    Decoding (`theseus.model.decode`): with ``positions`` [B, T] (each token's position in
    its row) and ``cache`` (``init_cache(batch, length)``: one ``(keys, values)`` pair per
    block) it returns ``(logits, cache)``, the tokens' keys and values written into the
    cache at their positions; positions index the learned position table or rotate RoPE.

    Packed rows (training and evaluation, no cache): ``segment_ids`` [B, T] int (0: padding) keep each
    token's attention inside its own sequence, and ``positions`` [B, T] (restarting at 0 per sequence) index
    the position table or rotate RoPE, so each sequence's logits are those it gets alone. Without either the
    pass is the plain causal one (the second example below).

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model.config import GPTConfig
    >>> cfg = GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=256, block_size=8)
    >>> params = GPT(cfg).init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    >>> sorted(params)
    ['blocks_0', 'blocks_1', 'ln_f', 'wte']

    >>> fp32 = GPTConfig(n_embd=32, n_head=4, n_layers=2, vocab_size=256, block_size=8, rope=False,
    ...                  activation_dtype="float32")
    >>> params = GPT(fp32).init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"]
    >>> tokens = jnp.array([[3, 1, 4, 1, 5, 9, 2, 6]])
    >>> alone = GPT(fp32).apply({"params": params}, tokens[:, 5:])
    >>> packed = GPT(fp32).apply({"params": params}, tokens, segment_ids=jnp.array([[1, 1, 1, 1, 1, 2, 2, 2]]),
    ...                          positions=jnp.array([[0, 1, 2, 3, 4, 0, 1, 2]]))
    >>> bool(jnp.allclose(packed[:, 5:], alone, atol=1e-5))
    True
    """

    config: GPTConfig

    def init_cache(self, batch: int, length: int) -> tuple[tuple[jax.Array, jax.Array], ...]:
        """An empty key/value cache for ``batch`` rows of ``length`` positions (at most ``block_size``):
        per block, keys and values [batch, length, n_head, head_dim] of zeros in the activation dtype.

        >>> from theseus.model.config import GPTConfig
        >>> cache = GPT(GPTConfig(n_embd=32, n_head=4, n_layers=2, block_size=8)).init_cache(3, 8)
        >>> len(cache), cache[0][0].shape
        (2, (3, 8, 4, 8))
        """
        return empty_cache(self.config, batch, length, self.config.n_head, self.config.head_dim)

    @nn.compact
    def __call__(self, idx: jax.Array, deterministic: bool = True, *, positions: jax.Array | None = None,
                 cache: tuple[tuple[jax.Array, jax.Array], ...] | None = None,
                 segment_ids: jax.Array | None = None):
        cfg = self.config
        check_call(cfg, "GPT", idx, positions, cache, segment_ids)
        packed_positions, mask = (None, None) if cache is not None else packed_inputs(idx, segment_ids, positions, 0)
        T = idx.shape[1]

        embed = dict(
            features=cfg.n_embd,
            dtype=cfg.activation_jnp_dtype,
            param_dtype=cfg.param_jnp_dtype,
            embedding_init=nn.initializers.normal(stddev=INIT_STD),
        )
        wte = nn.Embed(cfg.vocab_size, name="wte", **embed)
        x = wte(idx)
        if not cfg.rope:
            x = x + nn.Embed(cfg.block_size, name="wpe", **embed)(jnp.arange(T)[None, :] if positions is None
                                                                  else positions)
        x = nn.Dropout(rate=cfg.dropout)(x, deterministic=deterministic)

        caches = []
        for i in range(cfg.n_layers):
            block = Block(cfg, name=f"blocks_{i}")
            if cache is None:
                x = block(x, deterministic=deterministic, positions=packed_positions, mask=mask)
            else:
                x, layer_cache = block.decode(x, positions, cache[i])
                caches.append(layer_cache)
        x = layer_norm(cfg, name="ln_f")(x)

        embedding = wte.embedding.astype(cfg.activation_jnp_dtype)
        logits = jnp.einsum("btc,vc->btv", x, embedding, preferred_element_type=jnp.float32)
        return logits if cache is None else (logits, tuple(caches))


def count_params(params, non_embedding: bool = False) -> int:
    """Number of scalars in a parameter tree.

    With `non_embedding=True` the learned position table `wpe` is left out, as in
    nanoGPT (`wte` stays: it is also the output layer). This is the N of the 6N
    FLOPs-per-token estimate.

    >>> import jax.numpy as jnp
    >>> params = {"wte": {"embedding": jnp.zeros((10, 4))}, "wpe": {"embedding": jnp.zeros((8, 4))}}
    >>> count_params(params), count_params(params, non_embedding=True)
    (72, 40)
    """
    total = sum(int(leaf.size) for leaf in jax.tree.leaves(params))
    if non_embedding and "wpe" in params:
        total -= sum(int(leaf.size) for leaf in jax.tree.leaves(params["wpe"]))
    return total


def cross_entropy(logits: jax.Array, y: jax.Array) -> jax.Array:
    """Per-token cross-entropy [B, T] of logits [B, T, V] against targets y [B, T], in float32.

    >>> import jax.numpy as jnp
    >>> round(float(cross_entropy(jnp.zeros((1, 1, 4)), jnp.zeros((1, 1), jnp.int32))[0, 0]), 4)
    1.3863
    """
    logits = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(logits, axis=-1)
    target = jnp.take_along_axis(logits, y[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return lse - target


def loss_fn(logits: jax.Array, y: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean cross-entropy over the tokens where mask is True (0.0 when none are).

    >>> import jax.numpy as jnp
    >>> logits = jnp.zeros((1, 2, 4)).at[0, 1, 0].set(100.0)
    >>> y = jnp.zeros((1, 2), jnp.int32)
    >>> float(loss_fn(logits, y, jnp.array([[False, True]])))
    0.0
    """
    mask = mask.astype(jnp.float32)
    total = jnp.sum(cross_entropy(logits, y) * mask)
    return total / jnp.maximum(jnp.sum(mask), 1.0)
