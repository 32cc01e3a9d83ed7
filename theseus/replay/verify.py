"""Replay training steps from a restored trainer and compare them with the logged losses.

The building blocks of ``theseus verify``: `replay` runs steps without reporting or
checkpointing, `compare` classifies the result as bitwise / within tolerance / diverged.

>>> compare({1: 2.5, 2: 2.25}, {1: 2.5, 2: 2.25}).status
'bitwise'
>>> compare({1: 2.5}, {1: 2.5000001}, rtol=1e-5).status
'tolerance'
>>> compare({1: 2.5, 2: 2.0}, {1: 2.5, 2: 3.0}).first_divergence
2
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import jax


def replay(trainer: Any, steps: int) -> dict[int, float]:
    """Run ``steps`` training steps from the trainer's current state; ``{step: train loss}``.

    Nothing is reported or checkpointed (the callbacks are not called); the trainer's
    state and step advance as in training. Losses are fetched once at the end.

    >>> from theseus.train.trainer import Trainer, tiny_example
    >>> root, config = tiny_example()
    >>> losses = replay(Trainer(config, root, peak_flops=1e12, progress=False), 2)
    >>> sorted(losses)
    [1, 2]
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if trainer.step + steps > trainer.total_steps:
        raise ValueError(f"cannot replay {steps} steps from step {trainer.step}: the run has {trainer.total_steps}")
    trainer._prepare()
    pending = {}
    for _ in range(steps):
        metrics = trainer._dispatch()
        pending[trainer.step] = metrics["loss"]
    return {k: float(v) for k, v in jax.device_get(pending).items()}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """How replayed losses compare with logged ones.

    ``status``: "bitwise" (every compared step equal), "tolerance" (all within
    ``rtol``/``atol``) or "diverged"; ``steps`` compared; the largest absolute and
    relative differences; the first step outside tolerance (None if none).

    >>> Verdict("bitwise", [1], 0.0, 0.0, None).ok
    True
    """

    status: str
    steps: list[int]
    max_abs_diff: float
    max_rel_diff: float
    first_divergence: int | None

    @property
    def ok(self) -> bool:
        """True unless diverged."""
        return self.status != "diverged"


def compare(logged: Mapping[int, float], replayed: Mapping[int, float], rtol: float = 1e-5,
            atol: float = 0.0) -> Verdict:
    """Compare losses at the steps both mappings hold (ValueError when they share none).

    >>> compare({1: 1.0}, {1: 1.0 + 1e-3}, rtol=1e-5).status
    'diverged'
    """
    steps = sorted(set(logged) & set(replayed))
    if not steps:
        raise ValueError(f"no common steps: logged {sorted(logged)[:10]}, replayed {sorted(replayed)[:10]}")
    max_abs = max_rel = 0.0
    first = None
    bitwise = True
    for k in steps:
        a, b = float(logged[k]), float(replayed[k])
        same = a == b or (math.isnan(a) and math.isnan(b))
        bitwise = bitwise and same
        diff = 0.0 if same else abs(a - b)
        rel = diff / abs(a) if a else (0.0 if diff == 0 else math.inf)
        max_abs, max_rel = max(max_abs, diff), max(max_rel, rel)
        if first is None and not same and not diff <= atol + rtol * abs(a):
            first = k
    status = "bitwise" if bitwise else ("tolerance" if first is None else "diverged")
    return Verdict(status, steps, max_abs, max_rel, first)
