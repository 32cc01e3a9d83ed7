"""A pre-LayerNorm transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x)).

>>> import jax, jax.numpy as jnp
>>> from theseus.model.config import GPTConfig
>>> cfg = GPTConfig(n_embd=32, n_head=4, n_layers=2)
>>> params = Block(cfg).init(jax.random.PRNGKey(0), jnp.ones((1, 3, 32)))["params"]
>>> sorted(params)
['attn', 'ln_1', 'ln_2', 'mlp']
"""

import flax.linen as nn
import jax

from theseus.model.config import GPTConfig
from theseus.model.layers.attention import CausalSelfAttention
from theseus.model.layers.dense import layer_norm
from theseus.model.layers.mlp import MLP


class Block(nn.Module):
    """Submodules `ln_1`, `attn` (CausalSelfAttention), `ln_2`, `mlp` (MLP), built in setup().

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model.config import GPTConfig
    >>> cfg = GPTConfig(n_embd=32, n_head=4, n_layers=2)
    >>> out, _ = Block(cfg).init_with_output(jax.random.PRNGKey(0), jnp.ones((1, 3, 32)))
    >>> out.shape
    (1, 3, 32)
    """

    config: GPTConfig

    def setup(self):
        self.ln_1 = layer_norm(self.config)
        self.attn = CausalSelfAttention(self.config)
        self.ln_2 = layer_norm(self.config)
        self.mlp = MLP(self.config)

    def __call__(self, x: jax.Array, deterministic: bool = True, positions: jax.Array | None = None,
                 mask: jax.Array | None = None) -> jax.Array:
        """The block over x [B, T, n_embd]; ``positions`` and ``mask`` go to the attention (packed rows).

        >>> import jax, jax.numpy as jnp
        >>> from theseus.model.config import GPTConfig
        >>> cfg = GPTConfig(n_embd=32, n_head=4, n_layers=1, activation_dtype="float32")
        >>> x = jnp.ones((1, 3, 32))
        >>> params = Block(cfg).init(jax.random.PRNGKey(0), x)
        >>> everything = jnp.ones((1, 1, 3, 3), bool)
        >>> bool(jnp.allclose(Block(cfg).apply(params, x, mask=everything), Block(cfg).apply(params, x)))
        True
        """
        x = x + self.attn(self.ln_1(x), deterministic=deterministic, positions=positions, mask=mask)
        x = x + self.mlp(self.ln_2(x), deterministic=deterministic)
        return x

    def decode(self, x: jax.Array, positions: jax.Array,
               cache: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        """The block over a key/value cache (`CausalSelfAttention.decode`), without dropout: ``(x, cache)``.

        >>> import jax, jax.numpy as jnp
        >>> from theseus.model.config import GPTConfig
        >>> cfg = GPTConfig(n_embd=32, n_head=4, n_layers=1, activation_dtype="float32")
        >>> x = jnp.ones((1, 2, 32))
        >>> params = Block(cfg).init(jax.random.PRNGKey(0), x)
        >>> empty = (jnp.zeros((1, 4, 4, 8)), jnp.zeros((1, 4, 4, 8)))
        >>> y, _ = Block(cfg).apply(params, x, jnp.arange(2)[None], empty, method="decode")
        >>> bool(jnp.allclose(y, Block(cfg).apply(params, x), atol=1e-6))
        True
        """
        attended, cache = self.attn.decode(self.ln_1(x), positions, cache)
        x = x + attended
        x = x + self.mlp(self.ln_2(x), deterministic=True)
        return x, cache
