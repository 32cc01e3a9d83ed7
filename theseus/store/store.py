"""Store: one root folder (local or gs://) holding the log, objects and data."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import polars as pl

from theseus.store import fs as rootfs
from theseus.store import layout
from theseus.store.compact import compact
from theseus.store.cursor import Cursor, EmptyResult
from theseus.store.index import Index
from theseus.store.listing import retry_vanished
from theseus.store.node import Node, check_nonce, decode_id, normalize_name
from theseus.store.nonces import AmbiguousNonce, ambiguous
from theseus.store.reader import latest_value, scan
from theseus.store.scope import read_scope
from theseus.store.status import with_status
from theseus.store.summary import readable, summarize_each, summarize_runs, summary_frame
from theseus.store.view_build import refresh_view
from theseus.store.writer import Writer


class Store:
    """An event-sourced store rooted at a local path or an fsspec URL.

    >>> import tempfile
    >>> store = Store(tempfile.mkdtemp())
    >>> node = Node.start("doc-run")
    >>> with store.writer() as w:
    ...     w.write(node, {"train/loss": 1.5})
    >>> store.find().nonce(node.nonce).first() == node
    True
    """

    def __init__(self, root: str | os.PathLike):
        self.fs, self._root = rootfs.open_root(root)
        self._index = Index(self.fs, self._root)  # footers, listings and views read so far, shared by every query

    @property
    def root(self) -> str:
        """The root as a path or URL (``gs://bucket/prefix``)."""
        return rootfs.url(self.fs, self._root)

    def __repr__(self) -> str:
        return f"Store({self.root!r})"

    def path(self, *parts: str) -> str:
        """A filesystem path under the root (without protocol), for ``store.fs``."""
        return self._index.path(*parts)

    def url(self, *parts: str) -> str:
        """Like :meth:`path` but with the protocol, for other libraries."""
        return rootfs.url(self.fs, self.path(*parts))

    def objects(self, node: Node | str) -> str:
        """The artifact folder of a node: ``<root>/objects/<node-id>``."""
        node_id = node.id if isinstance(node, Node) else (decode_id(node) and node)
        return self.url(layout.OBJECTS, node_id)

    def writer(self, flush_interval: float = 1.0) -> Writer:
        """A buffered writer; use it as a context manager."""
        return Writer(self._index, flush_interval=flush_interval)

    def find(self) -> Cursor:
        """An empty query over every node of the root."""
        return Cursor(self._index)

    def keys(self) -> dict[str, str]:
        """Every key logged in the root with its read type (reads footers only)."""
        self._index.require_root()
        return read_scope(self._index, "*", "*", lambda scope: scope.types())

    def record(self, node: Node | str) -> dict[str, Any]:
        """The folded node, reserved fields (``_job``, ``_config``, ``_status``...) included."""
        node_id = node.id if isinstance(node, Node) else node
        name, nonce, seq = decode_id(node_id)
        self._index.require_root()

        rows = read_scope(self._index, name, nonce, lambda scope: scope.nodes(scope.types(), parent=True)[0]
                          .filter(pl.col("seq") == seq).collect())
        if rows.height == 0:
            raise EmptyResult(f"no records for node {node_id}")
        row = rows.row(0, named=True)
        return {"node": node_id, **{k: v for k, v in row.items() if v is not None or k == "parent"}}

    def run_record(self, nonce: str, name: str | None = None) -> dict[str, Any]:
        """The fold of a whole lineage's reserved fields (job, config, status, error, finished).

        A nonce that several runs share (a collision: ``theseus audit`` reports it) is an
        ``AmbiguousNonce`` naming them; ``name`` picks one.

        >>> store, n = _doc_store()
        >>> with store.writer() as w:
        ...     w.job(n, "doc/job", "lr: 0.1\\n")
        >>> store.run_record(n.nonce)["_job"], store.run_record(n.nonce, name=n.name)["name"] == n.name
        ('doc/job', True)
        """
        check_nonce(nonce)
        name = None if name is None else normalize_name(name)
        self._index.require_root()
        return retry_vanished(lambda: self._read_run_record(nonce, name))

    def _read_run_record(self, nonce: str, name: str | None) -> dict[str, Any]:
        runs = self._index.runs(name or "*", nonce)
        if len(runs) > 1:  # several names under one nonce
            raise AmbiguousNonce(ambiguous(nonce, sorted(run_name for run_name, _ in runs)))
        paths = [path for found in runs.values() for path in found]
        if not paths:
            which = f"no run {name} with nonce {nonce!r}" if name else f"no run with nonce {nonce!r}"
            raise EmptyResult(f"{which} in {self.root}")
        log = scan(self.fs, paths).filter(pl.col("key").str.starts_with("_"))
        types = {k: t for k, t in self._index.footers.keys(paths).items() if k.startswith("_")}
        aggs = [pl.col("name").first()]
        aggs += [latest_value(key, kind) for key, kind in types.items()]
        row = log.group_by("nonce").agg(aggs).collect()
        return row.row(0, named=True) if row.height else {"nonce": nonce}

    def runs(self) -> pl.DataFrame:
        """One row per run: name, nonce, nodes, last seq, last write, status, finished, job, latest metrics,
        and ``status``: running, finished, failed or stale by the one rule of ``theseus.store.status``.

        Costs a few operations per run, not per record (``theseus.store.summary``); listed and
        read again when a concurrent compaction retires a segment mid-read. A run holding a segment
        that cannot be read (truncated, a FIFO...) is left out with an ``UnreadableRun`` warning
        naming the file: one bad file costs its own run, not the table.
        """
        self._index.require_root()
        return with_status(retry_vanished(self._read_runs))

    def _read_runs(self) -> pl.DataFrame:
        index = self._index
        runs = index.recorded_runs(index.view())  # a compacted root: one stat per folder instead of listings
        if runs is None:
            runs = index.runs()
        found, bad = self.summaries(runs)
        return summary_frame(list(readable(found, bad).items()))

    def summaries(self, runs: dict[tuple[str, str], list[str]]) -> tuple[dict, dict]:
        """``({run: Summary}, {run: CorruptSegment})`` of ``runs`` (``{(name, nonce): sorted segment paths}``,
        as listed): what :meth:`runs` reads per run (the view's summary entry where it folded exactly those
        segments, else the segments' footers), with no block read where those answer. A run holding a
        segment that cannot be read is in the second dict, with the error naming the file.

        >>> store, n = _doc_store()
        >>> found, bad = store.summaries(store._index.runs())
        >>> [s.nodes for s in found.values()], bad
        ([1], {})
        """
        index = self._index
        view = index.view()
        found, missing = {}, {}
        for run, paths in runs.items():
            number = view.runs.get(run) if view is not None else None
            summary = view.summary(number) if number is not None and view.covers(run, paths) else None
            # segments are immutable: the same list has the same summary
            summary = summary or index.summaries.get(tuple(paths))
            if summary is None:
                missing[run] = paths
            found[run] = summary
        bad: dict = {}  # runs holding a segment that cannot be read: each costs its own run
        if missing and rootfs.is_local(self.fs):  # footer entries, then one scan of the blocks that can hold the latest
            for run, summary in summarize_runs(index, missing, bad).items():
                found[run] = index.summaries[tuple(missing[run])] = summary
        elif missing:  # footers in one parallel pass, then the runs' few blocks in parallel too
            for run, summary in summarize_each(index, missing, bad).items():
                found[run] = index.summaries[tuple(missing[run])] = summary
        return {run: summary for run, summary in found.items() if run not in bad}, bad

    def compact(self, name: str = "*", nonce: str = "*") -> dict[str, int]:
        """Merge each run's small segments into one (crash-safe), then refresh the view.

        Returns ``{"name/nonce": segments merged}``. The view (``theseus.store.view_file``) is
        rebuilt from the whole log unless the newest one already covers it exactly (and,
        where folder ctimes prove listings, records them).
        """
        self._index.require_root()
        merged = compact(self._index, name, nonce)
        retry_vanished(lambda: refresh_view(self._index))  # a concurrent compaction may retire segments it folds
        return merged

def _doc_store() -> tuple[Store, Node]:
    """A new temporary store holding one node with ``loss`` 1.5 (for docstring examples).

    >>> store, n = _doc_store()
    >>> store.record(n)["loss"]
    1.5
    """

    store, node = Store(tempfile.mkdtemp()), Node.start("doc")
    with store.writer() as w:
        w.write(node, {"loss": 1.5})
    return store, node
