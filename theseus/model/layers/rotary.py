"""Rotary position embeddings for the decoder: inverse frequencies with `linear` or `llama3` scaling, applied to
the leading ``rotary_dim`` dims of each head (partial rotary, as GPT-NeoX) in the rotate-half layout.

>>> from theseus.model.decoder_config import DecoderConfig
>>> cfg = DecoderConfig(n_embd=32, n_head=4, rope_scaling="linear", rope_factor=2.0)
>>> inverse_frequencies(cfg)[:2].tolist()
[0.5, 0.05000000074505806]
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from theseus.model.decoder_config import DecoderConfig


def inverse_frequencies(config: DecoderConfig) -> np.ndarray:
    """The rotation speeds [rotary_dim // 2] (float32, computed in float32 as reference implementations do), after
    the config's scaling: `linear` divides them all by rope_factor; `llama3` divides the slow ones (wavelength
    above original_max_position / low_freq_factor), keeps the fast ones and blends those between.

    >>> from theseus.model.decoder_config import DecoderConfig
    >>> base = DecoderConfig(n_embd=64, n_head=1, rope_original_max_position=64)
    >>> scaled = DecoderConfig(n_embd=64, n_head=1, rope_scaling="llama3", rope_factor=8.0,
    ...                        rope_original_max_position=64)
    >>> fast, slow = inverse_frequencies(base)[[0, -1]], inverse_frequencies(scaled)[[0, -1]]
    >>> bool(fast[0] == slow[0]), bool(np.isclose(slow[1], fast[1] / 8))
    (True, True)
    """
    dim = config.rotary_dim
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    inv_freq = (np.float32(1.0) / (np.float32(config.rope_theta) ** exponents)).astype(np.float32)
    if config.rope_scaling == "linear":
        return (inv_freq / np.float32(config.rope_factor)).astype(np.float32)
    if config.rope_scaling == "llama3":
        factor, low, high = config.rope_factor, config.rope_low_freq_factor, config.rope_high_freq_factor
        context = config.rope_original_max_position
        wavelen = np.float32(2 * math.pi) / inv_freq
        scaled = np.where(wavelen > context / low, inv_freq / np.float32(factor), inv_freq).astype(np.float32)
        smooth = ((context / wavelen - low) / (high - low)).astype(np.float32)
        smoothed = ((1 - smooth) * scaled / np.float32(factor) + smooth * scaled).astype(np.float32)
        medium = ~(wavelen < context / high) & ~(wavelen > context / low)
        return np.where(medium, smoothed, scaled).astype(np.float32)
    return inv_freq


def apply_rotary(x: jax.Array, positions: jax.Array, inv_freq: np.ndarray) -> jax.Array:
    """Rotate the leading 2 * len(inv_freq) dims of x [B, T, heads, head_dim] by ``positions`` ([T] or [B, T]);
    the other dims pass through. Math in float32, result in x.dtype.

    >>> import jax.numpy as jnp
    >>> x = jnp.arange(8.0).reshape(1, 1, 1, 8)
    >>> moved = apply_rotary(x, jnp.array([5]), np.array([1.0], np.float32))
    >>> bool(jnp.all(moved[..., 2:] == x[..., 2:])), bool(jnp.allclose(apply_rotary(x, jnp.array([0]),
    ...     np.array([1.0], np.float32)), x))
    (True, True)
    """
    rotary = 2 * inv_freq.shape[0]
    angles = jnp.asarray(positions, jnp.float32)[..., None] * jnp.asarray(inv_freq)
    if angles.ndim == 2:  # [T, D/2]: the same positions for every row
        angles = angles[None]
    angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    x32 = x.astype(jnp.float32)
    turned, passed = x32[..., :rotary], x32[..., rotary:]
    first, second = turned[..., : rotary // 2], turned[..., rotary // 2:]
    half_turn = jnp.concatenate([-second, first], axis=-1)
    out = jnp.concatenate([turned * cos + half_turn * sin, passed], axis=-1)
    return out.astype(x.dtype)
