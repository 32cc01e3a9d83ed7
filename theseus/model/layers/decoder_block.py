"""A decoder block: pre-norm attention and MLP, sequential (x + attn, then + mlp) or parallel (GPT-NeoX:
x + attn(norm1 x) + mlp(norm2 x)).

>>> import jax, jax.numpy as jnp
>>> from theseus.model.decoder_config import DecoderConfig
>>> cfg = DecoderConfig(n_embd=32, n_head=4, intermediate_size=64)
>>> sorted(DecoderBlock(cfg).init(jax.random.PRNGKey(0), jnp.ones((1, 3, 32)))["params"])
['attn', 'input_norm', 'mlp', 'post_norm']
"""

import flax.linen as nn
import jax

from theseus.model.decoder_config import DecoderConfig
from theseus.model.layers.feedforward import DecoderMLP
from theseus.model.layers.gqa import GroupedQueryAttention
from theseus.model.layers.norms import decoder_norm


class DecoderBlock(nn.Module):
    """Submodules `input_norm`, `attn` (GroupedQueryAttention), `post_norm`, `mlp` (DecoderMLP).

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model.decoder_config import DecoderConfig
    >>> cfg = DecoderConfig.for_family("gpt_neox", n_embd=32, n_head=4, intermediate_size=64)
    >>> out, _ = DecoderBlock(cfg).init_with_output(jax.random.PRNGKey(0), jnp.ones((1, 3, 32)))
    >>> out.shape
    (1, 3, 32)
    """

    config: DecoderConfig

    def setup(self):
        self.input_norm = decoder_norm(self.config)
        self.attn = GroupedQueryAttention(self.config)
        self.post_norm = decoder_norm(self.config)
        self.mlp = DecoderMLP(self.config)

    def _residual(self, x: jax.Array, attended: jax.Array) -> jax.Array:
        if self.config.parallel_residual:
            return x + attended + self.mlp(self.post_norm(x))
        x = x + attended
        return x + self.mlp(self.post_norm(x))

    def __call__(self, x: jax.Array, positions: jax.Array | None = None, mask: jax.Array | None = None) -> jax.Array:
        """The block over x [B, T, n_embd]; ``positions`` and ``mask`` go to the attention (packed rows).

        >>> import jax, jax.numpy as jnp
        >>> from theseus.model.decoder_config import DecoderConfig

        RoPE is relative, so moving every position by 5 changes nothing:

        >>> block = DecoderBlock(DecoderConfig(n_embd=32, n_head=4, intermediate_size=64, activation_dtype="float32"))
        >>> x = jax.random.normal(jax.random.PRNGKey(1), (1, 3, 32))
        >>> params = block.init(jax.random.PRNGKey(0), x)
        >>> bool(jnp.allclose(block.apply(params, x, jnp.arange(3)[None] + 5), block.apply(params, x), atol=1e-5))
        True
        """
        return self._residual(x, self.attn(self.input_norm(x), positions, mask))

    def decode(self, x: jax.Array, positions: jax.Array,
               cache: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        """The block over a key/value cache (`GroupedQueryAttention.decode`): ``(x, cache)``.

        >>> import jax, jax.numpy as jnp
        >>> from theseus.model.decoder_config import DecoderConfig
        >>> cfg = DecoderConfig(n_embd=32, n_head=4, intermediate_size=64, activation_dtype="float32")
        >>> x = jnp.ones((1, 2, 32))
        >>> params = DecoderBlock(cfg).init(jax.random.PRNGKey(0), x)
        >>> empty = (jnp.zeros((1, 4, 4, 8)), jnp.zeros((1, 4, 4, 8)))
        >>> y, _ = DecoderBlock(cfg).apply(params, x, jnp.arange(2)[None], empty, method="decode")
        >>> bool(jnp.allclose(y, DecoderBlock(cfg).apply(params, x), atol=1e-6))
        True
        """
        attended, cache = self.attn.decode(self.input_norm(x), positions, cache)
        return self._residual(x, attended), cache
