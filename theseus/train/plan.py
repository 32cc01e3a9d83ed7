"""The training plan: global and per-device batch, accumulation, steps and tokens of a run on a mesh.

A plan is a pure function of the config and the number of data-parallel devices
(and of the probed micro-batch when ``training.per_device_batch_size`` is -1):
``batch_size = per_device_batch_size * data_parallel * accumulation`` and
``total_steps = tokens // (batch_size * block_size)``. ``lines()`` are the
BATCHING / STEPS / TOKENS lines the trainer logs.

>>> from theseus.train.config import load_config
>>> from theseus.train.recipe import Recipe
>>> cfg = load_config({"training": {"batch_size": 8, "per_device_batch_size": 2, "tokens": 8 * 512 * 10}},
...                   Recipe.Config)
>>> plan = TrainingPlan.build(cfg, data_parallel=2)
>>> plan.accumulation, plan.total_steps, plan.tokens
(2, 10, 40960)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from theseus.errors import BadInput
from theseus.train import autobatch
from theseus.train.config import total_steps

__all__ = ["TrainingPlan", "micro_batch_candidates"]


def micro_batch_candidates(batch_size: int, data_parallel: int, candidates: Sequence[int] | None = None) -> list[int]:
    """The autobatch candidates (largest first) whose micro-batches split ``batch_size`` over the devices.

    >>> micro_batch_candidates(24, 2, candidates=(8, 6, 4, 3, 2, 1))
    [6, 4, 3, 2, 1]
    """
    candidates = autobatch.candidates_from_env() if candidates is None else tuple(candidates)
    fitting = [c for c in candidates if batch_size % (c * data_parallel) == 0]
    if not fitting:
        raise BadInput(
            f"training.batch_size {batch_size} does not split into micro-batches of any autobatch candidate "
            f"{list(candidates)} x {data_parallel} data-parallel devices; set training.per_device_batch_size or "
            f"{autobatch.ENV_VAR}")
    return fitting


@dataclasses.dataclass(frozen=True)
class TrainingPlan:
    """How a run's steps are cut: see the module doc.

    >>> plan = TrainingPlan(batch_size=8, block_size=16, per_device_batch_size=4, data_parallel=1, total_steps=3)
    >>> plan.accumulation, plan.micro_rows, plan.tokens_per_step
    (2, 4, 128)
    """

    batch_size: int
    block_size: int
    per_device_batch_size: int
    data_parallel: int
    total_steps: int
    local_replicas: int = 1

    def __post_init__(self) -> None:
        rows = self.per_device_batch_size * self.data_parallel
        if self.batch_size % rows != 0:
            raise BadInput(
                f"training.batch_size {self.batch_size} does not split into micro-batches of per_device_batch_size "
                f"{self.per_device_batch_size} x {self.data_parallel} data-parallel devices = {rows} rows "
                f"({self.batch_size} % {rows} = {self.batch_size % rows}); use a batch_size that is a multiple "
                f"of {rows}")

    @property
    def micro_rows(self) -> int:
        """Rows of one micro-batch over all data-parallel devices."""
        return self.per_device_batch_size * self.data_parallel

    @property
    def accumulation(self) -> int:
        """Micro-batches per step."""
        return self.batch_size // self.micro_rows

    @property
    def tokens_per_step(self) -> int:
        """batch_size * block_size."""
        return self.batch_size * self.block_size

    @property
    def tokens(self) -> int:
        """Tokens the whole run trains on."""
        return self.total_steps * self.tokens_per_step

    @classmethod
    def build(cls, config: Any, data_parallel: int, local_replicas: int = 1,
              probe: Callable[[list[int]], int] | None = None) -> TrainingPlan:
        """The plan of ``config`` on ``data_parallel`` devices; ``probe(candidates)`` picks the micro-batch for -1.

        Without ``probe``, -1 takes the largest candidate (for checks before any compile).

        >>> from theseus.train.config import load_config
        >>> from theseus.train.recipe import Recipe
        >>> cfg = load_config({"training": {"batch_size": 6, "per_device_batch_size": 4}}, Recipe.Config)
        >>> try:
        ...     TrainingPlan.build(cfg, data_parallel=1)
        ... except ValueError as e:
        ...     print(str(e).split("; ")[1])
        use a batch_size that is a multiple of 4
        """
        training = config.training
        B, T = int(training.batch_size), int(config.architecture.block_size)
        requested = int(training.per_device_batch_size)
        if requested == -1:
            candidates = micro_batch_candidates(B, data_parallel)
            requested = probe(candidates) if probe is not None else candidates[0]
        return cls(batch_size=B, block_size=T, per_device_batch_size=requested, data_parallel=int(data_parallel),
                   total_steps=total_steps(training, T), local_replicas=max(int(local_replicas), 1))

    def lines(self) -> list[str]:
        """The BATCHING, STEPS and TOKENS log lines the trainer prints before its first step.

        >>> TrainingPlan(8, 16, 4, 1, 3).lines()[1]
        'STEPS | 6 micro batches // 2 accumulation = 3 steps'
        """
        local = self.local_replicas
        return [
            f"BATCHING | {self.per_device_batch_size} batchsize/node * ({local} local * "
            f"{self.data_parallel // local} prox = {self.data_parallel} dp) * {self.accumulation} accumulation = "
            f"{self.batch_size} batchsize",
            f"STEPS | {self.total_steps * self.accumulation} micro batches // {self.accumulation} accumulation = "
            f"{self.total_steps} steps",
            f"TOKENS | {self.total_steps} steps * {self.batch_size} batchsize * {self.block_size} blocksize = "
            f"{self.tokens} tokens",
        ]
