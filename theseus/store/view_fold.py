"""The view folded from the log: building a new view, refreshing it, checking one against the log.

``theseus.store.view`` defines the view file and reads it; this module writes one from the
log's fold (``compact()`` refreshes it, through :func:`refresh_view`) and compares one with
that fold (``theseus audit``, through :func:`check_view`).
"""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import time

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from theseus.store import fs as rootfs
from theseus.store.fold import fold_run, node_ids, with_identity
from theseus.store.index import Index
from theseus.store.node import MAX_SEQ
from theseus.store.segments import CorruptSegment, record_listings, union_keys
from theseus.store.view import (
    REJECTED,
    ROW_GROUP,
    RUN,
    RUN_KEYS,
    VIEW,
    VIEW_DIGEST,
    VIEW_METADATA,
    CorruptView,
    is_view,
    read_view,
    view_columns,
    view_name,
    view_names,
)


def refresh_view(index: Index) -> None:
    """Build a new view unless the newest one covers exactly the log's runs (and records the
    log folders, where their ctimes prove listings).

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> index = Index(store.fs, store.path())
    >>> refresh_view(index)
    >>> first = index.view().path
    >>> refresh_view(index)  # the view covers the log: kept
    >>> index.view().path == first
    True
    """
    view = index.view()
    runs = index.runs()
    if (view is None or len(view.runs) != len(runs) or not all(view.covers(run, paths) for run, paths in runs.items())
            or (view.listing is None and index.listings.enabled)):
        build_view(index)


def build_view(index: Index) -> str | None:
    """Fold every run of the log into a new view, publish it, then retire older views.

    Returns the new view's path (None for an empty log).

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> path = build_view(Index(store.fs, store.path()))
    >>> view = read_view(store, path)
    >>> view.types, list(view.runs), view.starts
    ({'loss': 'float'}, [('general.default.doc', '...')], [0, 1])
    """
    stamp = time.time_ns()
    # views are written and deleted there: never through a link
    rootfs.check_inside(index.fs, index.path(), index.path(VIEW))
    runs = index.runs()
    if not runs:
        return None
    footers = {run: index.footers.footers(paths) for run, paths in runs.items()}
    types = union_keys(f.keys for fs in footers.values() for f in fs)
    signatures: dict[str, int] = {}
    run_table = {"name": [], "nonce": [], "start": [0], "segments": [], "stamp": [], "keys": [],
                 **{k: [] for k in RUN_KEYS}}
    frames = []
    for number, ((name, nonce), paths) in enumerate(runs.items()):
        folded = fold_run(index.fs, list(zip(paths, footers[(name, nonce)])), types, parent=True, written=True,
                          latest=RUN_KEYS)
        n = folded.frame.height
        frames.append(with_identity(folded.frame, name, nonce).with_columns(pl.lit(number, pl.Int32).alias(RUN)))
        signature = json.dumps(union_keys(f.keys for f in footers[(name, nonce)]), sort_keys=True)
        run_table["name"].append(name)
        run_table["nonce"].append(nonce)
        run_table["start"].append(run_table["start"][-1] + n)
        run_table["segments"].append([p.rsplit("/", 1)[-1] for p in paths])
        # a segment without a stamp range (no block index) makes the run never take segments on top
        run_table["stamp"].append(run_stamp(footers[(name, nonce)]))
        run_table["keys"].append(signatures.setdefault(signature, len(signatures)))
        for key in RUN_KEYS:
            run_table[key].append(list(folded.latest[key]) if key in folded.latest else None)
    frame = pl.concat(frames)
    listing = record_listings(index.listings, index.path(), runs)  # after the fold: folders older by then
    # a parent is stored only where it is not the previous seq's node ("" for none at all)
    usual = pl.when(pl.col("seq") > 0).then(node_ids(pl.col("name"), pl.col("nonce"), pl.col("seq") - 1))
    frame = frame.with_columns(
        pl.when(pl.col("parent").eq_missing(usual)).then(None).otherwise(pl.col("parent").fill_null("")).alias("parent"))
    meta = {"version": 2, "types": types, "runs": run_table, "signatures": [json.loads(s) for s in signatures],
            "listing": listing}
    table = frame.to_arrow()
    sink = io.BytesIO()
    # no Arrow schema in the footer (it would repeat the metadata), statistics where they prune
    # float values hardly compress and are what a top-k reads: stored plain, the rest zstd
    compression = {f.name: "none" if f.type == pa.float64() else "zstd" for f in table.schema}
    # every page carries a CRC: a flipped byte is found (audit, row-group reads), never served as a value
    with pq.ParquetWriter(sink, table.schema, compression=compression, store_schema=False, write_page_checksum=True,
                          write_statistics=["name", "nonce", "seq", RUN,
                                            *[k for k, t in types.items() if t != "str"]]) as w:
        w.write_table(table, row_group_size=ROW_GROUP)
        text = json.dumps(meta, separators=(",", ":"))
        w.add_key_value_metadata({VIEW_METADATA.decode(): text,
                                  VIEW_DIGEST.decode(): hashlib.sha256(text.encode()).hexdigest()})
    path = index.path(VIEW, view_name(stamp, secrets.token_hex(4)))
    rootfs.publish(index.fs, path, sink.getvalue())
    names = view_names(index)
    for name in sorted(names, key=lambda n: n.endswith(REJECTED)):  # views first, then their markers
        old = index.path(VIEW, name)
        view = name.removesuffix(REJECTED)
        retire = is_view(view) and old != path and (
            view + REJECTED in names or index.path(VIEW, view) < path or index.ignores(index.path(VIEW, view)))
        if retire:  # older, unreadable or rejected (whatever its name), and a marker once its view is gone
            try:
                index.fs.rm_file(old)
            except FileNotFoundError:
                pass
    return path


def check_view(index: Index, path: str, runs: dict[tuple[str, str], list[str]], nonce: str | None = None) -> list[str]:
    """What is wrong with a view, checked through (for ``theseus audit``; it reads the whole
    view): its footer's digest, every page against its CRC, then each of its runs (of run
    ``nonce`` only, when given) against ``runs`` (the log's, ``{(name, nonce): segment paths}``):
    a run the log lacks differs; one whose segments are exactly those the view folded has its
    nodes, key types, stamp and latest run records compared with the log's own fold. One line
    per run that differs (empty when the view holds); a view that cannot be read raises
    CorruptSegment.

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> index = Index(store.fs, store.path())
    >>> check_view(index, build_view(index), index.runs())
    []
    """
    view = read_view(index, path)
    try:
        with index.fs.open(path, "rb") as f:
            table = pq.ParquetFile(f, metadata=view.meta, page_checksum_verification=True).read(use_threads=False)
    except FileNotFoundError:
        raise
    except Exception as e:
        raise CorruptView(f"corrupt view {rootfs.url(index.fs, path)}: {e}", path) from e
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
            footers = index.footers.footers(paths)
            folded = fold_run(index.fs, list(zip(paths, footers)), view.types, parent=True, written=True,
                              latest=RUN_KEYS)
        except (CorruptSegment, FileNotFoundError):
            continue  # the segment's own problem (audit reports it), or retired by a compaction since
        rows = frame.slice(view.starts[number], view.starts[number + 1] - view.starts[number])
        nodes = rows.select(view_columns(view, view.types, parent=True, written=True))
        differs = []
        if not nodes.equals(with_identity(folded.frame, *run)) or not (rows[RUN] == number).all():
            differs.append("nodes")
        if view.keys(number) != union_keys(f.keys for f in footers):
            differs.append("key types")
        if view.stamps[number] != run_stamp(footers):
            differs.append("stamp")
        if view.latest(number) != {k: tuple(v) for k, v in folded.latest.items()}:
            differs.append("latest records")
        if differs:
            found.append(f"{run[0]}:{run[1]} ({', '.join(differs)} differ from the log's fold)")
    return found


def run_stamp(footers) -> int:
    """The highest write stamp of a run's segments (int64's largest for a segment without stamps),
    what a view records per run and what audit compares it with.

    >>> from types import SimpleNamespace
    >>> run_stamp([SimpleNamespace(stamps=(1, 5)), SimpleNamespace(stamps=(2, 9))])
    9
    """
    return max(f.stamps[1] if f.stamps else MAX_SEQ for f in footers)
