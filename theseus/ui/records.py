"""A run's records, read when something needs them (its page, its charts, a column or condition the
summaries do not answer), and kept in a cache bounded by runs and bytes, so the app's memory follows
what its pages show, not the root's size.

:class:`Records` holds the folded records of the runs asked for last (least recently used first out),
each with the segments read into it: a run that gained segments since is read for the new ones only
and folded on top (segments are immutable; folding is idempotent). :meth:`Records.latest` answers a
key's latest value for many runs with one scan of their segments, and keeps the answers per run
version, a bounded number per key.

>>> import tempfile
>>> from theseus.store import Node, Store
>>> from theseus.ui.follow import Follower
>>> store = Store(tempfile.mkdtemp())
>>> n = Node.start("doc.records.run")
>>> with store.writer() as w:
...     w.write(n, {"train/loss": 2.0}); w.failed(n.next(), "boom")
>>> follower = Follower(store); [run] = follower.poll()
>>> follower.records.latest("_error", [run]) == {run.nonce: "boom"}, follower.records.held()
(True, (0, 0))
>>> run.values("train/loss"), follower.records.held()[0]
({0: 2.0}, 1)
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from typing import Any, Protocol

import fsspec
import polars as pl

from theseus.store.listing import vanished
from theseus.store.reader import scan
from theseus.store.recency import latest_of, latest_row, latest_rows
from theseus.store.segments import CorruptSegment
from theseus.store.summary import UnreadableRun

MAX_RUNS = 64  # runs whose records are held at once (the pages and charts open)
MAX_BYTES = 256 * 2**20  # and at most this many bytes of them (one large run alone is still read)
MAX_VALUES = 20_000  # latest values kept per key (one per run; a config's text is kilobytes)
MAX_KEYS = 16  # keys whose latest values are kept
VALUE_COLUMNS = ("float", "int", "bool", "str")
KEEP = ["node", "seq", "parent", "stamp", "writer", "key", "float", "int", "bool", "str"]
EMPTY = pl.DataFrame(schema={"node": pl.String, "seq": pl.Int64, "parent": pl.String, "stamp": pl.Int64,
                             "writer": pl.String, "key": pl.String, "float": pl.Float64, "int": pl.Int64,
                             "bool": pl.Boolean, "str": pl.String})


class _Run(Protocol):
    """What the cache needs of a run (``theseus.ui.follow.RunLog``, not imported: it uses this module)."""

    nonce: str
    label: str
    segments: set[str]
    version: int
    unreadable: dict[str, str]
    facts: Any
    held: pl.DataFrame | None
    rows: pl.DataFrame


class Records:
    """The records of the runs read last, bounded by ``max_runs`` and ``max_bytes``, and latest values
    per key (see the module's docstring).

    >>> Records(fsspec.filesystem("memory")).held()
    (0, 0)
    """

    def __init__(self, fs: fsspec.AbstractFileSystem, max_runs: int = MAX_RUNS, max_bytes: int = MAX_BYTES,
                 max_values: int = MAX_VALUES):
        self.fs = fs
        self.max_runs, self.max_bytes, self.max_values = max_runs, max_bytes, max_values
        self.reads = 0  # scans of segments made (each run read, each batch of latest values)
        # nonce -> (segments read, folded rows, their bytes)
        self._rows: OrderedDict[str, tuple[frozenset, pl.DataFrame, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.RLock()  # requests are served from a thread pool: one reader of the cache at a time
        # key -> nonce -> (run version, latest value)
        self._values: OrderedDict[str, OrderedDict[str, tuple[int, Any]]] = OrderedDict()

    def held(self) -> tuple[int, int]:
        """``(runs, bytes)`` of records held now."""
        return len(self._rows), self._bytes

    def rows(self, run: _Run) -> pl.DataFrame:
        """The run's folded records (one row per node and key, the latest write winning), in (seq, key)
        order: from the cache while its segments are those read, else read (the new segments only when
        the run only gained some)."""
        with self._lock:
            return self._rows_of(run)

    def _rows_of(self, run: _Run) -> pl.DataFrame:
        segments = frozenset(run.segments)
        hit = self._rows.get(run.nonce)
        if hit is not None and hit[0] == segments:
            self._rows.move_to_end(run.nonce)
            return hit[1]
        kept = hit[1] if hit is not None and hit[0] <= segments else EMPTY
        fresh = sorted(segments - hit[0]) if hit is not None and hit[0] <= segments else sorted(segments)
        both = pl.concat([kept, self._read(run, fresh)], how="vertical_relaxed")
        rows = latest_rows(both.lazy(), ["node", "key"]).collect().sort("seq", "key")
        self._keep(run.nonce, segments, rows)
        return rows

    def _keep(self, nonce: str, segments: frozenset, rows: pl.DataFrame) -> None:
        """Hold ``rows`` as the run's, dropping the least recently used runs past the bounds."""
        old = self._rows.pop(nonce, None)
        if old is not None:
            self._bytes -= old[2]
        size = rows.estimated_size()
        self._rows[nonce] = (segments, rows, size)
        self._bytes += size
        while len(self._rows) > 1 and (len(self._rows) > self.max_runs or self._bytes > self.max_bytes):
            _, (_, _, dropped) = self._rows.popitem(last=False)
            self._bytes -= dropped

    def _read(self, run: _Run, paths: list[str]) -> pl.DataFrame:
        """The raw records of ``paths``; one that cannot be read is left out and noted in the run's
        ``unreadable`` (its row then says so)."""
        self.reads += 1
        frame, unreadable = read_segments(self.fs, paths, run.label)
        run.unreadable.update(unreadable)
        return frame

    def latest(self, key: str, runs: list[_Run]) -> dict[str, Any]:
        """``{nonce: value}`` of ``key``'s latest record (by write stamp, then writer) in each of ``runs``
        (None where it has none): from the values kept for the run's version, the records held, or one
        scan of the other runs' segments together."""
        with self._lock:
            return self._latest(key, runs)

    def _latest(self, key: str, runs: list[_Run]) -> dict[str, Any]:
        kept = self._values.setdefault(key, OrderedDict())
        self._values.move_to_end(key)
        while len(self._values) > MAX_KEYS:
            self._values.popitem(last=False)
        found, missing = {}, []
        for run in runs:
            hit = kept.get(run.nonce)
            if hit is not None and hit[0] == run.version:
                found[run.nonce] = hit[1]
            elif key not in run.facts.keys:
                found[run.nonce] = None
            elif run.held is not None or run.nonce in self._rows:
                found[run.nonce] = latest_value(run.rows, key)
            else:
                missing.append(run)
        if missing:
            found.update(self._scan_latest(key, missing))
        for run in runs:
            kept[run.nonce] = (run.version, found[run.nonce])
            kept.move_to_end(run.nonce)
        while len(kept) > self.max_values:
            kept.popitem(last=False)
        return found

    def _scan_latest(self, key: str, runs: list[_Run]) -> dict[str, Any]:
        """``key``'s latest value in each of ``runs`` (none shares a nonce) from one scan of their segments;
        when a segment cannot be read, each run from its own records instead (a bad file costs its run)."""
        self.reads += 1
        paths = [p for run in runs for p in sorted(run.segments)]
        try:
            frame = (scan(self.fs, paths).filter(pl.col("key") == key)
                     .group_by("nonce").agg(latest_of(pl.col(*VALUE_COLUMNS)))
                     .select("nonce", *VALUE_COLUMNS).collect())
        except (CorruptSegment, pl.exceptions.PolarsError, OSError) as e:
            if vanished(e):
                raise
            return {run.nonce: latest_value(self.rows(run), key) for run in runs}
        found = dict.fromkeys((run.nonce for run in runs), None)
        for nonce, *values in frame.iter_rows():
            found[nonce] = next((v for v in values if v is not None), None)
        return found


def read_segments(fs: fsspec.AbstractFileSystem, paths: list[str], label: str) -> tuple[pl.DataFrame, dict[str, str]]:
    """The raw records of segments ``paths`` (one scan; one segment at a time when that fails), and
    ``{path: why}`` of each that cannot be read (not a regular file, truncated, damaged): left out, with
    an ``UnreadableRun`` warning naming it and the run ``label``.

    >>> frame, unreadable = read_segments(fsspec.filesystem("file"), [], "a:abcdef")
    >>> frame.height, unreadable
    (0, {})
    """
    try:
        return (scan(fs, paths).select(KEEP).collect() if paths else EMPTY), {}
    except (CorruptSegment, pl.exceptions.PolarsError, OSError) as e:
        if vanished(e):
            raise
    parts, unreadable = [EMPTY], {}
    for path in paths:
        try:
            parts.append(scan(fs, [path]).select(KEEP).collect())
        except (CorruptSegment, pl.exceptions.PolarsError, OSError) as e:
            if vanished(e):
                raise
            why = str(e) if isinstance(e, CorruptSegment) else f"corrupt or truncated segment {path}: {e}"
            unreadable[path] = why
            warnings.warn(f"run {label}: {why}", UnreadableRun, stacklevel=3)
    return pl.concat(parts, how="vertical_relaxed"), unreadable


def latest_value(rows: pl.DataFrame, key: str) -> Any:
    """The value of ``key``'s latest record (by write stamp, then writer) in folded ``rows``, or None.

    >>> latest_value(EMPTY, "train/loss") is None
    True
    """
    held = rows.filter(pl.col("key") == key)
    if held.height == 0:
        return None
    row = latest_row(held)
    return next((row[c] for c in VALUE_COLUMNS if row[c] is not None), None)
