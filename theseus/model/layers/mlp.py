"""The transformer MLP: c_fc, gelu, c_proj, dropout.

Submodules are built in `setup()`, so on a bound module each one is callable on its
own, e.g. `layer.c_fc(x)`:

>>> import jax, jax.numpy as jnp
>>> from theseus.model.config import GPTConfig
>>> cfg = GPTConfig(n_embd=32, n_head=4, n_layers=2, activation_dtype="float32")
>>> mlp = MLP(cfg)
>>> x = jnp.ones((1, 3, 32))
>>> params = mlp.init(jax.random.PRNGKey(0), x)["params"]
>>> layer = mlp.bind({"params": params})
>>> layer.c_fc(x).shape, layer(x).shape
((1, 3, 128), (1, 3, 32))
"""

import flax.linen as nn
import jax

from theseus.model.config import GPTConfig
from theseus.model.layers.dense import dense, residual_std


class MLP(nn.Module):
    """Position-wise feed-forward: Dense n_embd -> mlp_dim, gelu, Dense mlp_dim -> n_embd, dropout.

    Parameters: `c_fc/{kernel,bias}` [n_embd, mlp_dim], `c_proj/{kernel,bias}` [mlp_dim, n_embd].
    Dropout needs a 'dropout' rng when `deterministic=False` and `config.dropout > 0`.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model.config import GPTConfig
    >>> cfg = GPTConfig(n_embd=32, n_head=4, n_layers=2)
    >>> out, _ = MLP(cfg).init_with_output(jax.random.PRNGKey(0), jnp.ones((2, 5, 32)))
    >>> out.shape, out.dtype
    ((2, 5, 32), dtype(bfloat16))
    """

    config: GPTConfig

    def setup(self):
        self.c_fc = dense(self.config, self.config.mlp_dim)
        self.c_proj = dense(self.config, self.config.n_embd, std=residual_std(self.config))
        self.dropout = nn.Dropout(rate=self.config.dropout)

    def __call__(self, x: jax.Array, deterministic: bool = True) -> jax.Array:
        x = self.c_fc(x)
        x = jax.nn.gelu(x)
        x = self.c_proj(x)
        x = self.dropout(x, deterministic=deterministic)
        return x
