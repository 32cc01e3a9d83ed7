"""Mirroring off the training thread: a bounded queue drained by one worker thread that owns the sink.

``Mirror(open_sink, label)`` starts the worker, which opens the sink (a backend's
login or network wait happens there, not on the caller's thread). ``report(step,
values)`` never blocks: when the queue is full the report is dropped and counted.
A sink that fails to open or to log is warned about once; the reports after it are
counted as not mirrored and the caller goes on (the store holds every report).
``close()`` lets the worker finish the queue, closes the sink, logs one summary line
and returns the counts.

>>> logged = []
>>> class Listed:
...     def log(self, step, values): logged.append((step, dict(values)))
...     def close(self): pass
>>> mirror = Mirror(Listed, "listed")
>>> mirror.report(1, {"train/loss": 2.5, "note": "text"}); mirror.report(2, {"train/loss": 2.0})
>>> mirror.close()
MirrorStats(reports=2, mirrored=2, dropped=0, failed=0, error=None)
>>> logged
[(1, {'train/loss': 2.5}), (2, {'train/loss': 2.0})]
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any

from loguru import logger

from theseus.errors import BadInput
from theseus.mirror.sinks import Sink, scalars

_CLOSE = object()  # the queue's last item: the worker closes the sink and ends


@dataclasses.dataclass(frozen=True)
class MirrorStats:
    """What a mirror did: ``reports`` offered, ``mirrored``, ``dropped`` (queue full), ``failed`` (not mirrored
    because the sink failed) and the sink's ``error`` (None when it never failed).

    >>> MirrorStats(3, 2, 1, 0, None).complete
    False
    """

    reports: int
    mirrored: int
    dropped: int
    failed: int
    error: str | None

    @property
    def complete(self) -> bool:
        """Whether every report was mirrored."""
        return self.mirrored == self.reports and self.error is None


class Mirror:
    """A worker thread mirroring reports into the sink ``open_sink()`` returns; see the module doc.

    ``capacity`` bounds the queue (reports waiting); ``close_timeout`` bounds how long
    ``close()`` waits for the worker (a sink still uploading after that is left to finish
    in the background, and reported). ``log`` is a loguru-like logger.

    >>> def broken():
    ...     raise ConnectionError("no network")
    >>> mirror = Mirror(broken, "broken", log=None)
    >>> mirror.report(1, {"train/loss": 2.5})
    >>> stats = mirror.close(); stats.failed, stats.error
    (1, 'ConnectionError: no network')
    """

    def __init__(self, open_sink: Callable[[], Sink], label: str, *, capacity: int = 1024,
                 close_timeout: float = 120.0, log: Any = logger):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise BadInput(f"capacity must be a positive int, got {capacity!r}")
        self.label = label
        self.log = log
        self.close_timeout = close_timeout
        self._open = open_sink
        self._queue: queue.Queue = queue.Queue(maxsize=capacity)
        self._lock = threading.Lock()
        self._reports = self._dropped = self._mirrored = self._failed = 0
        self._error: str | None = None
        self._stats: MirrorStats | None = None
        self._thread = threading.Thread(target=self._work, name=f"theseus-mirror-{label}", daemon=True)
        self._thread.start()

    def report(self, step: int, values: Mapping[str, Any]) -> None:
        """Queue one report's scalars at ``step``; never blocks (a full queue drops it and counts the drop)."""
        if self._stats is not None:
            raise RuntimeError(f"mirror {self.label} is closed")
        numbers = scalars(values)
        with self._lock:
            self._reports += 1
        try:
            self._queue.put_nowait((int(step), numbers))
        except queue.Full:
            with self._lock:
                self._dropped += 1

    def close(self) -> MirrorStats:
        """Finish the queue, close the sink, log the summary and return the counts (a second call returns them)."""
        if self._stats is not None:
            return self._stats
        try:
            self._queue.put(_CLOSE, timeout=self.close_timeout)
        except queue.Full:
            pass
        self._thread.join(self.close_timeout)
        with self._lock:
            if self._thread.is_alive() and self._error is None:
                self._error = f"still mirroring after {self.close_timeout:g} s; left to finish in the background"
            self._stats = MirrorStats(self._reports, self._mirrored, self._dropped,
                                      self._reports - self._mirrored - self._dropped, self._error)
        self._summary(self._stats)
        return self._stats

    # -- the worker ------------------------------------------------------------

    def _work(self) -> None:
        ok, sink = self._guard(self._open)
        while True:
            item = self._queue.get()
            if item is _CLOSE:
                break
            if ok:  # after a failure, the rest are counted as not mirrored
                ok, _ = self._guard(lambda: sink.log(*item))
                if ok:
                    with self._lock:
                        self._mirrored += 1
        if ok:
            self._guard(sink.close)

    def _guard(self, call: Callable[[], Any]) -> tuple[bool, Any]:
        """``(True, call())``, or ``(False, None)`` after warning once when it raises: the training never sees a
        sink's error."""
        try:
            return True, call()
        except Exception as e:  # any failure of a backend (network, login, disk): the store is the source of truth
            with self._lock:
                first = self._error is None
                self._error = self._error or f"{type(e).__name__}: {e}"
            if first and self.log is not None:
                self.log.warning(f"MIRROR | {self.label} failed ({type(e).__name__}: {e}); training goes on and the "
                                 "store keeps every report (`theseus export tensorboard` can mirror them later)")
            return False, None

    def _summary(self, stats: MirrorStats) -> None:
        if self.log is None:
            return
        if stats.complete:
            self.log.info(f"MIRROR | {self.label}: {stats.mirrored} reports mirrored")
        else:
            self.log.warning(f"MIRROR | {self.label}: {stats.mirrored} of {stats.reports} reports mirrored, "
                             f"{stats.dropped} dropped (queue full), {stats.failed} not mirrored"
                             + (f" ({stats.error})" if stats.error else "") + "; the store holds every one")
