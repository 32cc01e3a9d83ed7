"""Preemption: SIGTERM asks a training run to stop at the end of its current step.

SLURM (``scancel``, ``scontrol requeue``, a job's time limit), Kubernetes and spot VMs
send SIGTERM some seconds before they kill a process. ``StopRequest`` turns that signal
into a flag: its handler only records that the signal came (nothing else is safe in a
handler), the training loop asks ``requested`` after each step, checkpoints that step,
commits it and ends the job as ``Preempted`` (`theseus.jobs`). The previous handler is
back when the ``with`` block ends. Signals reach Python's main thread only: elsewhere the
request installs nothing and is never set.

The processes of a ``jax.distributed`` run must stop at one step, or their collectives no
longer match: ``AgreedStop`` asks each step whether to stop, and a process that got the
signal proposes a step a few steps ahead (``LEAD``) through the run's key-value store
(`jax.distributed`'s coordination service); the first proposal wins, every process reads it
and stops there.

>>> import os, signal
>>> with StopRequest() as stop:
...     before = stop.requested
...     os.kill(os.getpid(), signal.SIGTERM)
>>> before, stop.requested, stop.signal_name
(False, True, 'SIGTERM')
"""

from __future__ import annotations

import signal
import threading
from typing import Any

__all__ = ["LEAD", "AgreedStop", "StopRequest"]

# steps between a proposal and the agreed stop: processes run in step with each other, each at most
# the trainer's run-ahead (two steps in flight) past another, so every one reads it before that step
LEAD = 4
KEY = "theseus/preemption/stop-at"


class StopRequest:
    """A context that takes ``signals`` (default SIGTERM) over while it is open and records whether one came.

    >>> with StopRequest() as stop:
    ...     pass
    >>> stop.requested, signal.getsignal(signal.SIGTERM) is not stop._handle
    (False, True)
    """

    def __init__(self, signals: tuple[int, ...] = (signal.SIGTERM,)):
        self.signals = tuple(signals)
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        """Whether one of the signals came since the context opened."""
        return self.received is not None

    @property
    def signal_name(self) -> str | None:
        """The name of the signal that came (``SIGTERM``), None when none did."""
        return None if self.received is None else signal.Signals(self.received).name

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signum  # only a flag: the loop stops at the end of the current step

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():  # Python runs handlers on the main thread only
            self._previous = {s: signal.signal(s, self._handle) for s in self.signals}
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}


class AgreedStop:
    """``stop(step)`` for the trainer: True at the step every process of the run stops at, once one of them
    got ``request``'s signal. One process: the request alone, at once. ``stopped``: whether it answered True.

    >>> stop = AgreedStop(StopRequest())
    >>> stop(3), stop.stopped
    (False, False)
    >>> stop.request.received = 15  # as the handler records a SIGTERM
    >>> stop(4), stop.stopped
    (True, True)
    """

    def __init__(self, request: StopRequest, client: Any = None, processes: int | None = None):
        self.request = request
        if processes is None:  # lazily: only a training run asks how many processes it has
            import jax

            processes = jax.process_count()
        self.processes = int(processes)
        self._client = client
        self.stop_at: int | None = None
        self._proposed = False
        self.stopped = False

    def _store(self) -> Any:
        """The run's key-value store (the coordination service of ``jax.distributed``)."""
        if self._client is None:
            from jax._src import distributed  # the client jax.distributed.initialize started

            self._client = distributed.global_state.client
        return self._client

    def __call__(self, step: int) -> bool:
        if self.processes == 1:
            self.stopped = self.stopped or self.request.requested
            return self.stopped
        if self.stop_at is None:
            store = self._store()
            if self.request.requested and not self._proposed:
                self._proposed = True
                try:
                    store.key_value_set(KEY, str(int(step) + LEAD))
                except Exception:  # noqa: BLE001 - another process proposed first: its step stands
                    pass
            try:
                self.stop_at = int(store.key_value_try_get(KEY))
            except Exception:  # noqa: BLE001 - no proposal yet (the store says NOT_FOUND)
                return False
        self.stopped = self.stopped or step >= self.stop_at
        return self.stopped
