"""What the training loop calls, and when: hooks with their own cadence, and where a run's files go.

A `Hook` is a function, the event it listens to and a cadence (Levanter's ``add_hook(fn, every=N)``);
`theseus.train.trainer.Trainer.add_hook` attaches one. Events:

- ``"step"``: ``fn(step)`` after the update to ``step`` is dispatched (the trainer's state is that
  step's). It may return metrics for that step's report: a mapping whose values are numbers or
  zero-argument callables the report calls one step later, once the next step is enqueued (a
  device value fetched then costs no wait). Validation and the evaluations, and checkpoints, are
  step hooks.
- ``"report"``: ``fn(step, metrics)`` with each report (the train metrics every
  ``logging.report_interval`` steps, and whatever step hooks measured): the store's records, a
  live mirror, a progress callback.
- ``"commit"``: ``fn(step, folder)`` after the checkpoint of ``step`` in ``folder`` is committed
  (its MANIFEST.json published), on the trainer's thread.

A hook is due at the steps ``every`` divides and at the run's last step; with ``at_stop`` also at
the last step of a ``train()`` call (its ``until``, or a stop asked for: a preemption checkpoints there).

`Outputs` is where a run publishes files beside its checkpoints: ``sidecars(step)`` (e.g. ``job.json``)
go into each checkpoint folder, ``write_artifact(step, name, data)`` publishes an analysis's file.

>>> seen = []
>>> hook = Hook(lambda step, metrics: seen.append(step), every=2)
>>> [step for step in range(1, 6) if hook.due(step, total=5)]
[2, 4, 5]
>>> Hook(print, every=4, on="step", at_stop=True).due(3, total=10, end=3)
True
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

from theseus.errors import BadInput

__all__ = ["EVENTS", "Hook", "Hooks", "Outputs", "resolve"]

#: the events a hook listens to (module doc)
EVENTS = ("step", "report", "commit")
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


@dataclasses.dataclass(frozen=True)
class Hook:
    """``fn`` called on ``on`` events of the steps ``every`` divides, the run's last step and, with ``at_stop``,
    the last step of a ``train()`` call (module doc).

    >>> Hook(print, every=0)
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: a hook's every must be a positive number of steps, got 0
    """

    fn: Callable[..., Any]
    every: int = 1
    on: str = "report"
    at_stop: bool = False

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise BadInput(f"a hook must be callable, got {self.fn!r}")
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise BadInput(f"a hook's every must be a positive number of steps, got {self.every!r}")
        if self.on not in EVENTS:
            raise BadInput(f"a hook listens to one of {list(EVENTS)}, not {self.on!r}")

    def due(self, step: int, total: int, end: int | None = None) -> bool:
        """Whether the hook runs at ``step`` of a run of ``total`` steps whose ``train()`` call ends at ``end``."""
        return step % self.every == 0 or step == total or (self.at_stop and step == end)


def resolve(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics`` with each zero-argument callable replaced by what it returns (a step hook's deferred values).

    >>> resolve({"a": 1.0, "b": lambda: 2.0})
    {'a': 1.0, 'b': 2.0}
    """
    return {k: v() if callable(v) else v for k, v in metrics.items()}


def _no_artifacts(step: int, name: str, data: bytes) -> str:
    raise BadInput(f"cannot write {name!r}: this trainer has no artifact folder (it runs without a store; train "
                   "through a job to keep analyses)")


@dataclasses.dataclass(frozen=True)
class Outputs:
    """Where a run publishes files: ``sidecars`` (a mapping name -> bytes/str, or ``step -> mapping``) added
    to each checkpoint folder, and ``write_artifact(step, name, data) -> path`` for an analysis's files
    (None: analyses cannot write files).

    >>> Outputs(sidecars={"note.txt": "hi"}).sidecars_at(3)
    {'note.txt': 'hi'}
    >>> Outputs().artifact(3, "../x", b"")
    Traceback (most recent call last):
    ...
    theseus.errors.BadInput: artifact name '../x' must be a file name or <folder>/<file> (letters, digits, '._-')
    """

    sidecars: Mapping[str, bytes | str] | Callable[[int], Mapping[str, bytes | str]] | None = None
    write_artifact: Callable[[int, str, bytes], str] | None = None

    def sidecars_at(self, step: int) -> dict[str, bytes | str]:
        """The extra files of the checkpoint of ``step``."""
        return dict(self.sidecars(step) if callable(self.sidecars) else (self.sidecars or {}))

    def artifact(self, step: int, name: str, data: bytes) -> str:
        """Publish ``data`` as the analysis file ``name`` of ``step``; its path. A name must be a file name or
        ``<folder>/<file>``."""
        parts = name.split("/") if isinstance(name, str) else [None]
        if not 1 <= len(parts) <= 2 or not all(isinstance(p, str) and _FILE_NAME.match(p) for p in parts):
            raise BadInput(f"artifact name {name!r} must be a file name or <folder>/<file> (letters, digits, '._-')")
        return (self.write_artifact or _no_artifacts)(step, name, bytes(data))


class Hooks:
    """The hooks attached to a run of ``total`` steps, called in the order they were attached.

    >>> hooks = Hooks(total=4)
    >>> _ = hooks.add(Hook(lambda step: {"my/step": step}, every=2, on="step"))
    >>> _ = hooks.add(Hook(lambda step, metrics: print(step, metrics)))
    >>> hooks.step(2), hooks.step(3)
    ({'my/step': 2}, {})
    >>> hooks.report(3, {"train/loss": 1.0})
    3 {'train/loss': 1.0}
    """

    def __init__(self, total: int):
        self.total = int(total)
        self.attached: tuple[Hook, ...] = ()

    def add(self, hook: Hook) -> Hook:
        """Attach ``hook`` after the others; returns it."""
        self.attached = (*self.attached, hook)
        return hook

    def due(self, on: str, step: int, end: int | None = None) -> list[Hook]:
        """The hooks of event ``on`` due at ``step`` (a ``train()`` call ending at ``end``)."""
        return [h for h in self.attached if h.on == on and h.due(step, self.total, end)]

    def step(self, step: int, end: int | None = None) -> dict[str, Any]:
        """Run the step hooks due at ``step``; the metrics they measured, merged in order."""
        measured: dict[str, Any] = {}
        for hook in self.due("step", step, end):
            measured.update(hook.fn(step) or {})
        return measured

    def report(self, step: int, metrics: dict[str, Any]) -> None:
        """Hand the report of ``step`` to the report hooks due."""
        for hook in self.due("report", step):
            hook.fn(step, metrics)

    def commit(self, step: int, folder: str) -> None:
        """Tell the commit hooks due that the checkpoint of ``step`` in ``folder`` is committed."""
        for hook in self.due("commit", step):
            hook.fn(step, folder)
