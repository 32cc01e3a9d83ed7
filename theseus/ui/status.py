"""A run's status for people: ``running``, ``finished``, ``failed`` or ``stale``.

The store records ``_status`` (``running`` when a job starts, ``finished`` or ``failed`` at
its end). A run still marked ``running`` whose last write is older than ``STALE_AFTER_S``
seconds is ``stale``: its process most likely died without recording why (killed, a lost
machine). The trainer writes at every report and checkpoint, so a healthy run goes quiet
that long only with reports rarer than that; ``theseus ui --stale-after`` sets another
threshold. A run without any status record (a script's writer) is treated the same way:
``running`` while it writes, then ``stale``.

>>> NS = 1_000_000_000
>>> run_status("running", None, written=0, now=60 * NS)
'running'
>>> run_status("running", None, written=0, now=(STALE_AFTER_S + 1) * NS)
'stale'
>>> run_status("failed", False, written=0, now=0), run_status(None, True, written=0, now=0)
('failed', 'finished')
"""

from __future__ import annotations

STALE_AFTER_S = 600  # ten minutes without a write
STATUSES = ("running", "finished", "failed", "stale")


def run_status(status: str | None, finished: bool | None, written: int, now: int,
               stale_after_s: float = STALE_AFTER_S) -> str:
    """The status shown for a run from its latest ``_status`` and ``_finished`` records, its last
    write stamp (``written``, ns) and the clock (``now``, ns).

    >>> run_status("finished", True, written=0, now=10**18)
    'finished'
    """
    if status == "failed" or finished is False and status != "running":
        return "failed"
    if status == "finished" or finished is True:
        return "finished"
    if status not in (None, "running"):
        return status  # a status some job wrote by hand: shown as it is
    return "stale" if now - written > stale_after_s * 1e9 else "running"
