"""The view: a derived, rebuildable, folded copy of the log, one row per node.

``<root>/view/v-<stamp>-<writer>.parquet`` holds every node of the runs it covers
(name, nonce, seq, parent, ``_written``, ``_run`` and one column per key, user and
reserved), sorted by name, nonce and seq, so that a query over many runs reads
one file with predicate and projection pushdown instead of a file per run, and
a query of one run reads the row group of its ``_run`` number.

Its footer (``theseus.view``) records exactly what it folded: per run the names
of the log segments it covers, their highest write stamp, the run's key types
and its latest ``_job`` and ``_finished`` records. A second entry
(``theseus.view.summary``, version 4) holds each run's summary (node count, last
seq and write, latest status and main metrics): only ``Store.runs()`` reads it, so
a query does not parse it. The last write is kept as ``run_written``, a person's marks left
out (``theseus.store.summary.run_written``); a view made before kept ``written``, marks
included, and its runs are summarised from the log instead. Each entry carries its own
SHA-256. Readers use the newest view for the runs whose segments are exactly the covered
ones; a run with newer segments as well folds those on top (``Scope``), and any other run folds
from the log.

The log stays the only source of truth: a view is written by ``compact()`` from
the log alone, published atomically under a unique name (never rewritten), and
older views are deleted only after a newer one is published (readers that lose
the race re-list and retry). Deleting every view loses nothing. Its pages carry
CRCs (checked by the readers' row-group reads and by ``theseus audit``, which also
compares each view with the log's fold: ``view_build.check_view``). A view audit finds damaged
or disagreeing with the log gets a marker, ``<view>.rejected`` (:func:`reject_view`):
readers skip a marked view and the next ``compact()`` replaces it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import fsspec
import numpy as np
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from loguru import logger

from theseus.errors import BadInput
from theseus.store import fs as rootfs
from theseus.store import schema
from theseus.store.fold import ARROW, DTYPES, WRITTEN, node_ids, with_identity
from theseus.store.footers import read_tail_metadata
from theseus.store.layout import VIEW
from theseus.store.segments import CorruptSegment
from theseus.store.summary import MARKS, SUMMARY_KEYS, Summary


class RootFolder(Protocol):
    """What the view files need of a root (a Store or its Index): its filesystem and its paths."""

    fs: fsspec.AbstractFileSystem

    def path(self, *parts: str) -> str: ...

VIEW_METADATA = b"theseus.view"
REJECTED = ".rejected"  # suffix of the marker beside a view audit found wrong: readers skip that view
VIEW_DIGEST = b"theseus.view.sha256"  # of the VIEW_METADATA text: page CRCs do not cover the footer
VIEW_SUMMARY = b"theseus.view.summary"  # the runs' summaries (version 4): parsed by runs() alone
VIEW_SUMMARY_DIGEST = b"theseus.view.summary.sha256"
VERSION = 4
RUN = "_run"
ROW_GROUP = 16384
VIEW_TAIL = 1 << 20  # bytes of a remote view read at once from its end: the footer of some thousands of runs
FEW_RUNS = 8  # up to this many runs are read by row group with the cached footer
RUN_KEYS = (schema.JOB, schema.FINISHED, schema.TAGS)  # what run filters (job(), finished(), tag()) read
LATEST_KEYS = tuple(dict.fromkeys([*RUN_KEYS, *SUMMARY_KEYS]))  # each run's latest records the view keeps
SUMMARY_LATEST = tuple(k for k in SUMMARY_KEYS if k not in RUN_KEYS)  # kept in the summary entry
SUMMARY = ("nodes", "last_seq", "run_written")  # per run in the summary entry (in the main record in version 3)
# absent from a view made before them, never malformed: marks, and the last write with marks left out
OPTIONAL_SUMMARY = (*MARKS, SUMMARY[2])


@dataclass(frozen=True)
class View:
    """A parsed view footer: where each covered run is and what it was folded from."""

    path: str
    types: dict[str, str]
    runs: dict[tuple[str, str], int]  # (name, nonce) -> run number (the _run column)
    names: list[tuple[str, str]]  # run number -> (name, nonce)
    starts: list[int]  # run i is rows starts[i]:starts[i + 1]
    segments: list[list[str]]  # per run: the covered segment file names
    stamps: list[int]  # per run: the highest write stamp folded
    signatures: list[dict[str, str]]  # distinct {key: type} of runs
    run_keys: list[int]  # per run: its signature
    latest_records: dict[str, list]  # per run key (RUN_KEYS): per run [value, stamp, writer] or None
    summary_text: bytes | dict | None = field(default=None, compare=False, repr=False)  # the summary entry
    listing: dict | None = field(default=None, compare=False, repr=False)  # listing.record_listings at build time
    meta: pq.FileMetaData | None = field(default=None, compare=False, repr=False)
    file: pq.ParquetFile | None = field(default=None, compare=False, repr=False)  # local views only

    def keys(self, number: int) -> dict[str, str]:
        """The keys and types run ``number`` logged."""
        return self.signatures[self.run_keys[number]]

    def covers(self, run: tuple[str, str], paths: list[str]) -> bool:
        """True when ``paths`` (sorted) are exactly the segments the view folded for ``run``."""
        number = self.runs.get(run)
        if number is None:
            return False
        covered = self.segments[number]
        return len(paths) == len(covered) and all(p.endswith(f"/{c}") for p, c in zip(paths, covered))

    def latest(self, number: int) -> dict[str, tuple]:
        """``{key: (value, stamp, writer)}`` of run ``number``'s latest records of RUN_KEYS."""
        return {k: tuple(v[number]) for k, v in self.latest_records.items() if v[number] is not None}

    def summary(self, number: int) -> Summary | None:
        """Run ``number``'s summary (None for a view written before views kept them, or whose
        summary entry is damaged: the log answers then, and ``theseus audit`` names the view)."""
        summaries = self._summaries
        if not isinstance(summaries, dict):
            return None
        columns = {**{k: summaries[k] for k in SUMMARY_LATEST if k in summaries}, **self.latest_records}
        # a view made before run_written kept a last write that counts marks: the log answers
        if any(k not in columns and k not in MARKS for k in SUMMARY_KEYS) or SUMMARY[2] not in summaries:
            return None
        nodes, last, written = (summaries[k][number] for k in SUMMARY)
        # a view made before marks existed folded none: it holds no column of them
        latest = {k: tuple(columns[k][number]) for k in SUMMARY_KEYS
                  if k in columns and columns[k][number] is not None}

        return Summary(nodes, last, written, latest, self.keys(number))

    def nodes(self, number: int) -> int:
        """Run ``number``'s node count (0 when the view keeps no summaries, or a damaged entry)."""
        summaries = self._summaries
        return summaries["nodes"][number] if isinstance(summaries, dict) else 0

    @property
    def summaries(self) -> dict[str, list] | None:
        """The summary entry (``{key: per-run values}`` for SUMMARY and SUMMARY_LATEST; None where
        the view keeps none); a damaged one is a ValueError."""
        summaries = self._summaries
        if isinstance(summaries, ValueError):
            raise summaries
        return summaries

    @cached_property
    def _summaries(self) -> dict[str, list] | ValueError | None:
        """The summary entry parsed on first use (a query never reads it), or what is wrong with it
        (logged once: readers fold the log for the summaries instead)."""
        text = self.summary_text
        if text is None or isinstance(text, dict):  # version 3 kept them in the main record
            return text
        try:
            digest = self.meta.metadata.get(VIEW_SUMMARY_DIGEST) if self.meta is not None else None
            if digest != hashlib.sha256(text).hexdigest().encode():
                raise BadInput(f"they do not match their {VIEW_SUMMARY_DIGEST.decode()} (a changed byte)")
            raw = _loads(text)
            # marks and run_written (a view made before them holds none) may be absent, never malformed
            if not (isinstance(raw, dict) and all(isinstance(raw.get(k), list) and len(raw[k]) == len(self.names)
                                                  for k in (*SUMMARY, *SUMMARY_LATEST)
                                                  if k in raw or k not in OPTIONAL_SUMMARY)):
                raise BadInput("they are malformed")
            return raw
        except ValueError as e:  # orjson's and json's decode errors are ValueErrors
            logger.warning(f"ignoring the run summaries of the view {self.path}: {e}; run summaries are read "
                           "from the log instead, and `theseus compact` replaces the view")
            return ValueError(f"its run summaries: {e}")


class CorruptView(CorruptSegment):
    """A view whose data fails its checksums; ``path`` names it, so readers can stop using it."""

    def __init__(self, message: str, path: str):
        super().__init__(message)
        self.path = path


def view_name(stamp: int, writer: str) -> str:
    """A unique view file name that sorts by creation time.

    >>> view_name(5, "ab12cd34")
    'v-0000000000000000005-ab12cd34.parquet'
    """
    return f"v-{stamp:019d}-{writer}.parquet"


def list_views(root: RootFolder) -> list[str]:
    """Published view paths, oldest first (temporaries never match, nor views marked rejected).

    >>> import tempfile
    >>> from theseus.store import Store
    >>> list_views(Store(tempfile.mkdtemp()))
    []
    """
    names = view_names(root)
    return [root.path(VIEW, n) for n in sorted(names) if is_view(n) and n + REJECTED not in names]


def reject_view(root: RootFolder, path: str, reason: str) -> None:
    """Mark the view ``path`` rejected (``reason`` is the marker's text): readers skip it from now on,
    and the next ``compact()`` replaces it and removes both.

    >>> import tempfile
    >>> from theseus.store import Node, Store
    >>> store = Store(tempfile.mkdtemp())
    >>> with store.writer() as w:
    ...     w.write(Node.start("doc-view"), {"loss": 1.0})
    >>> _ = store.compact()
    >>> [view] = list_views(store)
    >>> reject_view(store, view, "disagrees with the log")
    >>> list_views(store)
    []
    """
    rootfs.publish(root.fs, path + REJECTED, reason.encode())


def view_names(root: RootFolder) -> set[str]:
    folder = root.path(VIEW)
    try:
        if rootfs.is_local(root.fs):
            return set(os.listdir(folder))
        return {p.rsplit("/", 1)[-1] for p in root.fs.ls(folder, detail=False, refresh=True)}
    except FileNotFoundError:
        return set()


def is_view(name: str) -> bool:
    return name.startswith("v-") and name.endswith(".parquet")


def _loads(text: bytes) -> Any:
    """A view's footer record: orjson parses it several times faster than ``json``, which reads the
    ``NaN`` and ``Infinity`` a run's summary may hold (strict JSON, and orjson, refuse them)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def read_view(root: RootFolder, path: str) -> View:
    """Parse a view's footer; a broken view is an error naming it (it can be deleted and rebuilt)."""
    try:
        rootfs.check_regular(root.fs, path)  # a FIFO or device named like a view would block or never end
        if rootfs.is_local(root.fs):
            # kept open: queries read row groups through it
            file = pq.ParquetFile(path, page_checksum_verification=True)
            meta = file.metadata
        else:  # its footer in one request: the record of its runs grows with them
            file = None
            meta = read_tail_metadata(root.fs, path, VIEW_TAIL)
        metadata = meta.metadata  # a copy of every entry per access
        raw = _loads(metadata[VIEW_METADATA])
        runs = raw["runs"]
        names = list(zip(runs["name"], runs["nonce"]))
        listing = raw.get("listing")
        if listing is not None and not (isinstance(listing, dict) and "log" in listing
                                        and isinstance(listing.get("names"), dict)
                                        and isinstance(listing.get("runs"), list)
                                        and len(listing["runs"]) == len(names)):
            raise BadInput("its record of the log folders is malformed")
        columns = [("name", "str"), ("nonce", "str"), ("seq", "int"), ("parent", "str"), (WRITTEN, "int"),
                   *raw["types"].items()]
        stored = meta.schema.to_arrow_schema()
        if [(f.name, f.type) for f in stored] != [(c, ARROW[t]) for c, t in columns] + [(RUN, pa.int32())]:
            raise BadInput(f"its columns ({', '.join(stored.names)[:200]}) are not those its record describes")
        digest = metadata.get(VIEW_DIGEST)  # a version-1 view carries no digest
        if digest != hashlib.sha256(metadata[VIEW_METADATA]).hexdigest().encode() and (
                digest is not None or raw.get("version", 1) >= 2):
            raise BadInput(f"its record of what it folded does not match its {VIEW_DIGEST.decode()} (a changed byte)")
        return View(
            path=path,
            types=raw["types"],
            runs={run: i for i, run in enumerate(names)},
            names=names,
            starts=runs["start"],
            segments=runs["segments"],
            stamps=runs["stamp"],
            signatures=raw["signatures"],
            run_keys=runs["keys"],
            latest_records={k: runs[k] for k in RUN_KEYS if k in runs},
            summary_text=metadata.get(VIEW_SUMMARY) or (
                {k: runs[k] for k in (*SUMMARY, *SUMMARY_LATEST) if k in runs}
                if all(k in runs for k in (*SUMMARY, *SUMMARY_LATEST) if k not in OPTIONAL_SUMMARY) else None),
            listing=listing,
            meta=meta,
            file=file,
        )
    except FileNotFoundError:
        raise
    except Exception as e:
        raise CorruptSegment(corrupt_view_message(root, path, e)) from e


def corrupt_view_message(root: RootFolder, path: str, error: Exception) -> str:
    """What a reader says of a view it cannot use: which one, why, and that it can be rebuilt.

    >>> from theseus.store import Store
    >>> corrupt_view_message(Store("/tmp/r"), "/tmp/r/view/v.parquet", ValueError("bad page")).split(";")[0]
    'corrupt view /tmp/r/view/v.parquet (bad page)'
    """
    return (f"corrupt view {rootfs.url(root.fs, path)} ({error}); views are derived from the log: "
            "delete it and run `theseus compact` to rebuild one")


def scan_view(root: RootFolder, view: View, numbers: list[int] | None = None,
              columns: list[str] | None = None) -> pl.LazyFrame:
    """A lazy frame over the view's rows of runs ``numbers`` (None: all).

    A few runs (any number on an object store) are read by row group straight from the file
    with the cached footer (only ``columns``, when given); more go through a Polars scan
    (predicate and projection pushdown).
    """
    # an object store's view is read by row group too, whatever the runs: its footer is parsed
    # already, and a dataset scan would fetch it again (requests that grow with the runs read)
    if numbers is not None and (len(numbers) <= FEW_RUNS or not rootfs.is_local(root.fs)):
        starts = np.cumsum([0] + [view.meta.row_group(g).num_rows for g in range(view.meta.num_row_groups)])
        numbers = sorted(numbers)
        spans = [(view.starts[i], view.starts[i + 1]) for i in numbers]
        if columns is not None:  # name and nonce are the same on every row of a run: not read
            columns = [c for c in columns if c not in ("name", "nonce")]
        groups = sorted({g for lo, hi in spans for g in range(np.searchsorted(starts, lo, "right") - 1,
                                                              np.searchsorted(starts, hi - 1, "right"))})
        try:
            if view.file is not None:
                table = view.file.read_row_groups(groups, columns, use_threads=False)
            else:
                with root.fs.open(view.path, "rb") as f:
                    file = pq.ParquetFile(f, metadata=view.meta, page_checksum_verification=True)
                    table = file.read_row_groups(groups, columns, use_threads=False)
        except FileNotFoundError:
            raise
        except Exception as e:  # a page that fails its CRC: the view is derived, readers fold from the log
            raise CorruptView(corrupt_view_message(root, view.path, e), view.path) from e
        base = dict(zip(groups, np.cumsum([0] + [starts[g + 1] - starts[g] for g in groups]).tolist()))
        parts = []
        for number, (lo, hi) in zip(numbers, spans):
            group = int(np.searchsorted(starts, lo, "right")) - 1
            rows = pl.from_arrow(table.slice(base[group] + lo - starts[group], hi - lo))
            parts.append(with_identity(rows, *view.names[number]))
        return pl.concat(parts).lazy()
    if rootfs.is_local(root.fs):
        frame = pl.scan_parquet(view.path)
    else:
        import pyarrow.dataset as ds  # here: it loads pandas, which only a remote root's view needs

        frame = pl.scan_pyarrow_dataset(ds.dataset(view.path, filesystem=root.fs, format="parquet"))
    if numbers is not None and len(numbers) < len(view.runs):
        frame = frame.filter(pl.col(RUN).is_in(numbers))
    return frame


def stored_columns(view: View, keys: dict[str, str], parent: bool, written: bool) -> list[str]:
    """The view columns that :func:`view_columns` reads."""
    extra = ["parent"] * parent + [WRITTEN] * written
    return ["name", "nonce", "seq", *extra, *[k for k in keys if k in view.types]]


def view_columns(view: View, keys: dict[str, str], parent: bool, written: bool) -> list[pl.Expr]:
    """Expressions selecting the node frame's columns from a view (absent keys are nulls)."""
    exprs = [pl.col("name"), pl.col("nonce"), pl.col("seq")]
    if parent:
        usual = pl.when(pl.col("seq") > 0).then(node_ids(pl.col("name"), pl.col("nonce"), pl.col("seq") - 1))
        stored = pl.col("parent")
        exprs.append(pl.when(stored.is_null()).then(usual).when(stored != "").then(stored).alias("parent"))
    if written:
        exprs.append(pl.col(WRITTEN))
    for key, kind in keys.items():
        if key not in view.types:
            exprs.append(pl.lit(None, DTYPES[kind]).alias(key))
        elif view.types[key] != kind:
            exprs.append(pl.col(key).cast(DTYPES[kind]).alias(key))
        else:
            exprs.append(pl.col(key))
    return exprs
