"""A trainer's settings beyond its config: the keyword arguments of `theseus.train.trainer.Trainer`.

- ``peak_cache``: folder caching the measured CPU peak, one JSON file per chip and dtype (default
  ``<root>/meta/cpu_peak``); ``peak_flops``: the peak to use instead (NaN: no MFU, nothing measured).
- ``seed``: seed of the base key of a fresh run (a restore reads ``rng.json``).
- ``devices`` (default: all), ``memory_budget_bytes`` (autobatch), ``progress`` (None: a bar when
  stderr is a terminal).
- Shorthands for hooks and outputs (`theseus.train.hooks`): ``on_report(step, metrics)`` (a report
  hook), ``on_checkpoint(step, folder)`` (a commit hook), ``folder_fn(step) -> folder`` (checkpoints
  every ``logging.checkpoint_interval`` steps there), ``write_artifact`` and ``sidecars`` (`Outputs`).

>>> Settings.of({"seed": 3, "progress": False}).seed
3
>>> Settings.of({"sead": 3})
Traceback (most recent call last):
...
theseus.errors.BadInput: Trainer got unknown settings ['sead']; it takes config, root, recipe, hooks, log and devices, folder_fn, memory_budget_bytes, on_checkpoint, on_report, peak_cache, peak_flops, progress, seed, sidecars, write_artifact
"""  # noqa: E501 - the doctest shows the message whole

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from theseus.errors import BadInput

__all__ = ["Settings"]


@dataclasses.dataclass(frozen=True)
class Settings:
    """The settings of one trainer (module doc).

    >>> Settings().peak_flops is None
    True
    """

    peak_cache: str | None = None
    peak_flops: float | None = None
    seed: int = 0
    devices: Sequence[Any] | None = None
    memory_budget_bytes: int | None = None
    progress: bool | None = None
    on_report: Callable[[int, dict[str, Any]], Any] | None = None
    on_checkpoint: Callable[[int, str], Any] | None = None
    folder_fn: Callable[[int], str] | None = None
    write_artifact: Callable[[int, str, bytes], str] | None = None
    sidecars: Mapping[str, bytes | str] | Callable[[int], Mapping[str, bytes | str]] | None = None

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> Settings:
        """The settings of the keyword arguments ``options``; an unknown name is refused, naming the known ones."""
        known = sorted(f.name for f in dataclasses.fields(cls))
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise BadInput(f"Trainer got unknown settings {unknown}; it takes config, root, recipe, hooks, log and "
                           f"{', '.join(known)}")
        return cls(**options)
