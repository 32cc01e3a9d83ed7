"""Store: one root folder (local or gs://) holding the log, objects and data."""

from __future__ import annotations

import os
from typing import Any

import polars as pl
from loguru import logger

from theseus.store import fs as rootfs
from theseus.store import layout, schema
from theseus.store.compact import compact
from theseus.store.cursor import Cursor, EmptyResult
from theseus.store.fold import WRITTEN
from theseus.store.node import Node, check_nonce, decode_id
from theseus.store.reader import latest_value, scan
from theseus.store.scope import Scope
from theseus.store.segments import (CorruptSegment, FooterCache, Listings, RecordedListings, list_runs, list_segments,
                                     recorded_runs, retry_vanished)
from theseus.store.view import View, build_view, list_views, read_view
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
        self._footers = FooterCache(self.fs)
        self._views: dict[str, View] = {}  # parsed view footers by path (views are immutable)
        self._bad_views: set[str] = set()  # views that cannot be read: ignored, and replaced by the next compaction
        self._listings = Listings(self._root if rootfs.is_local(self.fs) else None)  # folder listings its ctime proves
        self._exists = False  # the root was seen to exist (reads of a missing root raise; writes create it)

    @property
    def root(self) -> str:
        """The root as a path or URL (``gs://bucket/prefix``)."""
        return rootfs.url(self.fs, self._root)

    def __repr__(self) -> str:
        return f"Store({self.root!r})"

    def path(self, *parts: str) -> str:
        """A filesystem path under the root (without protocol), for ``store.fs``."""
        return "/".join([self._root, *parts]) if parts else self._root

    def url(self, *parts: str) -> str:
        """Like :meth:`path` but with the protocol, for other libraries."""
        return rootfs.url(self.fs, self.path(*parts))

    def objects(self, node: Node | str) -> str:
        """The artifact folder of a node: ``<root>/objects/<node-id>``."""
        node_id = node.id if isinstance(node, Node) else (decode_id(node) and node)
        return self.url(layout.OBJECTS, node_id)

    def writer(self, flush_interval: float = 1.0) -> Writer:
        """A buffered writer; use it as a context manager."""
        return Writer(self, flush_interval=flush_interval)

    def find(self) -> Cursor:
        """An empty query over every node of the root."""
        return Cursor(self)

    def keys(self) -> dict[str, str]:
        """Every key logged in the root with its read type (reads footers only)."""
        return retry_vanished(lambda: Scope(self).types())

    def record(self, node: Node | str) -> dict[str, Any]:
        """The folded node, reserved fields (``_job``, ``_config``, ``_status``...) included."""
        node_id = node.id if isinstance(node, Node) else node
        name, nonce, seq = decode_id(node_id)
        self._require_root()

        def read() -> pl.DataFrame:
            scope = Scope(self, name, nonce)
            return scope.nodes(scope.types(), parent=True)[0].filter(pl.col("seq") == seq).collect()

        rows = retry_vanished(read)
        if rows.height == 0:
            raise EmptyResult(f"no records for node {node_id}")
        row = rows.row(0, named=True)
        return {"node": node_id, **{k: v for k, v in row.items() if v is not None or k == "parent"}}

    def run_record(self, nonce: str) -> dict[str, Any]:
        """The fold of a whole lineage's reserved fields (job, config, status, error, finished)."""
        check_nonce(nonce)
        self._require_root()
        return retry_vanished(lambda: self._read_run_record(nonce))

    def _read_run_record(self, nonce: str) -> dict[str, Any]:
        paths = self._segments("*", nonce)
        if not paths:
            raise EmptyResult(f"no run with nonce {nonce!r} in {self.root}")
        log = scan(self.fs, paths).filter(pl.col("key").str.starts_with("_"))
        types = {k: t for k, t in self._footers.keys(paths).items() if k.startswith("_")}
        aggs = [pl.col("name").first()]
        aggs += [latest_value(key, kind) for key, kind in types.items()]
        row = log.group_by("nonce").agg(aggs).collect()
        return row.row(0, named=True) if row.height else {"nonce": nonce}

    def runs(self) -> pl.DataFrame:
        """One row per run: name, nonce, nodes, last write, status, finished, latest metrics.

        Listed and read again when a concurrent compaction retires a segment mid-read.
        """
        self._require_root()
        return retry_vanished(self._read_runs)

    def _read_runs(self) -> pl.DataFrame:
        paths = self._segments()
        types = self._footers.keys(paths)
        log = scan(self.fs, paths)
        metrics = [k for k in ("train/loss", "val/loss", "train/tokens") if k in types]
        aggs = [
            pl.col("node").n_unique().alias("nodes"),
            pl.col("seq").max().alias("last seq"),
            pl.col("stamp").max().alias(WRITTEN),
        ]
        aggs += [latest_value(key, types[key]) for key in [schema.STATUS, schema.FINISHED, schema.JOB, *metrics] if key in types]
        return log.group_by("name", "nonce").agg(aggs).sort(WRITTEN).collect()

    def compact(self, name: str = "*", nonce: str = "*") -> dict[str, int]:
        """Merge each run's small segments into one (crash-safe), then refresh the view.

        Returns ``{"name/nonce": segments merged}``. The view (``theseus.store.view``) is
        rebuilt from the whole log unless the newest one already covers it exactly (and,
        where folder ctimes prove listings, records them: views from before did not).
        """
        self._require_root()
        merged = compact(self, name, nonce)
        retry_vanished(self._refresh_view)  # a concurrent compaction may retire segments it folds
        return merged

    def _refresh_view(self) -> None:
        view = self._view()
        runs = self._runs()
        if (view is None or len(view.runs) != len(runs) or not all(view.covers(run, paths) for run, paths in runs.items())
                or (view.listing is None and self._listings.enabled)):
            build_view(self)

    def _require_root(self) -> None:
        """Raise FileNotFoundError naming the root when it does not exist (checked until it does)."""
        if not self._exists:
            rootfs.require_root(self.fs, self._root)
            self._exists = True

    def _segments(self, name: str = "*", nonce: str = "*") -> list[str]:
        return list_segments(self.fs, self._root, name, nonce, self._listings)

    def _runs(self, name: str = "*", nonce: str = "*") -> dict[tuple[str, str], list[str]]:
        return list_runs(self.fs, self._root, name, nonce, self._listings)

    def _recorded_runs(self, view: View | None, name: str = "*", nonce: str = "*") -> dict[tuple[str, str], list[str]] | None:
        """:meth:`_runs`, answered from the view's record of the log folders when their ctimes prove it (None: list)."""
        if view is None:
            return None
        return recorded_runs(self._listings, self._root, view.listing, view.names, view.segments, name, nonce)

    def _view(self) -> View | None:
        """The newest published view, parsed (None when there is none)."""
        views = list_views(self)
        if not views:
            return None
        path = views[-1]
        if path in self._bad_views:
            return None
        if path not in self._views:
            try:
                view = read_view(self, path)
            except CorruptSegment as e:
                self._ignore_view(path, e)
                return None
            self._views = {path: view}  # older views are retired: forget them
            if view.listing is not None:  # the folders it saw, for listings their ctime proves unchanged
                self._listings.seed = RecordedListings(self._root, view.listing, view.runs, view.segments)
        return self._views[path]

    def _ignore_view(self, path: str, error: Exception) -> None:
        """Stop reading the view ``path`` (it cannot be read): queries fold the log, which holds
        every record the view does, and the next compaction replaces it."""
        if path not in self._bad_views:
            self._bad_views.add(path)
            self._views.pop(path, None)
            text = str(error).splitlines()[0] if str(error) else type(error).__name__
            where = "" if path in text else f"{self.url(path[len(self._root) + 1:])}: "  # a CorruptSegment names it
            logger.warning(f"ignoring an unreadable view: {where}{text}; queries read the log instead, "
                           "and `theseus compact` replaces the view")


def _doc_store() -> tuple[Store, Node]:
    """A new temporary store holding one node with ``loss`` 1.5 (for docstring examples).

    >>> store, n = _doc_store()
    >>> store.record(n)["loss"]
    1.5
    """
    import tempfile

    store, node = Store(tempfile.mkdtemp()), Node.start("doc")
    with store.writer() as w:
        w.write(node, {"loss": 1.5})
    return store, node
