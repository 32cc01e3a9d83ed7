"""Losses: each a part that turns logits and targets into per-token losses.

``build(config)`` (``config`` is the ``loss`` section) returns
``token_loss(logits [B, T, V], targets [B, T]) -> [B, T] float32``; the train step
masks it with the padding mask and averages over the counted tokens of the whole
batch, so accumulation and sharding never change its value.

>>> import jax.numpy as jnp
>>> token_loss = CrossEntropy.build(CrossEntropy.Config(z_loss=0.0))
>>> round(float(token_loss(jnp.zeros((1, 1, 4)), jnp.zeros((1, 1), jnp.int32))[0, 0]), 4)
1.3863
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from theseus.errors import BadInput
from theseus.model.gpt import cross_entropy
from theseus.train.parts import Part, part

__all__ = ["CrossEntropy", "CrossEntropyConfig", "Loss", "TokenLoss"]

TokenLoss = Callable[[jax.Array, jax.Array], jax.Array]


class Loss(Part):
    """Base of the loss parts: ``build(config) -> token_loss(logits, targets)``.

    >>> Loss.section
    'loss'
    """

    section = "loss"

    @classmethod
    def build(cls, config: Any) -> TokenLoss:
        """The per-token loss for the ``loss`` section ``config``."""
        raise NotImplementedError(f"{cls.__name__} must implement build()")


@dataclasses.dataclass
class CrossEntropyConfig:
    """``loss``: the weight of the z-loss term (0: plain cross-entropy).

    >>> CrossEntropyConfig().z_loss
    0.0
    """

    z_loss: float = 0.0


@part("loss", "cross-entropy", "Next-token cross-entropy over the padding mask, plus z_loss * logsumexp(logits)^2.")
class CrossEntropy(Loss):
    """Next-token cross-entropy; with ``z_loss`` > 0 the z-loss term (PaLM) keeps the softmax normaliser near 1.

    >>> import jax.numpy as jnp
    >>> logits, y = jnp.zeros((1, 1, 4)), jnp.zeros((1, 1), jnp.int32)
    >>> plain = CrossEntropy.build(CrossEntropyConfig())(logits, y)
    >>> with_z = CrossEntropy.build(CrossEntropyConfig(z_loss=1.0))(logits, y)
    >>> round(float(with_z[0, 0] - plain[0, 0]), 4)  # log(4) ** 2
    1.9218
    """

    Config = CrossEntropyConfig

    @classmethod
    def build(cls, config: Any) -> TokenLoss:
        """Cross-entropy, plus ``z_loss * logsumexp(logits) ** 2`` per token when ``z_loss`` > 0."""
        weight = float(config.z_loss)
        if not weight >= 0:
            raise BadInput(f"loss.z_loss must be non-negative, got {config.z_loss!r}")
        if weight == 0:
            return cross_entropy

        def token_loss(logits: jax.Array, y: jax.Array) -> jax.Array:
            z = jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1)
            return cross_entropy(logits, y) + weight * jnp.square(z)

        return token_loss
