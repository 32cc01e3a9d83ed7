"""Preemption: SIGTERM asks a training run to stop at the end of its current step.

SLURM (``scancel``, ``scontrol requeue``, a job's time limit), Kubernetes and spot VMs
send SIGTERM some seconds before they kill a process. ``StopRequest`` turns that signal
into a flag: its handler only records that the signal came (nothing else is safe in a
handler), the training loop asks ``requested`` after each step, checkpoints that step,
commits it and ends the job as ``Preempted`` (`theseus.jobs`). The previous handler is
back when the ``with`` block ends. Signals reach Python's main thread only: elsewhere the
request installs nothing and is never set.

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

__all__ = ["StopRequest"]


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
