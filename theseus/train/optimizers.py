"""Optimizers: each a part that adds its fields to the ``optimization`` section.

``build(config, schedule)`` returns the optax transformation for the
``optimization`` section ``config`` (every optimizer has ``lr``, the peak rate the
schedule scales); the recipe chains gradient clipping in front of it. Weight decay
goes only where `decay_mask` says: matrices, never norms, biases or embeddings.

Each optimizer's default ``lr * weight_decay`` equals AdamW's (3e-4 * 0.1 = 3e-5): all
of them apply decoupled decay scaled by the rate, so by default a matrix shrinks by the
same fraction per step whichever optimizer a job picks.

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
from optax.contrib import MuonDimensionNumbers

from theseus.errors import BadInput
from theseus.train.parts import Part, part

__all__ = ["SGD", "AdamW", "AdamWConfig", "Lion", "LionConfig", "Muon", "MuonConfig", "Optimizer", "SGDConfig",
           "decay_mask", "muon_dimension_numbers"]

#: Parameter names that are embeddings (flax ``nn.Embed`` calls its table ``embedding``).
EMBEDDING_NAMES = frozenset({"embedding"})
#: Modules that are an untied output layer (the decoder family's ``lm_head``).
OUTPUT_LAYER_NAMES = frozenset({"lm_head"})


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
    if not weight_decay >= 0:
        raise BadInput(f"optimization.weight_decay must be non-negative, got {weight_decay!r}")
    return float(weight_decay)


def _check_rate(name: str, value: float) -> float:
    if not value > 0:
        raise BadInput(f"optimization.{name} must be positive, got {value!r}")
    return float(value)


def _check_beta(name: str, value: float) -> float:
    if not 0 <= value < 1:
        raise BadInput(f"optimization.{name} must be in [0, 1), got {value!r}")
    return float(value)


@dataclasses.dataclass
class AdamWConfig:
    """AdamW's fields of ``optimization``, in the order config.yaml lists them.

    >>> AdamWConfig().lr
    0.0003
    """

    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    lr: float = 0.0003


@part("optimizer", "adamw", "AdamW with decoupled weight decay on matrices (not biases, norms or embeddings).")
class AdamW(Optimizer):
    """``optax.adamw`` with `decay_mask`.

    >>> AdamW.name, [f.name for f in dataclasses.fields(AdamW.Config)]
    ('adamw', ['weight_decay', 'beta1', 'beta2', 'lr'])
    """

    Config = AdamWConfig

    @classmethod
    def build(cls, config: Any, schedule: Callable[[Any], Any]) -> optax.GradientTransformation:
        """AdamW on ``schedule`` with ``beta1``, ``beta2`` and ``weight_decay``."""
        _check_rate("lr", config.lr)
        return optax.adamw(schedule, b1=_check_beta("beta1", config.beta1), b2=_check_beta("beta2", config.beta2),
                           weight_decay=_check_decay(config.weight_decay), mask=decay_mask)


@dataclasses.dataclass
class LionConfig:
    """Lion's fields of ``optimization``.

    Lion's update is a sign (every entry +-1), larger than Adam's normalised step, so
    the Lion paper sets its rate 3-10x below a tuned AdamW rate. AdamW's default 3e-4
    is a cautious rate for large models; the rate the quickstart tunes AdamW
    to for its small model is 3e-3, and Lion's 3e-4 is a tenth of that, so the
    quickstart-sized models train with either optimizer's defaults. ``weight_decay``
    keeps ``lr * weight_decay`` at AdamW's 3e-5.

    >>> import math
    >>> math.isclose(LionConfig().lr * LionConfig().weight_decay, AdamWConfig().lr * AdamWConfig().weight_decay)
    True
    """

    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    lr: float = 0.0003


@part("optimizer", "lion", "Lion: the sign of interpolated momentum, decoupled weight decay on matrices.")
class Lion(Optimizer):
    """``optax.lion`` with `decay_mask`: ``update = -lr * (sign(beta1 * m + (1 - beta1) * g) + weight_decay * p)``.

    >>> import jax.numpy as jnp
    >>> opt = Lion.build(LionConfig(weight_decay=0.0), lambda step: 0.5)
    >>> params = {"w": jnp.ones((2, 2))}
    >>> updates, _ = opt.update({"w": jnp.array([[3.0, -0.1], [-1e-6, 2.0]])}, opt.init(params), params)
    >>> updates["w"].tolist()  # -lr * sign(g), whatever the gradient's size
    [[-0.5, 0.5], [0.5, -0.5]]
    """

    Config = LionConfig

    @classmethod
    def build(cls, config: Any, schedule: Callable[[Any], Any]) -> optax.GradientTransformation:
        """Lion on ``schedule`` with ``beta1``, ``beta2`` and ``weight_decay``."""
        _check_rate("lr", config.lr)
        return optax.lion(schedule, b1=_check_beta("beta1", config.beta1), b2=_check_beta("beta2", config.beta2),
                          weight_decay=_check_decay(config.weight_decay), mask=decay_mask)


def _in_output_layer(path: tuple) -> bool:
    return any(str(getattr(key, "key", key)) in OUTPUT_LAYER_NAMES for key in path)


def muon_dimension_numbers(params: Any) -> Any:
    """Which leaves Muon orthogonalises: a ``MuonDimensionNumbers`` for every 2-D hidden matrix that gets weight
    decay (`decay_mask`: not an embedding), None for the rest (they take Muon's Adam path).

    The token embedding and the output layer, tied (``wte/embedding``) or not (``lm_head``), are
    not orthogonalised: they map tokens to and from the residual stream rather than within it,
    where Muon's equal singular values are the point.

    >>> import jax.numpy as jnp
    >>> numbers = muon_dimension_numbers({"kernel": jnp.ones((2, 3)), "bias": jnp.ones(3),
    ...                                   "wte": {"embedding": jnp.ones((4, 2))},
    ...                                   "lm_head": {"kernel": jnp.ones((2, 4))}})
    >>> numbers["kernel"], numbers["bias"], numbers["wte"]["embedding"], numbers["lm_head"]["kernel"]
    (MuonDimensionNumbers(reduction_axis=0, output_axis=1), None, None, None)
    """
    decayed = decay_mask(params)

    def numbers(path: tuple, p: Any, decays: bool) -> MuonDimensionNumbers | None:
        return MuonDimensionNumbers() if decays and jnp.ndim(p) == 2 and not _in_output_layer(path) else None

    return jax.tree_util.tree_map_with_path(numbers, params, decayed)


@dataclasses.dataclass
class MuonConfig:
    """Muon's fields of ``optimization``: the matrices' rate and momentum, and the Adam path's own rate and betas.

    ``lr`` 0.02 is modded-nanogpt's Muon rate (an orthogonalised update has unit
    singular values, so its scale differs from Adam's); ``weight_decay`` keeps
    ``lr * weight_decay`` at AdamW's 3e-5. ``adam_lr``, ``adam_beta1`` and
    ``adam_beta2`` are AdamW's defaults, for the embeddings, norms and biases.

    >>> MuonConfig().lr, MuonConfig().adam_lr
    (0.02, 0.0003)
    """

    weight_decay: float = 0.0015
    momentum: float = 0.95
    nesterov: bool = True
    ns_steps: int = 5
    adam_lr: float = 0.0003
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    lr: float = 0.02


@part("optimizer", "muon", "Muon: orthogonalised momentum for matrices; Adam for embeddings, norms and biases.")
class Muon(Optimizer):
    """``optax.contrib.muon``: Newton-Schulz-orthogonalised momentum on the leaves `muon_dimension_numbers`
    picks, with decoupled weight decay; every other leaf goes to its Adam path without weight decay.

    The Adam path follows the same schedule scaled to ``adam_lr`` (every schedule is
    linear in its peak rate), so warmup and decay move both rates together.

    >>> import jax.numpy as jnp
    >>> opt = Muon.build(MuonConfig(weight_decay=0.0), lambda step: 0.02)
    >>> params = {"kernel": jnp.zeros((4, 4)), "bias": jnp.zeros(4)}
    >>> grads = {"kernel": jnp.diag(jnp.array([1.0, 2.0, 4.0, 8.0])), "bias": jnp.ones(4)}
    >>> updates, _ = opt.update(grads, opt.init(params), params)
    >>> singular = jnp.linalg.svd(updates["kernel"], compute_uv=False)  # gradient: spread 8x; update: under 2x
    >>> bool(singular.max() / singular.min() < 2), bool(jnp.allclose(updates["bias"], updates["bias"][0]))
    (True, True)
    """

    Config = MuonConfig

    @classmethod
    def build(cls, config: Any, schedule: Callable[[Any], Any]) -> optax.GradientTransformation:
        """Muon on ``schedule`` for the matrices; Adam on ``schedule * adam_lr / lr`` for the rest."""
        lr, adam_lr = _check_rate("lr", config.lr), _check_rate("adam_lr", config.adam_lr)
        ns_steps = config.ns_steps
        if isinstance(ns_steps, bool) or not isinstance(ns_steps, int) or ns_steps < 1:
            raise BadInput(f"optimization.ns_steps must be a positive int, got {ns_steps!r}")
        if not isinstance(config.nesterov, bool):
            raise BadInput(f"optimization.nesterov must be a bool, got {config.nesterov!r}")
        return optax.contrib.muon(
            schedule, ns_steps=ns_steps, beta=_check_beta("momentum", config.momentum),
            weight_decay=_check_decay(config.weight_decay), weight_decay_mask=decay_mask,
            nesterov=config.nesterov, adam_b1=_check_beta("adam_beta1", config.adam_beta1),
            adam_b2=_check_beta("adam_beta2", config.adam_beta2), adam_weight_decay=0.0,
            adam_learning_rate=lambda step: schedule(step) * (adam_lr / lr),
            muon_weight_dimension_numbers=muon_dimension_numbers)


@dataclasses.dataclass
class SGDConfig:
    """SGD's fields of ``optimization``.

    ``lr`` 0.1 with momentum 0.9 is the classic SGD setting (the steady-state step is
    ``lr / (1 - momentum)`` times a clipped gradient); ``weight_decay`` keeps
    ``lr * weight_decay`` at AdamW's 3e-5.

    >>> SGDConfig().momentum, SGDConfig().nesterov
    (0.9, False)
    """

    weight_decay: float = 0.0003
    momentum: float = 0.9
    nesterov: bool = False
    lr: float = 0.1


@part("optimizer", "sgd", "SGD with (Nesterov) momentum and decoupled weight decay on matrices.")
class SGD(Optimizer):
    """Momentum (``optax.trace``), then ``weight_decay * p`` on `decay_mask`'s leaves, then ``-lr``.

    The decay is added after the momentum (decoupled, as in AdamW), so it never
    accumulates in the momentum buffer.

    >>> import jax.numpy as jnp
    >>> opt = SGD.build(SGDConfig(weight_decay=0.5, momentum=0.0), lambda step: 0.1)
    >>> params = {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}
    >>> updates, _ = opt.update({"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}, opt.init(params), params)
    >>> [round(float(updates[k].ravel()[0]), 4) for k in ("kernel", "bias")]  # -0.1 * (1 + 0.5), -0.1 * 1
    [-0.15, -0.1]
    """

    Config = SGDConfig

    @classmethod
    def build(cls, config: Any, schedule: Callable[[Any], Any]) -> optax.GradientTransformation:
        """SGD on ``schedule`` with ``momentum``, ``nesterov`` and ``weight_decay``."""
        _check_rate("lr", config.lr)
        if not isinstance(config.nesterov, bool):
            raise BadInput(f"optimization.nesterov must be a bool, got {config.nesterov!r}")
        return optax.chain(
            optax.trace(decay=_check_beta("momentum", config.momentum), nesterov=config.nesterov),
            optax.add_decayed_weights(_check_decay(config.weight_decay), mask=decay_mask),
            optax.scale_by_learning_rate(schedule))
