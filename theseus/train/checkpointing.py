"""When a run checkpoints, and the delivery of each committed checkpoint on the trainer's thread.

`Checkpoints` owns the `Checkpointer` (background writes), the interval, the
folder of each step and the sidecar files. A step is due every ``interval`` steps
and at the last step; ``save`` starts a checkpoint (after delivering the previous
one: its record must be written before the next save can fill a disk), and
``deliver``/``wait`` run the commit callbacks on the caller's thread.

>>> import tempfile, jax.numpy as jnp
>>> root = tempfile.mkdtemp()
>>> done = []
>>> saves = Checkpoints(folder_fn=lambda step: f"{root}/step-{step}", interval=2, total_steps=3,
...                     on_checkpoint=lambda step, folder: done.append(step))
>>> [step for step in range(1, 4) if saves.due(step)]
[2, 3]
>>> saves.save(2, {"w": jnp.ones(2), "step": jnp.int32(2)}, {"rng.json": "{}"}); saves.wait(); done
[2]
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

from loguru import logger

from theseus.train.checkpoint import Checkpointer

__all__ = ["Checkpoints"]


class Checkpoints:
    """The checkpoint schedule of a run: see the module doc.

    ``folder_fn(step)`` names the folder of a periodic checkpoint (None: no periodic
    checkpoints; ``save(step, state, sidecars, folder=...)`` still works);
    ``on_checkpoint(step, folder)`` runs after each commit.

    >>> Checkpoints(folder_fn=None, interval=1, total_steps=5).due(5)
    False
    """

    def __init__(self, folder_fn: Callable[[int], str] | None, interval: int, total_steps: int,
                 on_checkpoint: Callable[[int, str], Any] | None = None, log: Any = logger):
        self.folder_fn = folder_fn
        self.interval = int(interval)
        self.total_steps = int(total_steps)
        self.on_checkpoint = on_checkpoint
        self.log = log
        self.last_saved: int | None = None
        self._checkpointer = Checkpointer()
        self._commits: queue.SimpleQueue = queue.SimpleQueue()

    def due(self, step: int, end: int | None = None) -> bool:
        """Whether ``train()`` checkpoints ``step``: every ``interval`` steps, the run's last step and ``end``.

        >>> Checkpoints(folder_fn=str, interval=4, total_steps=10).due(6, end=6)
        True
        """
        if self.folder_fn is None or self.last_saved == step:
            return False
        return step % self.interval == 0 or step == self.total_steps or step == end

    def save(self, step: int, state: Any, sidecars: dict[str, bytes | str], folder: str | None = None,
             on_commit: Callable[[str], Any] | None = None) -> None:
        """Start checkpointing ``state`` (the state after ``step`` steps) into ``folder`` (default ``folder_fn(step)``).

        Returns once the device state is copied to host; ``on_commit(folder)`` and
        ``on_checkpoint(step, folder)`` run at the latest in ``wait()``.
        """
        # the previous checkpoint's record first: were it delivered after this save starts,
        # a disk this save fills would refuse it and leave that complete checkpoint unreferenced
        self.wait()
        folder = self.folder_fn(step) if folder is None else folder
        self.log.debug(f"CHECKPOINT | saving step {step} to {folder}")
        commits = self._commits
        self._checkpointer.save(folder, state, sidecars, on_commit=lambda f: commits.put((step, f, on_commit)))
        self.last_saved = step

    def forget(self) -> None:
        """Forget the last saved step (the trainer's state was replaced: that step may be saved again)."""
        self.last_saved = None

    def deliver(self) -> None:
        """Run the callbacks of the checkpoints committed so far (on this thread)."""
        while True:
            try:
                step, folder, extra = self._commits.get_nowait()
            except queue.Empty:
                return
            self.log.info(f"CHECKPOINT | saved checkpoint at step {step} in {folder}")
            if extra is not None:
                extra(folder)
            if self.on_checkpoint is not None:
                self.on_checkpoint(step, folder)

    def wait(self) -> None:
        """Block until the pending checkpoint is committed, deliver its callbacks; re-raise its error."""
        self._checkpointer.wait()
        self.deliver()
