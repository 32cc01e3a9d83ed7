"""The live views of a root, read as one: each run from the newest view file that holds it.

Compaction adds a view file holding only the runs that changed since the views before it
(``view_build.refresh_view``), and merges the newest files into one when they grow to a
fair share of the older ones, as a log-structured merge does: so a compaction costs what
changed, and a reader parses a few footers. :class:`Views` numbers the runs of every live
file (each run once, from the newest file that holds it, runs sorted by name and nonce) and
answers for them what a single view answers (``theseus.store.view_file.View``): which segments
a run's fold covers, its key types, latest records and summary, and its rows.

A file's copy of a run is used only where it folded exactly the run's current segments
(``covers``), so a stale copy (a file older than the run's last compaction, or one a racing
compaction published late) costs a fold from the log, never a wrong answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from theseus.errors import BadInput
from theseus.store.summary import Summary
from theseus.store.view_file import RootFolder, View, scan_view, stored_columns, view_columns


@dataclass(frozen=True)
class Views:
    """The live view files (oldest first) and the runs they hold, numbered once each.

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> _ = store.compact()
    >>> views = store._index.view()
    >>> list(views.runs) == [(n.name, n.nonce)], views.summary(0).nodes
    (True, 1)
    """

    files: tuple[View, ...]
    entries: list[tuple[int, int]]  # run number -> (file, the run's number in that file)
    runs: dict[tuple[str, str], int]  # (name, nonce) -> run number
    names: list[tuple[str, str]] = field(repr=False)  # run number -> (name, nonce)
    segments: list[list[str]] = field(repr=False)  # run number -> the segment file names folded
    listing: dict | None = field(default=None, compare=False, repr=False)  # as View.listing, per run number

    @classmethod
    def of(cls, files: list[View]) -> Views:
        """The composite of ``files`` (oldest first): each run from the newest file holding it."""
        view = files[-1]
        if len(files) == 1 and all(a < b for a, b in zip(view.names, view.names[1:])):
            # the common case after a full merge: the file's own numbering (its runs are written sorted)
            return cls((view,), [(0, i) for i in range(len(view.names))], view.runs, view.names, view.segments,
                       view.listing)
        newest: dict[tuple[str, str], tuple[int, int]] = {}
        for f, view in enumerate(files):
            for run, local in view.runs.items():
                newest[run] = (f, local)
        names = sorted(newest)
        entries = [newest[run] for run in names]
        segments = [files[f].segments[local] for f, local in entries]
        last = files[-1].listing
        listing = None
        if last is not None:
            runs = [files[f].listing["runs"][local] if files[f].listing else None for f, local in entries]
            listing = {"log": last["log"], "names": last["names"], "runs": runs}
        return cls(tuple(files), entries, {run: i for i, run in enumerate(names)}, names, segments, listing)

    @property
    def paths(self) -> list[str]:
        """The files' paths, oldest first."""
        return [v.path for v in self.files]

    def file(self, number: int) -> View:
        """The view file run ``number`` is read from."""
        return self.files[self.entries[number][0]]

    def covers(self, run: tuple[str, str], paths: list[str]) -> bool:
        """True when ``paths`` (sorted) are exactly the segments folded for ``run``."""
        number = self.runs.get(run)
        return number is not None and self.file(number).covers(run, paths)

    def stamp(self, number: int) -> int:
        """The highest write stamp folded for run ``number``."""
        f, local = self.entries[number]
        return self.files[f].stamps[local]

    def keys(self, number: int) -> dict[str, str]:
        """The keys and types run ``number`` logged."""
        f, local = self.entries[number]
        return self.files[f].keys(local)

    def signature(self, number: int) -> tuple[int, int]:
        """(file, key-set number in that file) of run ``number``: runs that share it share
        :meth:`keys` and :meth:`stored`, so a check of those is made once per signature."""
        f, local = self.entries[number]
        return f, self.files[f].run_keys[local]

    def stored(self, number: int) -> dict[str, str]:
        """The column types of the file run ``number`` is read from (its keys may be widened there)."""
        return self.file(number).types

    def latest(self, number: int) -> dict[str, tuple]:
        """``{key: (value, stamp, writer)}`` of run ``number``'s latest records (``view_file.LATEST_KEYS``)."""
        f, local = self.entries[number]
        return self.files[f].latest(local)

    def summary(self, number: int) -> Summary | None:
        """Run ``number``'s summary (None when its file predates summaries)."""
        f, local = self.entries[number]
        return self.files[f].summary(local)

    def nodes(self, number: int) -> int:
        """Run ``number``'s node count (0 when its file keeps no summaries)."""
        f, local = self.entries[number]
        return self.files[f].nodes(local)

    def scan(self, root: RootFolder, numbers: list[int], keys: dict[str, str], parent: bool,
             written: bool) -> tuple[pl.LazyFrame, bool]:
        """The node frame (name, nonce, seq, [parent], [_written], ``keys``) of runs ``numbers``,
        and whether it is in (name, nonce, seq) order (it is when one file holds them all)."""
        by_file: dict[int, list[int]] = {}
        for number in numbers:
            f, local = self.entries[number]
            by_file.setdefault(f, []).append(local)
        parts = []
        for f, locals_ in sorted(by_file.items()):
            view = self.files[f]
            frame = scan_view(root, view, locals_, stored_columns(view, keys, parent, written))
            parts.append(frame.select(view_columns(view, keys, parent, written)))
        if not parts:
            raise BadInput("no runs to scan")
        return (parts[0], True) if len(parts) == 1 else (pl.concat(parts), False)
