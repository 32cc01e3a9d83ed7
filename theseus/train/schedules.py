"""Learning-rate schedules: pure functions of the step, so a resume on any node gets the same rate.

Each schedule is a part (`theseus.train.parts`) of kind ``schedule`` that adds its
fields to the ``optimization`` section; ``build(config, lr, total_steps)`` returns
``schedule(step) -> float32`` (the step may be traced). The value at step s is the
rate of the update that turns step s into s + 1.

>>> f = WSD.build(WSD.Config(), lr=1.0, total_steps=1000)
>>> float(f(500))
1.0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from theseus.train.parts import Part, part

__all__ = ["WSD", "Schedule", "WSDConfig", "wsd_schedule"]

ScheduleFn = Callable[[Any], Any]


def _check_fraction(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")


def _check_common(lr: float, total_steps: int) -> None:
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr!r}")
    if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps <= 0:
        raise ValueError(f"total_steps must be a positive int, got {total_steps!r}")


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
        raise ValueError(f"warmup_pct + decay_pct must be at most 1, got {warmup_pct} + {decay_pct}")
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


@part("schedule", "wsd", "Warmup, stable, then linear decay to lr * final_lr_frac (the seed's schedule).")
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
