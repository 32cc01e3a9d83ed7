"""The decoder's normalizations: RMSNorm (optionally scaled by 1 + w, as Gemma) and LayerNorm, by config.

Statistics are computed in float32 and the result is in the activation dtype.

>>> import jax, jax.numpy as jnp
>>> norm = RMSNorm(eps=1e-6, dtype=jnp.float32)
>>> x = jnp.array([[3.0, 4.0]])
>>> y, params = norm.init_with_output(jax.random.PRNGKey(0), x)
>>> [round(float(v), 4) for v in y[0]]
[0.8485, 1.1314]
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from theseus.model.decoder_config import DecoderConfig


class RMSNorm(nn.Module):
    """x / rms(x) times a learned ``scale`` [features] (starting at 1), or times ``1 + scale`` (starting at 0)
    when ``unit_offset``.

    Without ``unit_offset`` the normalized x is cast to ``dtype`` before the scale multiplies it (Llama's
    order); with it the product is taken in float32 and then cast (Gemma's).

    >>> import jax, jax.numpy as jnp
    >>> params = RMSNorm(unit_offset=True).init(jax.random.PRNGKey(0), jnp.ones((1, 4)))["params"]
    >>> params["scale"].tolist()
    [0.0, 0.0, 0.0, 0.0]
    """

    eps: float = 1e-6
    unit_offset: bool = False
    dtype: jnp.dtype = jnp.float32
    param_dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        init = nn.initializers.zeros if self.unit_offset else nn.initializers.ones
        scale = self.param("scale", init, (x.shape[-1],), self.param_dtype)
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        if self.unit_offset:
            return (normed * (1.0 + scale.astype(jnp.float32))).astype(self.dtype)
        return scale.astype(self.dtype) * normed.astype(self.dtype)


def decoder_norm(config: DecoderConfig, name: str | None = None) -> nn.Module:
    """The config's normalization over the last axis: `RMSNorm`, or a LayerNorm (bias by ``norm_bias``, exact
    two-pass variance so it matches reference implementations).

    >>> from theseus.model.decoder_config import DecoderConfig
    >>> type(decoder_norm(DecoderConfig.for_family("gpt_neox", n_embd=32, n_head=4))).__name__
    'LayerNorm'
    """
    if config.norm == "layernorm":
        return nn.LayerNorm(epsilon=config.norm_eps, use_bias=config.norm_bias, dtype=config.activation_jnp_dtype,
                            param_dtype=config.param_jnp_dtype, use_fast_variance=False, name=name)
    return RMSNorm(eps=config.norm_eps, unit_offset=config.norm_unit_offset, dtype=config.activation_jnp_dtype,
                   param_dtype=config.param_jnp_dtype, name=name)
