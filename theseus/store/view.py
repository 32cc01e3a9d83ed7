"""The view: a derived, rebuildable, folded copy of the log, one row per node.

``<root>/view/v-<stamp>-<writer>.parquet`` holds every node of the runs it covers
(name, nonce, seq, parent, ``_written``, ``_run`` and one column per key, user and
reserved), sorted by name, nonce and seq, so that a query over many runs reads
one file with predicate and projection pushdown instead of a file per run, and
a query of one run reads the row group of its ``_run`` number.

Its footer (``theseus.view``) records exactly what it folded: per run the names
of the log segments it covers, their highest write stamp, the run's key types
and its latest ``_job`` and ``_finished`` records. Readers use the newest view for
the runs whose segments are exactly the covered ones; a run with newer segments
as well folds those on top (``Scope``), and any other run folds from the log.

The log stays the only source of truth: a view is written by ``compact()`` from
the log alone, published atomically under a unique name (never rewritten), and
older views are deleted only after a newer one is published (readers that lose
the race re-list and retry). Deleting every view loses nothing. Its pages carry
CRCs (checked by the readers' row-group reads and by ``theseus audit``, which also
compares each view with the log's fold: :func:`check_view`). A view audit finds damaged
or disagreeing with the log gets a marker, ``<view>.rejected`` (:func:`reject_view`):
readers skip a marked view and the next ``compact()`` replaces it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from theseus.store import fs as rootfs
from theseus.store import schema
from theseus.store.fold import ARROW, DTYPES, WRITTEN, fold_run, node_ids, with_identity
from theseus.store.layout import VIEW
from theseus.store.segments import CorruptSegment, record_listings, union_keys

if TYPE_CHECKING:
    from theseus.store.store import Store

VIEW_METADATA = b"theseus.view"
REJECTED = ".rejected"  # suffix of the marker beside a view audit found wrong: readers skip that view
VIEW_DIGEST = b"theseus.view.sha256"  # of the VIEW_METADATA text: page CRCs do not cover the footer
RUN = "_run"
ROW_GROUP = 16384
FEW_RUNS = 8  # up to this many runs are read by row group with the cached footer
RUN_KEYS = (schema.JOB, schema.FINISHED)


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
    latest_records: dict[str, list]  # per run key (_job, _finished): per run [value, stamp, writer] or None
    listing: dict | None = field(default=None, compare=False, repr=False)  # segments.record_listings at build time
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
        """``{"_job"/"_finished": (value, stamp, writer)}`` of run ``number``'s latest such records."""
        return {k: tuple(v[number]) for k, v in self.latest_records.items() if v[number] is not None}


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


def list_views(store: Store) -> list[str]:
    """Published view paths, oldest first (temporaries never match, nor views marked rejected).

    >>> import tempfile
    >>> from theseus.store import Store
    >>> list_views(Store(tempfile.mkdtemp()))
    []
    """
    names = _view_names(store)
    return [store.path(VIEW, n) for n in sorted(names) if _is_view(n) and n + REJECTED not in names]


def reject_view(store: Store, path: str, reason: str) -> None:
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
    rootfs.publish(store.fs, path + REJECTED, reason.encode())


def _view_names(store: Store) -> set[str]:
    folder = store.path(VIEW)
    try:
        if rootfs.is_local(store.fs):
            return set(os.listdir(folder))
        return {p.rsplit("/", 1)[-1] for p in store.fs.ls(folder, detail=False, refresh=True)}
    except FileNotFoundError:
        return set()


def _is_view(name: str) -> bool:
    return name.startswith("v-") and name.endswith(".parquet")


def read_view(store: Store, path: str) -> View:
    """Parse a view's footer; a broken view is an error naming it (it can be deleted and rebuilt)."""
    try:
        rootfs.check_regular(store.fs, path)  # a FIFO or device named like a view would block or never end
        if rootfs.is_local(store.fs):
            file = pq.ParquetFile(path, page_checksum_verification=True)  # kept open: queries read row groups through it
            meta = file.metadata
        else:
            file = None
            with store.fs.open(path, "rb") as f:
                meta = pq.read_metadata(f)
        raw = json.loads(meta.metadata[VIEW_METADATA])
        runs = raw["runs"]
        names = list(zip(runs["name"], runs["nonce"]))
        listing = raw.get("listing")
        if listing is not None and not (isinstance(listing, dict) and "log" in listing and isinstance(listing.get("names"), dict)
                                        and isinstance(listing.get("runs"), list) and len(listing["runs"]) == len(names)):
            raise ValueError("its record of the log folders is malformed")
        columns = [("name", "str"), ("nonce", "str"), ("seq", "int"), ("parent", "str"), (WRITTEN, "int"), *raw["types"].items()]
        stored = meta.schema.to_arrow_schema()
        if [(f.name, f.type) for f in stored] != [(c, ARROW[t]) for c, t in columns] + [(RUN, pa.int32())]:
            raise ValueError(f"its columns ({', '.join(stored.names)[:200]}) are not those its record describes")
        digest = meta.metadata.get(VIEW_DIGEST)  # a version-1 view carries no digest
        if digest != hashlib.sha256(meta.metadata[VIEW_METADATA]).hexdigest().encode() and (
                digest is not None or raw.get("version", 1) >= 2):
            raise ValueError(f"its record of what it folded does not match its {VIEW_DIGEST.decode()} (a changed byte)")
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
            latest_records={k: runs[k] for k in RUN_KEYS},
            listing=listing,
            meta=meta,
            file=file,
        )
    except FileNotFoundError:
        raise
    except Exception as e:
        raise CorruptSegment(
            f"corrupt view {rootfs.url(store.fs, path)} ({e}); views are derived from the log: "
            "delete it and run `theseus compact` to rebuild one"
        ) from e


def scan_view(store: Store, view: View, numbers: list[int] | None = None, columns: list[str] | None = None) -> pl.LazyFrame:
    """A lazy frame over the view's rows of runs ``numbers`` (None: all).

    A few runs are read by row group straight from the file with the cached footer
    (only ``columns``, when given); more go through a Polars scan (predicate and
    projection pushdown).
    """
    if numbers is not None and len(numbers) <= FEW_RUNS:
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
                with store.fs.open(view.path, "rb") as f:
                    file = pq.ParquetFile(f, metadata=view.meta, page_checksum_verification=True)
                    table = file.read_row_groups(groups, columns, use_threads=False)
        except FileNotFoundError:
            raise
        except Exception as e:  # a page that fails its CRC: the view is derived, readers fold from the log
            raise CorruptView(f"corrupt view {rootfs.url(store.fs, view.path)} ({e}); views are derived from the log: "
                              "delete it and run `theseus compact` to rebuild one", view.path) from e
        base = dict(zip(groups, np.cumsum([0] + [starts[g + 1] - starts[g] for g in groups]).tolist()))
        parts = []
        for number, (lo, hi) in zip(numbers, spans):
            group = int(np.searchsorted(starts, lo, "right")) - 1
            rows = pl.from_arrow(table.slice(base[group] + lo - starts[group], hi - lo))
            parts.append(with_identity(rows, *view.names[number]))
        return pl.concat(parts).lazy()
    if rootfs.is_local(store.fs):
        frame = pl.scan_parquet(view.path)
    else:
        frame = pl.scan_pyarrow_dataset(ds.dataset(view.path, filesystem=store.fs, format="parquet"))
    if numbers is not None and len(numbers) < len(view.runs):
        frame = frame.filter(pl.col(RUN).is_in(numbers))
    return frame


def build_view(store: Store) -> str | None:
    """Fold every run of the log into a new view, publish it, then retire older views.

    Returns the new view's path (None for an empty log).

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> path = build_view(store)
    >>> view = read_view(store, path)
    >>> view.types, list(view.runs), view.starts
    ({'loss': 'float'}, [('general.default.doc', '...')], [0, 1])
    """
    stamp = time.time_ns()
    rootfs.check_inside(store.fs, store.path(), store.path(VIEW))  # views are written and deleted there: never through a link
    runs = store._runs()
    if not runs:
        return None
    footers = {run: store._footers.footers(paths) for run, paths in runs.items()}
    types = union_keys(f.keys for fs in footers.values() for f in fs)
    signatures: dict[str, int] = {}
    index = {"name": [], "nonce": [], "start": [0], "segments": [], "stamp": [], "keys": [], **{k: [] for k in RUN_KEYS}}
    frames = []
    for number, ((name, nonce), paths) in enumerate(runs.items()):
        folded = fold_run(store.fs, list(zip(paths, footers[(name, nonce)])), types, parent=True, written=True, latest=RUN_KEYS)
        n = folded.frame.height
        frames.append(with_identity(folded.frame, name, nonce).with_columns(pl.lit(number, pl.Int32).alias(RUN)))
        signature = json.dumps(union_keys(f.keys for f in footers[(name, nonce)]), sort_keys=True)
        index["name"].append(name)
        index["nonce"].append(nonce)
        index["start"].append(index["start"][-1] + n)
        index["segments"].append([p.rsplit("/", 1)[-1] for p in paths])
        # a segment without a stamp range (no block index) makes the run never take segments on top
        index["stamp"].append(max(f.stamps[1] if f.stamps else 2**63 - 1 for f in footers[(name, nonce)]))
        index["keys"].append(signatures.setdefault(signature, len(signatures)))
        for key in RUN_KEYS:
            index[key].append(list(folded.latest[key]) if key in folded.latest else None)
    frame = pl.concat(frames)
    listing = record_listings(store._listings, store.path(), runs)  # after the fold: folders older by then
    # a parent is stored only where it is not the previous seq's node ("" for none at all)
    usual = pl.when(pl.col("seq") > 0).then(node_ids(pl.col("name"), pl.col("nonce"), pl.col("seq") - 1))
    frame = frame.with_columns(
        pl.when(pl.col("parent").eq_missing(usual)).then(None).otherwise(pl.col("parent").fill_null("")).alias("parent"))
    meta = {"version": 2, "types": types, "runs": index, "signatures": [json.loads(s) for s in signatures], "listing": listing}
    table = frame.to_arrow()
    sink = io.BytesIO()
    # no Arrow schema in the footer (it would repeat the metadata), statistics where they prune
    # float values hardly compress and are what a top-k reads: stored plain, the rest zstd
    compression = {f.name: "none" if f.type == pa.float64() else "zstd" for f in table.schema}
    # every page carries a CRC: a flipped byte is found (audit, row-group reads), never served as a value
    with pq.ParquetWriter(sink, table.schema, compression=compression, store_schema=False, write_page_checksum=True,
                          write_statistics=["name", "nonce", "seq", RUN, *[k for k, t in types.items() if t != "str"]]) as w:
        w.write_table(table, row_group_size=ROW_GROUP)
        text = json.dumps(meta, separators=(",", ":"))
        w.add_key_value_metadata({VIEW_METADATA.decode(): text, VIEW_DIGEST.decode(): hashlib.sha256(text.encode()).hexdigest()})
    path = store.path(VIEW, view_name(stamp, secrets.token_hex(4)))
    rootfs.publish(store.fs, path, sink.getvalue())
    names = _view_names(store)
    for name in sorted(names, key=lambda n: n.endswith(REJECTED)):  # views first, then their markers
        old = store.path(VIEW, name)
        view = name.removesuffix(REJECTED)
        retire = _is_view(view) and old != path and (
            view + REJECTED in names or store.path(VIEW, view) < path or store.path(VIEW, view) in store._bad_views)
        if retire:  # older, unreadable or rejected (whatever its name), and a marker once its view is gone
            try:
                store.fs.rm_file(old)
            except FileNotFoundError:
                pass
    return path


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


def check_view(store: Store, path: str, runs: dict[tuple[str, str], list[str]], nonce: str | None = None) -> list[str]:
    """What is wrong with a view, checked through (for ``theseus audit``; it reads the whole
    view): its footer's digest, every page against its CRC, then each of its runs (of run
    ``nonce`` only, when given) against ``runs`` (the log's, ``{(name, nonce): segment paths}``):
    a run the log lacks differs; one whose segments are exactly those the view folded has its
    nodes, key types, stamp and latest run records compared with the log's own fold. One line
    per run that differs (empty when the view holds); a view that cannot be read raises
    CorruptSegment.

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> check_view(store, build_view(store), store._runs())
    []
    """
    view = read_view(store, path)
    try:
        with store.fs.open(path, "rb") as f:
            table = pq.ParquetFile(f, metadata=view.meta, page_checksum_verification=True).read(use_threads=False)
    except FileNotFoundError:
        raise
    except Exception as e:
        raise CorruptView(f"corrupt view {rootfs.url(store.fs, path)}: {e}", path) from e
    frame = pl.from_arrow(table)
    found = []
    for run, number in view.runs.items():
        if nonce is not None and run[1] != nonce:
            continue
        paths = runs.get(run)
        if paths is None:
            found.append(f"{run[0]}:{run[1]} (not in the log)")
            continue
        if not view.covers(run, paths):
            continue  # the log changed since the view was built: readers fold this run from the log
        try:
            footers = store._footers.footers(paths)
            folded = fold_run(store.fs, list(zip(paths, footers)), view.types, parent=True, written=True, latest=RUN_KEYS)
        except (CorruptSegment, FileNotFoundError):
            continue  # the segment's own problem (audit reports it), or retired by a compaction since
        rows = frame.slice(view.starts[number], view.starts[number + 1] - view.starts[number])
        nodes = rows.select(view_columns(view, view.types, parent=True, written=True))
        differs = []
        if not nodes.equals(with_identity(folded.frame, *run)) or not (rows[RUN] == number).all():
            differs.append("nodes")
        if view.keys(number) != union_keys(f.keys for f in footers):
            differs.append("key types")
        if view.stamps[number] != max(f.stamps[1] if f.stamps else 2**63 - 1 for f in footers):
            differs.append("stamp")
        if view.latest(number) != {k: tuple(v) for k, v in folded.latest.items()}:
            differs.append("latest records")
        if differs:
            found.append(f"{run[0]}:{run[1]} ({', '.join(differs)} differ from the log's fold)")
    return found
