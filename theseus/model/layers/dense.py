"""Dense and LayerNorm factories that apply a GPTConfig's dtype policy and nanoGPT's init.

Parameters are stored in `config.param_dtype`; computation runs in
`config.activation_dtype`. Kernels start at normal(0.02), residual projections
(`c_proj`) at normal(0.02 / sqrt(2 * n_layers)), biases at zero.

>>> from theseus.model.config import GPTConfig
>>> layer = dense(GPTConfig(n_embd=64, n_head=4, n_layers=2), 128)
>>> layer.features
128
"""

import math

import flax.linen as nn

from theseus.model.config import GPTConfig

INIT_STD = 0.02


def residual_std(config: GPTConfig) -> float:
    """Init std of projections that write into the residual stream: 0.02 / sqrt(2 * n_layers).

    >>> residual_std(GPTConfig(n_embd=64, n_head=4, n_layers=2))
    0.01
    """
    return INIT_STD / math.sqrt(2 * config.n_layers)


def dense(config: GPTConfig, features: int, std: float = INIT_STD, name: str | None = None) -> nn.Dense:
    """A Dense layer with the config's bias switch, dtype policy and a normal(std) kernel.

    >>> from theseus.model.config import GPTConfig
    >>> dense(GPTConfig(n_embd=64, n_head=4, bias=False), 32).use_bias
    False
    """
    return nn.Dense(
        features,
        use_bias=config.bias,
        dtype=config.activation_jnp_dtype,
        param_dtype=config.param_jnp_dtype,
        kernel_init=nn.initializers.normal(stddev=std),
        bias_init=nn.initializers.zeros,
        name=name,
    )


def layer_norm(config: GPTConfig, name: str | None = None) -> nn.LayerNorm:
    """A LayerNorm with the config's epsilon, bias switch and dtype policy (statistics in float32).

    >>> from theseus.model.config import GPTConfig
    >>> layer_norm(GPTConfig(n_embd=64, n_head=4)).epsilon
    1e-05
    """
    return nn.LayerNorm(
        epsilon=config.layer_norm_eps,
        use_bias=config.bias,
        dtype=config.activation_jnp_dtype,
        param_dtype=config.param_jnp_dtype,
        name=name,
    )
