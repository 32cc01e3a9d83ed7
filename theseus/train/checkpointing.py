"""The checkpoints of a run in flight, and the delivery of each committed one on the trainer's thread.

`Checkpoints` owns the `Checkpointer` (background writes). ``save`` starts a checkpoint
(after delivering the previous one: its record must be written before the next save can
fill a disk), and ``deliver``/``wait`` run the commit callbacks on the caller's thread.
``defer`` runs work a commit leaves (deleting retired checkpoints) on a background thread,
one piece at a time, so the trainer does not wait for it; ``wait`` waits for it too. When a
run checkpoints is a hook's cadence (`theseus.train.hooks`).

>>> import tempfile, jax.numpy as jnp
>>> root = tempfile.mkdtemp()
>>> done = []
>>> saves = Checkpoints(on_checkpoint=lambda step, folder: done.append(step))
>>> saves.save(2, {"w": jnp.ones(2), "step": jnp.int32(2)}, {"rng.json": "{}"}, f"{root}/step-2")
>>> saves.wait(); done, saves.last_saved
([2], 2)
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from loguru import logger

from theseus.train.checkpoint import Checkpointer

__all__ = ["Checkpoints"]


class Checkpoints:
    """The checkpoints of a run: see the module doc. ``on_checkpoint(step, folder)`` runs after each commit;
    ``last_saved`` is the step of the last checkpoint started.

    >>> Checkpoints().last_saved is None
    True
    """

    def __init__(self, on_checkpoint: Callable[[int, str], Any] | None = None, log: Any = logger):
        self.on_checkpoint = on_checkpoint
        self.log = log
        self.last_saved: int | None = None
        self._checkpointer = Checkpointer()
        self._commits: queue.SimpleQueue = queue.SimpleQueue()
        self._deferred: Future | None = None
        self._worker: ThreadPoolExecutor | None = None  # started by the first defer()

    def save(self, step: int, state: Any, sidecars: dict[str, bytes | str], folder: str,
             on_commit: Callable[[str], Any] | None = None) -> None:
        """Start checkpointing ``state`` (the state after ``step`` steps) into ``folder``.

        Returns once the device state is copied to host; ``on_commit(folder)`` and
        ``on_checkpoint(step, folder)`` run at the latest in ``wait()``.
        """
        # the previous checkpoint's record first: were it delivered after this save starts,
        # a disk this save fills would refuse it and leave that complete checkpoint unreferenced
        self._checkpointer.wait()
        self.deliver()
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

    def defer(self, work: Callable[[], Any]) -> None:
        """Run ``work`` on the background thread, after the work deferred before (which this waits for,
        so at most one piece is pending); ``wait()`` re-raises its error.

        >>> saves = Checkpoints()
        >>> done = []
        >>> saves.defer(lambda: done.append(1)); saves.wait(); done
        [1]
        """
        self._join_deferred()
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="theseus-deferred")
        self._deferred = self._worker.submit(work)

    def _join_deferred(self) -> None:
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            deferred.result()

    def wait(self) -> None:
        """Block until the pending checkpoint is committed, deliver its callbacks and finish the work they
        deferred; re-raise an error of either."""
        self._checkpointer.wait()
        self.deliver()
        self._join_deferred()
