"""Learning-rate schedules: pure functions of the step, so a resume on any node gets the same rate.

Each schedule is a part (`theseus.train.parts`) of kind ``schedule`` that adds its
fields to the ``optimization`` section; ``build(config, lr, total_steps)`` returns
``schedule(step) -> float32`` (the step may be traced). The value at step s is the
rate of the update that turns step s into s + 1; after ``total_steps`` a schedule
holds its last value. A schedule keeps no state, so a resume at any step gets the
rate the uninterrupted run had there.

Every schedule is linear in its peak rate ``lr`` (an optimizer may scale it for a
second group of parameters, as Muon does for its Adam path).

>>> f = WSD.build(WSD.Config(), lr=1.0, total_steps=1000)
>>> float(f(500))
1.0
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from theseus.errors import BadInput
from theseus.train.parts import Part, part

__all__ = ["WSD", "Constant", "ConstantConfig", "Cosine", "DecayConfig", "Linear", "Schedule",
           "WSDConfig", "constant_schedule", "cosine_schedule", "linear_schedule", "wsd_schedule"]

ScheduleFn = Callable[[Any], Any]


def _check_fraction(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise BadInput(f"{name} must be in [0, 1], got {value!r}")


def _check_common(lr: float, total_steps: int) -> None:
    if not lr > 0:
        raise BadInput(f"lr must be positive, got {lr!r}")
    if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps <= 0:
        raise BadInput(f"total_steps must be a positive int, got {total_steps!r}")


def _warmup_and_decay(lr: float, total_steps: int, warmup_pct: float, final_lr_frac: float,
                      shape: Callable[[Any], Any]) -> ScheduleFn:
    """Warmup from the floor as in `wsd_schedule`, then from lr down to the floor along ``shape(progress)``
    (1 at progress 0, 0 at progress 1) over [W, total_steps]; the floor from total_steps on."""
    _check_common(lr, total_steps)
    _check_fraction("warmup_pct", warmup_pct)
    _check_fraction("final_lr_frac", final_lr_frac)
    warmup = int(warmup_pct * total_steps)
    span = max(total_steps - warmup, 1)
    floor = lr * final_lr_frac

    def schedule(step):
        s = jnp.asarray(step, jnp.float32)
        warm = floor + (lr - floor) * s / max(warmup, 1)
        down = floor + (lr - floor) * shape(jnp.clip((s - warmup) / span, 0.0, 1.0))
        out = jnp.where(s < warmup, warm, jnp.where(s < total_steps, down, floor))
        return out.astype(jnp.float32)

    return schedule


def wsd_schedule(lr: float, total_steps: int, warmup_pct: float, decay_pct: float, final_lr_frac: float) -> ScheduleFn:
    """Warmup-stable-decay schedule: step (int, may be traced) -> learning rate (float32).

    With W = int(warmup_pct * total_steps), D = int(decay_pct * total_steps) and
    floor = lr * final_lr_frac:

    - warmup, step in [0, W): linear from floor to lr, lr(s) = floor + (lr - floor) * s / W
      (it starts at the floor rather than 0 so the first step is not wasted);
    - stable, step in [W, total_steps - D): lr;
    - decay, step in [total_steps - D, total_steps]: linear from lr down to floor,
      reached at step total_steps and held after it (with D = 0 the rate stays lr).

    >>> f = wsd_schedule(1.0, 100, warmup_pct=0.1, decay_pct=0.2, final_lr_frac=0.1)
    >>> [round(float(f(s)), 3) for s in (0, 5, 10, 50, 80, 90, 100, 200)]
    [0.1, 0.55, 1.0, 1.0, 1.0, 0.55, 0.1, 0.1]
    """
    _check_common(lr, total_steps)
    for name, value in (("warmup_pct", warmup_pct), ("decay_pct", decay_pct), ("final_lr_frac", final_lr_frac)):
        _check_fraction(name, value)
    if warmup_pct + decay_pct > 1.0:
        raise BadInput(f"warmup_pct + decay_pct must be at most 1, got {warmup_pct} + {decay_pct}")
    warmup = int(warmup_pct * total_steps)
    decay = int(decay_pct * total_steps)
    decay_start = total_steps - decay
    floor = lr * final_lr_frac

    def schedule(step):
        s = jnp.asarray(step, jnp.float32)
        warm = floor + (lr - floor) * s / max(warmup, 1)
        remaining = jnp.clip((total_steps - s) / decay, 0.0, 1.0) if decay else 1.0
        down = floor + (lr - floor) * remaining
        out = jnp.where(s < warmup, warm, jnp.where(s < decay_start, lr, down))
        return out.astype(jnp.float32)

    return schedule


class Schedule(Part):
    """Base of the schedule parts: ``build(config, lr, total_steps) -> schedule(step)``.

    >>> Schedule.section
    'optimization'
    """

    section = "optimization"

    @classmethod
    def build(cls, config: Any, lr: float, total_steps: int) -> ScheduleFn:
        """The schedule for peak rate ``lr`` over ``total_steps``, from the ``optimization`` section ``config``."""
        raise NotImplementedError(f"{cls.__name__} must implement build()")


@dataclasses.dataclass
class WSDConfig:
    """WSD's fields of ``optimization``: warmup and decay fractions of the run, final rate fraction.

    >>> WSDConfig().decay_pct
    0.01
    """

    warmup_pct: float = 0.005
    decay_pct: float = 0.01
    final_lr_frac: float = 0.01


@part("schedule", "wsd", "Warmup-stable-decay: linear warmup over warmup_pct of the steps, constant lr, then "
                           "linear decay over the last decay_pct to lr * final_lr_frac.")
class WSD(Schedule):
    """Warmup-stable-decay (`wsd_schedule`).

    >>> f = WSD.build(WSDConfig(warmup_pct=0.1, decay_pct=0.1, final_lr_frac=0.0), lr=2.0, total_steps=10)
    >>> [round(float(f(s)), 2) for s in (0, 1, 5, 10)]
    [0.0, 2.0, 2.0, 0.0]
    """

    Config = WSDConfig

    @classmethod
    def build(cls, config: Any, lr: float, total_steps: int) -> ScheduleFn:
        """See `wsd_schedule`."""
        return wsd_schedule(float(lr), int(total_steps), float(config.warmup_pct), float(config.decay_pct),
                            float(config.final_lr_frac))


def cosine_schedule(lr: float, total_steps: int, warmup_pct: float, final_lr_frac: float) -> ScheduleFn:
    """Warmup, then cosine decay to the floor: step (int, may be traced) -> learning rate (float32).

    With W = int(warmup_pct * total_steps) and floor = lr * final_lr_frac: warmup as in
    `wsd_schedule` (step 0 gives the floor); then, for step s in [W, total_steps],
    floor + (lr - floor) * (1 + cos(pi * (s - W) / (total_steps - W))) / 2, which is
    lr at W and the floor at total_steps, held after it.

    >>> f = cosine_schedule(1.0, 100, warmup_pct=0.1, final_lr_frac=0.1)
    >>> [round(float(f(s)), 3) for s in (0, 5, 10, 55, 100, 200)]
    [0.1, 0.55, 1.0, 0.55, 0.1, 0.1]
    """
    return _warmup_and_decay(lr, total_steps, warmup_pct, final_lr_frac,
                             lambda progress: 0.5 * (1.0 + jnp.cos(math.pi * progress)))


def linear_schedule(lr: float, total_steps: int, warmup_pct: float, final_lr_frac: float) -> ScheduleFn:
    """Warmup, then linear decay to the floor: step (int, may be traced) -> learning rate (float32).

    With W = int(warmup_pct * total_steps) and floor = lr * final_lr_frac: warmup as in
    `wsd_schedule` (step 0 gives the floor); then, for step s in [W, total_steps],
    floor + (lr - floor) * (total_steps - s) / (total_steps - W), held at the floor after
    total_steps (WSD with all of the run after the warmup decaying).

    >>> f = linear_schedule(1.0, 100, warmup_pct=0.1, final_lr_frac=0.1)
    >>> [round(float(f(s)), 3) for s in (0, 5, 10, 55, 100, 200)]
    [0.1, 0.55, 1.0, 0.55, 0.1, 0.1]
    """
    return _warmup_and_decay(lr, total_steps, warmup_pct, final_lr_frac, lambda progress: 1.0 - progress)


def constant_schedule(lr: float, total_steps: int, warmup_pct: float) -> ScheduleFn:
    """Warmup, then lr to the end: step (int, may be traced) -> learning rate (float32).

    With W = int(warmup_pct * total_steps): step s in [0, W) gives lr * (s + 1) / W
    (there is no floor to start from; step 0 gives lr / W, not 0, so the first update
    counts, and step W - 1 gives lr); from W on, lr, also after total_steps.

    >>> f = constant_schedule(1.0, 100, warmup_pct=0.04)
    >>> [round(float(f(s)), 3) for s in (0, 1, 3, 4, 100, 200)]
    [0.25, 0.5, 1.0, 1.0, 1.0, 1.0]
    """
    _check_common(lr, total_steps)
    _check_fraction("warmup_pct", warmup_pct)
    warmup = int(warmup_pct * total_steps)

    def schedule(step):
        s = jnp.asarray(step, jnp.float32)
        return jnp.where(s < warmup, lr * (s + 1) / max(warmup, 1), lr).astype(jnp.float32)

    return schedule


@dataclasses.dataclass
class DecayConfig:
    """The fields of ``optimization`` of a schedule that warms up then decays to a floor (cosine, linear):
    the warmup fraction of the run and the final rate fraction (WSD's defaults).

    >>> DecayConfig().final_lr_frac == WSDConfig().final_lr_frac
    True
    """

    warmup_pct: float = 0.005
    final_lr_frac: float = 0.01


@part("schedule", "cosine", "Warmup, then cosine decay to lr * final_lr_frac at the last step.")
class Cosine(Schedule):
    """Warmup then cosine decay (`cosine_schedule`).

    >>> f = Cosine.build(DecayConfig(warmup_pct=0.0, final_lr_frac=0.0), lr=2.0, total_steps=10)
    >>> [round(float(f(s)), 2) for s in (0, 5, 10)]
    [2.0, 1.0, 0.0]
    """

    Config = DecayConfig

    @classmethod
    def build(cls, config: Any, lr: float, total_steps: int) -> ScheduleFn:
        """See `cosine_schedule`."""
        return cosine_schedule(float(lr), int(total_steps), float(config.warmup_pct), float(config.final_lr_frac))


@part("schedule", "linear", "Warmup, then linear decay to lr * final_lr_frac at the last step.")
class Linear(Schedule):
    """Warmup then linear decay (`linear_schedule`).

    >>> f = Linear.build(DecayConfig(warmup_pct=0.0, final_lr_frac=0.0), lr=2.0, total_steps=10)
    >>> [round(float(f(s)), 2) for s in (0, 5, 10)]
    [2.0, 1.0, 0.0]
    """

    Config = DecayConfig

    @classmethod
    def build(cls, config: Any, lr: float, total_steps: int) -> ScheduleFn:
        """See `linear_schedule`."""
        return linear_schedule(float(lr), int(total_steps), float(config.warmup_pct), float(config.final_lr_frac))


@dataclasses.dataclass
class ConstantConfig:
    """Constant's field of ``optimization``: the warmup fraction of the run (WSD's default).

    >>> ConstantConfig().warmup_pct
    0.005
    """

    warmup_pct: float = 0.005


@part("schedule", "constant", "Warmup, then the peak rate lr to the end.")
class Constant(Schedule):
    """Warmup then constant (`constant_schedule`).

    >>> f = Constant.build(ConstantConfig(warmup_pct=0.2), lr=2.0, total_steps=10)
    >>> [round(float(f(s)), 2) for s in (0, 1, 2, 10)]
    [1.0, 2.0, 2.0, 2.0]
    """

    Config = ConstantConfig

    @classmethod
    def build(cls, config: Any, lr: float, total_steps: int) -> ScheduleFn:
        """See `constant_schedule`."""
        return constant_schedule(float(lr), int(total_steps), float(config.warmup_pct))
