"""A run's status, one rule for ``theseus ls``, ``theseus show``, the UI and ``Store.runs()``:
``running``, ``finished``, ``failed``, ``preempted`` or ``stale``.

The store records ``_status`` (``running`` when a job starts, ``finished`` or ``failed`` at
its end, ``preempted`` when a training job stopped on SIGTERM after committing a checkpoint:
not an error, the run resumes from that checkpoint, ``theseus run ... --resume``). A run still
marked ``running`` whose last write is older than ``STALE_AFTER_S`` seconds is ``stale``: its
process most likely died without recording why (killed, a lost machine). The trainer writes at
every report and checkpoint, so a healthy run goes quiet that long only with reports rarer
than that; ``theseus ui --stale-after`` sets another threshold. A run without any status
record (a script's writer) is treated the same way: ``running`` while it writes, then ``stale``.
The last write is that of the run's own records: a person's marks (``theseus tag``, ``note``,
``hide``) leave it alone (``theseus.store.summary.run_written``), so marking a dead run never
makes it read as running.
Any other recorded status is shown as it is: the branch of an inspection session
(``theseus.train.inspection``) is ``inspecting``, then ``inspected``, and ``theseus ls`` and the UI list
such branches only when asked.

>>> NS = 1_000_000_000
>>> run_status("running", None, written=0, now=60 * NS)
'running'
>>> run_status("running", None, written=0, now=(STALE_AFTER_S + 1) * NS)
'stale'
>>> run_status("failed", False, written=0, now=0), run_status(None, True, written=0, now=0)
('failed', 'finished')
"""

from __future__ import annotations

import time

import polars as pl

from theseus.store import schema
from theseus.store.fold import WRITTEN

STALE_AFTER_S = 600  # ten minutes without a write
PREEMPTED = "preempted"  # stopped on request with a committed checkpoint at its tip: resumable, not failed
STATUSES = ("running", "finished", "failed", PREEMPTED, "stale")
# a training job ticked outside job() (theseus.train.inspection): a lineage the ticks started is
# an inspection branch, inspecting while its session lasts, inspected once closed; ticks that
# continued a lineage leave it closed
INSPECTING, INSPECTED, CLOSED = "inspecting", "inspected", "closed"
INSPECTION = (INSPECTING, INSPECTED)  # listed by ls and the UI only when asked


def run_status(status: str | None, finished: bool | None, written: int | None, now: int,
               stale_after_s: float = STALE_AFTER_S) -> str:
    """The status of a run from its latest ``_status`` and ``_finished`` records, its last
    write stamp (``written``, ns; None: never written) and the clock (``now``, ns).

    >>> run_status("finished", True, written=0, now=10**18), run_status(PREEMPTED, None, written=0, now=10**18)
    ('finished', 'preempted')
    """
    if status == "failed" or finished is False and status != "running":
        return "failed"
    if status == "finished" or finished is True:
        return "finished"
    if status not in (None, "running"):
        return status  # a status some job wrote by hand: shown as it is
    return "stale" if written is None or now - written > stale_after_s * 1e9 else "running"


def with_status(runs: pl.DataFrame, now: int | None = None, stale_after_s: float = STALE_AFTER_S) -> pl.DataFrame:
    """``runs`` (one row per run with ``_status``, ``_finished`` and the last write stamp, as
    `theseus.store.Store.runs` reads them) with a ``status`` column by `run_status` at ``now``
    (ns; default: the clock).

    >>> runs = pl.DataFrame({"nonce": ["a", "b"], "_written": [0, 10**18], "_status": ["running", "running"]})
    >>> with_status(runs, now=10**18)["status"].to_list()
    ['stale', 'running']
    """
    now = time.time_ns() if now is None else int(now)
    columns = [c if c in runs.columns else None for c in (schema.STATUS, schema.FINISHED, WRITTEN)]
    rows = zip(*[runs[c].to_list() if c else [None] * runs.height for c in columns])
    status = [run_status(s, f, w, now, stale_after_s) for s, f, w in rows]
    return runs.with_columns(pl.Series("status", status, dtype=pl.String))


def without_inspections(runs: pl.DataFrame) -> pl.DataFrame:
    """``runs`` (`theseus.store.Store.runs`) less the inspection branches (latest ``_status`` in
    ``INSPECTION``).

    >>> runs = pl.DataFrame({"nonce": ["a", "b", "c"], "_status": ["running", INSPECTED, None]})
    >>> without_inspections(runs)["nonce"].to_list()
    ['a', 'c']
    """
    if schema.STATUS not in runs.columns:
        return runs
    return runs.filter(~pl.col(schema.STATUS).is_in(INSPECTION).fill_null(False))
