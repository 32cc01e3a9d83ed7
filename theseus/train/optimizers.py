"""Optimizers: each a part that adds its fields to the ``optimization`` section.

``build(config, schedule)`` returns the optax transformation for the
``optimization`` section ``config`` (every optimizer has ``lr``, the peak rate the
schedule scales); the recipe chains gradient clipping in front of it. Weight decay
goes only where `decay_mask` says: matrices, never norms, biases or embeddings.

>>> import jax.numpy as jnp
>>> from theseus.train.schedules import wsd_schedule
>>> opt = AdamW.build(AdamW.Config(lr=1e-3), wsd_schedule(1e-3, 10, 0.0, 0.0, 0.0))
>>> params = {"w": jnp.ones((2, 2))}
>>> updates, _ = opt.update({"w": jnp.ones((2, 2))}, opt.init(params), params)
>>> round(float(updates["w"][0, 0]), 6)
-0.0011
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from theseus.train.parts import Part, part

__all__ = ["AdamW", "AdamWConfig", "Optimizer", "decay_mask"]

#: Parameter names that are embeddings (flax ``nn.Embed`` calls its table ``embedding``).
EMBEDDING_NAMES = frozenset({"embedding"})


def _leaf_name(path: tuple) -> str:
    last = path[-1] if path else None
    return str(getattr(last, "key", getattr(last, "name", last)))


def decay_mask(params: Any) -> Any:
    """True for the leaves that get weight decay: matrices (2 or more dims) that are not embeddings.

    Biases and norm scales (1-D) and embedding tables are left alone.

    >>> import jax.numpy as jnp
    >>> decay_mask({"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2), "wte": {"embedding": jnp.ones((4, 2))}})
    {'bias': False, 'kernel': True, 'wte': {'embedding': False}}
    """
    return jax.tree_util.tree_map_with_path(
        lambda path, p: bool(jnp.ndim(p) >= 2 and _leaf_name(path) not in EMBEDDING_NAMES), params)


class Optimizer(Part):
    """Base of the optimizer parts: ``build(config, schedule) -> optax.GradientTransformation``.

    >>> Optimizer.section
    'optimization'
    """

    section = "optimization"

    @classmethod
    def build(cls, config: Any, schedule: Callable[[Any], Any]) -> optax.GradientTransformation:
        """The transformation for the ``optimization`` section ``config``, its rate given by ``schedule(step)``."""
        raise NotImplementedError(f"{cls.__name__} must implement build()")


def _check_decay(weight_decay: float) -> float:
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be non-negative, got {weight_decay!r}")
    return float(weight_decay)


@dataclasses.dataclass
class AdamWConfig:
    """AdamW's fields of ``optimization`` (the seed's order).

    >>> AdamWConfig().lr
    0.0003
    """

    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    lr: float = 0.0003


@part("optimizer", "adamw", "AdamW with decoupled weight decay on matrices (the seed's optimizer).")
class AdamW(Optimizer):
    """``optax.adamw`` with `decay_mask`.

    >>> AdamW.name, [f.name for f in dataclasses.fields(AdamW.Config)]
    ('adamw', ['weight_decay', 'beta1', 'beta2', 'lr'])
    """

    Config = AdamWConfig

    @classmethod
    def build(cls, config: Any, schedule: Callable[[Any], Any]) -> optax.GradientTransformation:
        """AdamW on ``schedule`` with ``beta1``, ``beta2`` and ``weight_decay``."""
        return optax.adamw(schedule, b1=float(config.beta1), b2=float(config.beta2),
                           weight_decay=_check_decay(config.weight_decay), mask=decay_mask)
