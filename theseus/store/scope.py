"""A scope: the runs one query reads, listed once, folded into one row per node.

Each run of the scope is read from one of two places (a lineage of at most
``MAX_LOG_FOLD_SEGMENTS`` segments always from the log: folding them costs less than
parsing the view's footer):

- the newest view (``theseus.store.view_file``), when the run's segments are exactly
  those the view folded, or when every other segment is newer than all of them
  (its records then win over the view's, so they are folded on top);
- the log itself (``theseus.store.fold``) for every other run: runs the view
  does not cover, runs compacted since, and runs whose key types the view had to
  widen (so a view never changes an answer).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Callable, TypeVar

import polars as pl
import pyarrow as pa

from theseus.store.fold import DTYPES, WRITTEN, fold_run, fold_values, python_values, with_identity
from theseus.store.index import Index
from theseus.store.listing import is_glob, retry_vanished, vanished
from theseus.store.segments import CorruptSegment, union_keys
from theseus.store.summary import UnreadableRun
from theseus.store.view_file import CorruptView
from theseus.store.view_files import Views

T = TypeVar("T")

MAX_LOG_FOLD_SEGMENTS = 8  # a lineage with up to this many segments is folded from the log, not read from the view


class Scope:
    """The segments of the runs matching a name and nonce glob, and the newest view
    (a name or nonce of None matches no run: the query's filters contradict).

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> scope = Scope(Index(store.fs, store.path()), nonce=n.nonce)
    >>> scope.types()
    {'loss': 'float'}
    >>> scope.nodes({"loss": "float"})[0].collect().rows()
    [('general.default.doc', '...', 0, 1.5)]
    """

    def __init__(self, index: Index, name: str | None = "*", nonce: str | None = "*"):
        self.index = index
        self.in_view: dict[tuple[str, str], int] = {}  # run -> view run number
        self.newer: dict[tuple[str, str], list[str]] = {}  # view run -> its segments newer than the view
        self.runs: Mapping[tuple[str, str], list[str]] = {}
        self.view: Views | None = None
        if name is None or nonce is None:  # contradicting filters: no run can match
            return
        if not is_glob(nonce):  # one lineage: list it first, it may not need the view
            self.runs = index.runs(name, nonce)
            if sum(len(paths) for paths in self.runs.values()) <= MAX_LOG_FOLD_SEGMENTS:
                return  # a few segments fold faster than the view's footer parses (same answer)
            view = index.view()
        else:
            view = index.view()  # first: its record of the log spares listing unchanged folders
            recorded = index.recorded_runs(view, name, nonce)
            if recorded is not None:  # the log holds exactly what the view folded: every run is in it
                self.runs, self.view = recorded, view if recorded else None
                self.in_view = {run: view.runs[run] for run in recorded}
                return
            self.runs = index.runs(name, nonce)
        self.view = view if self.runs else None
        view = self.view
        for run, paths in self.runs.items():
            number = view.runs.get(run) if view is not None else None
            if number is None:
                continue
            if view.covers(run, paths):
                self.in_view[run] = number
                continue
            names = {p.rsplit("/", 1)[-1] for p in paths}
            covered = set(view.segments[number])
            if covered < names:
                newer = [p for p in paths if p.rsplit("/", 1)[-1] not in covered]
                if all(f.stamps and f.stamps[0] > view.stamp(number) for f in index.footers.footers(newer)):
                    self.in_view[run] = number
                    self.newer[run] = newer

    def types(self, light: bool = False) -> dict[str, str]:
        """Every key logged in the scope with its read type (``light``: from the segments' keys
        footers alone where their whole footers are not parsed yet, for a query that folds few of them)."""
        return union_keys(self._key_types(light))

    def type_sets(self, skip_unreadable: bool = False) -> dict[str, set[str]]:
        """Every key logged in the scope with each type a segment (or a run of the view) holds it with.

        ``skip_unreadable``: a segment whose footer cannot be read adds no types (an ``UnreadableRun``
        warning names it) instead of raising, so one bad file of a run stops no writer of the root.

        >>> import os
        >>> from theseus.store.store import _doc_store
        >>> store, n = _doc_store()
        >>> Scope(Index(store.fs, store.path()), nonce=n.nonce).type_sets()
        {'loss': {'float'}}
        >>> os.mkfifo(store._index.segments()[0].replace("/s-", "/s-9"))
        >>> Scope(Index(store.fs, store.path()), nonce=n.nonce).type_sets(skip_unreadable=True)
        {'loss': {'float'}}
        """
        found: dict[str, set[str]] = {}
        for keys in self._key_types(skip_unreadable=skip_unreadable):
            for key, kind in keys.items():
                found.setdefault(key, set()).add(kind)
        return found

    def _key_types(self, light: bool = False, skip_unreadable: bool = False) -> list[dict[str, str]]:
        """The ``{key: type}`` of each run of the view in scope and of each segment read from the log."""
        view = self.view
        sets = [view.keys(i) for i in {view.signature(i): i for i in self.in_view.values()}.values()]
        logged = [p for run in self.runs if run not in self.in_view or run in self.newer
                  for p in (self.newer[run] if run in self.newer else self.runs[run])]
        footers = self.index.footers
        if light:
            return sets + footers.keys_of(logged)
        try:
            return sets + [f.keys for f in footers.footers(logged)]
        except CorruptSegment:
            if not skip_unreadable:
                raise
        for path in logged:  # one at a time: only the bad files are left out
            try:
                sets.append(footers.footers([path])[0].keys)
            except CorruptSegment as e:
                warnings.warn(f"its types are not known: {e}", UnreadableRun, stacklevel=4)
        return sets

    def nodes(
        self,
        keys: dict[str, str],
        rows: list[str] | None = None,
        parent: bool = False,
        written: bool = False,
        run_filter: Callable[[dict], bool] | None = None,
        run_keys: tuple[str, ...] = (),
        only: set[tuple[str, str]] | None = None,
    ) -> tuple[pl.LazyFrame, bool]:
        """One row per node: name, nonce, seq, [parent], [_written], then ``keys``.

        ``rows`` limits the nodes to those holding one of these keys; ``run_filter``
        keeps the runs for which it returns True, given ``{key: (value, stamp, writer)}``
        of the run's latest record of each of ``run_keys``. Returns the frame and whether
        its rows are in the default (name, nonce, seq) order (they are unless both the
        view and the log contribute). ``only``: of the runs read from the log alone, read
        only these.
        """
        view = self.view
        # run -> view run number, for the runs the view stores with the asked types (not widened)
        widened: dict[tuple[int, int], bool] = {}  # by view signature: runs sharing one share the answer
        same_types = {}
        for run, i in self.in_view.items():
            signature = view.signature(i)
            if signature not in widened:
                widened[signature] = self._widened(i, keys)
            if not widened[signature]:
                same_types[run] = i
        parts, view_runs, folded = [], [], []  # view run numbers read as stored; (run, frame) folded here
        for run in self.runs:
            if only is not None and run not in self.in_view and run not in only:
                continue
            if run not in same_types:
                frame, latest = self._fold(run, self.runs[run], keys, rows, parent, written, run_keys)
            elif run in self.newer:
                frame, latest = self._view_with_newer(run, same_types[run], keys, rows, parent, written, run_keys)
            else:
                view_runs.append(same_types[run])
                continue
            if run_filter is None or run_filter(latest):
                folded.append((run, frame))
        if run_filter is not None:
            view_runs = [i for i in view_runs if run_filter(view.latest(i))]
        ordered = True
        if view_runs:
            frame, ordered = view.scan(self.index, view_runs, keys, parent, written)
            if rows:
                frame = frame.filter(pl.any_horizontal(pl.col(k).is_not_null() for k in rows))
            parts.append(frame)
        if folded:
            parts.append(pl.concat([with_identity(frame, *run) for run, frame in folded]).lazy())
        if not parts:
            return empty_nodes(keys, parent, written).lazy(), True
        return (parts[0], ordered) if len(parts) == 1 else (pl.concat(parts), False)

    def _widened(self, number: int, keys: dict[str, str]) -> bool:
        """True when the view file of run ``number`` stores one of its ``keys`` as another type than asked."""
        own, stored = self.view.keys(number), self.view.stored(number)
        return any(k in own and stored.get(k) != t for k, t in keys.items())

    def log_values(self, keys: dict[str, str], columns: list[str]) -> dict[str, list] | None:
        """``{column: values}`` (Python lists) of the nodes holding one of ``columns``, runs in
        order, when every run of the scope is read from the log (None otherwise): the folds'
        own values, with no frame built and no Polars plan run (a projection is all a plain
        ``select()`` asks of them).

        >>> from theseus.store.store import _doc_store
        >>> store, n = _doc_store()
        >>> Scope(Index(store.fs, store.path()), nonce=n.nonce).log_values({"loss": "float"}, ["loss"])
        {'loss': [1.5]}
        """
        if self.in_view or not self.runs:
            return None
        out: dict[str, list] = {c: [] for c in columns}
        for paths in self.runs.values():
            values = fold_values(self.index.fs, list(zip(paths, self.index.footers.footers(paths))), keys, columns)
            for c in columns:
                out[c] += python_values(values[c])
        return out

    def _fold(self, run, paths, keys, rows, parent, written, run_keys) -> tuple[pl.DataFrame, dict]:
        """The run's fold from the log (seq first, no name or nonce columns) and its latest records."""
        footers = self.index.footers.footers(paths)
        folded = fold_run(self.index.fs, list(zip(paths, footers)), keys, rows, parent=parent, written=written,
                          latest=run_keys)
        return folded.frame, folded.latest

    def _view_with_newer(self, run, number, keys, rows, parent, written, run_keys) -> tuple[pl.DataFrame, dict]:
        """The view's rows of a run with the fold of its newer segments on top (newer values win),
        seq first, like :meth:`_fold`."""
        base = self.view.scan(self.index, [number], keys, parent, written)[0].drop("name", "nonce").collect()
        new, latest = self._fold(run, self.newer[run], keys, None, parent, written, run_keys)
        merged = base.join(new, on="seq", how="full", coalesce=True, suffix=":new")
        columns = [pl.col("seq")]
        if parent:
            columns.append(pl.coalesce("parent", "parent:new").alias("parent"))
        if written:
            columns.append(pl.max_horizontal(WRITTEN, f"{WRITTEN}:new").alias(WRITTEN))
        columns += [pl.coalesce(f"{k}:new", k).alias(k) for k in keys]
        merged = merged.select(columns).sort("seq")
        if rows:
            merged = merged.filter(pl.any_horizontal(pl.col(k).is_not_null() for k in rows))
        for key, record in self.view.latest(number).items():
            if key not in latest or record[1:] > latest[key][1:]:
                latest[key] = record
        return merged, latest


def empty_nodes(keys: dict[str, str], parent: bool = False, written: bool = False) -> pl.DataFrame:
    """A node frame with no rows.

    >>> empty_nodes({"loss": "float"}).schema
    Schema([('name', String), ('nonce', String), ('seq', Int64), ('loss', Float64)])
    """
    schema = {"name": pl.String, "nonce": pl.String, "seq": pl.Int64}
    if parent:
        schema["parent"] = pl.String
    if written:
        schema[WRITTEN] = pl.Int64
    schema.update({k: DTYPES[t] for k, t in keys.items()})
    return pl.DataFrame(schema=schema)


def read_scope(index: Index, name: str | None, nonce: str | None, read: Callable[[Scope], T]) -> T:
    """``read(Scope(index, name, nonce))``, listed and read again when a compaction retires a segment
    mid-read, and answered from the log when the view turns out damaged (it is then ignored).

    >>> import tempfile
    >>> from theseus.store import Node, Store
    >>> store, node = Store(tempfile.mkdtemp()), Node.start("doc-scope")
    >>> with store.writer() as w:
    ...     w.write(node, {"loss": 1.0})
    >>> read_scope(Index(store.fs, store.path()), "*", "*", lambda scope: sorted(scope.types()))
    ['loss']
    """

    def run() -> T:
        scope = Scope(index, name, nonce)
        try:
            return read(scope)
        except CorruptView as e:  # a view that fails its checksums
            index.ignore_view(e.path, e)
        except pl.exceptions.PanicException as e:  # Polars' scan of a view panics on some damaged pages
            if scope.view is None:
                raise
            for path in scope.view.paths:  # which file panicked is unknown: the log answers for all
                index.ignore_view(path, e)
        except (pl.exceptions.PolarsError, OSError, pa.ArrowException) as e:
            if scope.view is None or vanished(e):
                raise
            for path in scope.view.paths:  # log reads raise CorruptSegment: a view is bad
                index.ignore_view(path, e)
        return run()  # answered from the log now that the view is ignored

    return retry_vanished(run)
