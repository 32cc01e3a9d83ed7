"""The open-model decoder (flax.linen): one module whose `DecoderConfig` switches give Llama 1/2/3, Mistral,
Qwen2/2.5, Qwen3, Gemma and GPT-NeoX; called like `theseus.model.gpt.GPT` (training, decoding with a cache).

>>> import jax, jax.numpy as jnp
>>> from theseus.model.decoder_config import DecoderConfig
>>> cfg = DecoderConfig.for_family("llama", n_embd=32, n_head=4, n_kv_head=2, n_layers=2, vocab_size=64,
...                                intermediate_size=64, block_size=16)
>>> model = Decoder(cfg)
>>> idx = jnp.zeros((2, 16), jnp.int32)
>>> params = model.init(jax.random.PRNGKey(0), idx)["params"]
>>> logits = model.apply({"params": params}, idx)
>>> logits.shape, logits.dtype, sorted(params)
((2, 16, 64), dtype('float32'), ['blocks_0', 'blocks_1', 'embed', 'final_norm', 'lm_head'])
"""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from theseus.model.decoder_config import DecoderConfig
from theseus.model.kv_cache import check_call, empty_cache
from theseus.model.layers.decoder_block import DecoderBlock
from theseus.model.layers.feedforward import INIT_STD
from theseus.model.layers.norms import decoder_norm
from theseus.model.layers.packed import packed_inputs


class Unembedding(nn.Module):
    """Logits x @ kernel [n_embd, vocab_size] in the activation dtype, accumulated and returned in float32.

    >>> import jax, jax.numpy as jnp
    >>> out, _ = Unembedding(8, jnp.float32, jnp.float32).init_with_output(jax.random.PRNGKey(0), jnp.ones((1, 2, 4)))
    >>> out.shape
    (1, 2, 8)
    """

    vocab_size: int
    dtype: jnp.dtype
    param_dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", nn.initializers.normal(stddev=INIT_STD), (x.shape[-1], self.vocab_size),
                            self.param_dtype)
        return jnp.einsum("btc,cv->btv", x, kernel.astype(self.dtype), preferred_element_type=jnp.float32)


class Decoder(nn.Module):
    """Token embedding, ``n_layers`` `DecoderBlock` s, a final norm, then the unembedding (the embedding's
    transpose when ``tie_embeddings``).

    Parameter tree (see the layers for what each holds)::

        embed/embedding                     [vocab_size, n_embd]
        blocks_i/input_norm, post_norm      {scale[, bias]} [n_embd]
        blocks_i/attn/{q,k,v,o}_proj        {kernel[, bias]}; q_norm, k_norm {scale} [head_size]
        blocks_i/mlp/{gate,up,down}_proj    {kernel[, bias]}
        final_norm                          {scale[, bias]} [n_embd]
        lm_head/kernel                      [n_embd, vocab_size] (untied only)

    ``__call__(idx [B, T], deterministic=True)`` returns float32 logits [B, T, vocab_size]; these families have
    no dropout, so ``deterministic`` changes nothing. With ``positions`` [B, T] and ``cache``
    (``init_cache(batch, length)``) it returns ``(logits, cache)`` as `theseus.model.decode` expects. Packed rows
    (no cache): ``segment_ids`` [B, T] int (0: padding) keep attention inside each sequence and ``positions``
    [B, T] (restarting at 0 per sequence) rotate RoPE and place the sliding window, as in `theseus.model.gpt.GPT`.
    ``config.remat`` checkpoints each block's activations under that policy when traced (same values, less
    memory); an eager call runs the blocks as they are.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model.decoder_config import DecoderConfig
    >>> cfg = DecoderConfig.for_family("gemma", n_embd=32, n_head=4, n_layers=1, vocab_size=64,
    ...                                intermediate_size=64, block_size=8)
    >>> sorted(Decoder(cfg).init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))["params"])
    ['blocks_0', 'embed', 'final_norm']

    Two sequences packed in one row give the logits each gets alone:

    >>> cfg = DecoderConfig.for_family("mistral", n_embd=32, n_head=4, n_kv_head=2, n_layers=1, vocab_size=64,
    ...                                intermediate_size=64, block_size=8, sliding_window=2, activation_dtype="float32")
    >>> tokens = jnp.array([[3, 1, 4, 1, 5, 9, 2, 6]])
    >>> params = Decoder(cfg).init(jax.random.PRNGKey(0), tokens)["params"]
    >>> packed = Decoder(cfg).apply({"params": params}, tokens, segment_ids=jnp.array([[1, 1, 1, 2, 2, 2, 2, 2]]),
    ...                             positions=jnp.array([[0, 1, 2, 0, 1, 2, 3, 4]]))
    >>> bool(jnp.allclose(packed[:, 3:], Decoder(cfg).apply({"params": params}, tokens[:, 3:]), atol=1e-5))
    True
    """

    config: DecoderConfig

    def init_cache(self, batch: int, length: int) -> tuple[tuple[jax.Array, jax.Array], ...]:
        """An empty key/value cache of ``length`` (at most ``block_size``) positions: per block, keys and values
        [batch, length, kv_heads, head_size] of zeros in the activation dtype.

        >>> from theseus.model.decoder_config import DecoderConfig
        >>> cache = Decoder(DecoderConfig(n_embd=32, n_head=4, n_kv_head=1, n_layers=2, block_size=8)).init_cache(3, 8)
        >>> len(cache), cache[0][0].shape
        (2, (3, 8, 1, 8))
        """
        return empty_cache(self.config, batch, length, self.config.kv_heads, self.config.head_size)

    @nn.compact
    def __call__(self, idx: jax.Array, deterministic: bool = True, *, positions: jax.Array | None = None,
                 cache: tuple[tuple[jax.Array, jax.Array], ...] | None = None,
                 segment_ids: jax.Array | None = None):
        cfg = self.config
        check_call(cfg, "Decoder", idx, positions, cache, segment_ids)
        packed_positions, mask = ((None, None) if cache is not None
                                  else packed_inputs(idx, segment_ids, positions, cfg.sliding_window))

        embed = nn.Embed(cfg.vocab_size, cfg.n_embd, dtype=cfg.activation_jnp_dtype, param_dtype=cfg.param_jnp_dtype,
                         embedding_init=nn.initializers.normal(stddev=INIT_STD), name="embed")
        x = embed(idx)
        if cfg.embed_scale:
            x = x * jnp.asarray(math.sqrt(cfg.n_embd), x.dtype)

        block_class = DecoderBlock
        # remat under a transformation only: an eager call (the debugger's capture) must see arrays, not tracers
        if cfg.remat != "none" and cache is None and isinstance(x, jax.core.Tracer):
            block_class = nn.remat(DecoderBlock, policy=getattr(jax.checkpoint_policies, cfg.remat))
        caches = []
        for i in range(cfg.n_layers):
            if cache is None:
                x = block_class(cfg, name=f"blocks_{i}")(x, packed_positions, mask)
            else:
                x, layer_cache = DecoderBlock(cfg, name=f"blocks_{i}").decode(x, positions, cache[i])
                caches.append(layer_cache)
        x = decoder_norm(cfg, name="final_norm")(x)

        if cfg.tie_embeddings:
            logits = jnp.einsum("btc,vc->btv", x, embed.embedding.astype(cfg.activation_jnp_dtype),
                                preferred_element_type=jnp.float32)
        else:
            logits = Unembedding(cfg.vocab_size, cfg.activation_jnp_dtype, cfg.param_jnp_dtype, name="lm_head")(x)
        return logits if cache is None else (logits, tuple(caches))
