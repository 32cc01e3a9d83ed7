"""The decoder's MLP: gated (SwiGLU with silu, GeGLU with gelu) or plain (up, activation, down), by config.

>>> import jax, jax.numpy as jnp
>>> from theseus.model.decoder_config import DecoderConfig
>>> cfg = DecoderConfig(n_embd=32, n_head=4, intermediate_size=64, activation_dtype="float32")
>>> params = DecoderMLP(cfg).init(jax.random.PRNGKey(0), jnp.ones((1, 3, 32)))["params"]
>>> sorted(params), params["gate_proj"]["kernel"].shape
(['down_proj', 'gate_proj', 'up_proj'], (32, 64))
"""

import math

import flax.linen as nn
import jax

from theseus.model.decoder_config import DecoderConfig

INIT_STD = 0.02
ACTIVATIONS = {
    "silu": jax.nn.silu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
}


def projection(config: DecoderConfig, features: int, bias: bool, residual: bool = False,
               name: str | None = None) -> nn.Dense:
    """A Dense layer in the config's dtypes, normal(0.02) kernel (0.02 / sqrt(2 * n_layers) when it writes into the
    residual stream), zero bias.

    >>> from theseus.model.decoder_config import DecoderConfig
    >>> projection(DecoderConfig(n_embd=32, n_head=4), 8, bias=True).use_bias
    True
    """
    std = INIT_STD / math.sqrt(2 * config.n_layers) if residual else INIT_STD
    return nn.Dense(features, use_bias=bias, dtype=config.activation_jnp_dtype, param_dtype=config.param_jnp_dtype,
                    kernel_init=nn.initializers.normal(stddev=std), bias_init=nn.initializers.zeros, name=name)


class DecoderMLP(nn.Module):
    """down_proj(act(gate_proj(x)) * up_proj(x)) when ``config.mlp == "gated"``, else down_proj(act(up_proj(x))).

    Parameters: `gate_proj` (gated only) and `up_proj` [n_embd, mlp_dim], `down_proj` [mlp_dim, n_embd], each
    with a bias when ``config.mlp_bias``.

    >>> import jax, jax.numpy as jnp
    >>> from theseus.model.decoder_config import DecoderConfig
    >>> cfg = DecoderConfig.for_family("gpt_neox", n_embd=32, n_head=4, intermediate_size=64)
    >>> params = DecoderMLP(cfg).init(jax.random.PRNGKey(0), jnp.ones((1, 3, 32)))["params"]
    >>> sorted(params), sorted(params["up_proj"])
    (['down_proj', 'up_proj'], ['bias', 'kernel'])
    """

    config: DecoderConfig

    def setup(self):
        cfg = self.config
        if cfg.mlp == "gated":
            self.gate_proj = projection(cfg, cfg.mlp_dim, cfg.mlp_bias)
        self.up_proj = projection(cfg, cfg.mlp_dim, cfg.mlp_bias)
        self.down_proj = projection(cfg, cfg.n_embd, cfg.mlp_bias, residual=True)

    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.config.activation]
        hidden = act(self.gate_proj(x)) * self.up_proj(x) if self.config.mlp == "gated" else act(self.up_proj(x))
        return self.down_proj(hidden)
