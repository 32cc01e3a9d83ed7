"""The view folded from the log: building a new view, refreshing it, checking one against the log.

``theseus.store.view_file`` defines the view file and reads it; this module writes one from the
log's fold (``compact()`` refreshes it, through :func:`refresh_view`) and compares one with
that fold (``theseus audit``, through :func:`check_view`).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from typing import NamedTuple

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from theseus.store import fs as rootfs
from theseus.store.fold import WRITTEN, fold_run, node_ids, with_identity
from theseus.store.index import Index
from theseus.store.latest import same_value
from theseus.store.listing import record_listings
from theseus.store.node import MAX_SEQ
from theseus.store.scope import empty_nodes
from theseus.store.segments import CorruptSegment, Footer, union_keys
from theseus.store.summary import SUMMARY_KEYS, run_written
from theseus.store.view_file import (
    LATEST_KEYS,
    REJECTED,
    ROW_GROUP,
    RUN,
    RUN_KEYS,
    SUMMARY,
    SUMMARY_LATEST,
    VERSION,
    VIEW,
    VIEW_DIGEST,
    VIEW_METADATA,
    VIEW_SUMMARY,
    VIEW_SUMMARY_DIGEST,
    CorruptView,
    corrupt_view_message,
    is_view,
    read_view,
    view_columns,
    view_name,
    view_names,
)
from theseus.store.view_files import Views

MERGE_FACTOR = 4  # a view file is merged into the newer ones once they hold a quarter of its rows
SMALL_VIEW_ROWS = 65536  # a view file this small is always merged into the newer ones
MAX_VIEW_FILES = 8  # more live files than this: the oldest ones are merged too


def refresh_view(index: Index) -> str | None:
    """Fold into a new view file the runs the live views do not cover (new runs, runs with new
    segments), merging it with the newest live files (:func:`merge_tail`); returns its path,
    or None when the views cover the log exactly (and record the log folders, where their
    ctimes prove listings).

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> index = Index(store.fs, store.path())
    >>> first = refresh_view(index)
    >>> refresh_view(index) is None  # the view covers the log: kept
    True
    >>> index.view().paths == [first]
    True
    """
    views = index.view()
    runs = index.runs()
    stale = {run: paths for run, paths in runs.items() if views is None or not views.covers(run, paths)}
    unrecorded = views is not None and views.listing is None and index.listings.enabled
    if not stale and not unrecorded:
        retire_views(index, None, [])
        return None
    return build_view(index, stale, runs, views)


def build_view(index: Index, stale: dict[tuple[str, str], list[str]] | None = None,
               runs: dict[tuple[str, str], list[str]] | None = None, views: Views | None = None) -> str | None:
    """Publish a view file holding the fold of the ``stale`` runs (default: every run of the log)
    and the runs of the live files it merges (:func:`merge_tail`), then retire those files.

    ``runs`` is the log's listing (default: listed now) and ``views`` the live views it was
    compared with. Returns the new file's path (None for an empty log).

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
    runs = index.runs() if runs is None else runs
    stale = runs if stale is None else stale
    if not runs:
        return None
    merged, copied = merge_tail(views, stale, runs)
    footers = {run: index.footers.footers(paths) for run, paths in stale.items()}
    types = union_keys([*(f.keys for fs in footers.values() for f in fs),
                        *(views.keys(number) for number in copied.values())])
    # a copied run whose file stores one of its keys with another type than the new file's, or
    # keeps no summary (written before views kept them), is folded again
    for run, number in list(copied.items()):
        if views.summary(number) is None or any(views.stored(number).get(k) != types[k] for k in views.keys(number)):
            del copied[run]
            footers[run] = index.footers.footers(runs[run])
    parts = {run: _fold_part(index, run, runs[run], fs, types) for run, fs in footers.items()}
    parts.update(_copied_parts(index, views, copied, types))
    path = index.path(VIEW, view_name(stamp, secrets.token_hex(4)))
    # after the fold: folders older by then; the log and name folders for every run, run folders for its own
    listing = record_listings(index.listings, index.path(), runs, sorted(parts))
    rootfs.publish(index.fs, path, _encode(dict(sorted(parts.items())), types, listing))
    retire_views(index, path, merged)
    return path


def merge_tail(views: Views | None, stale: dict, runs: dict) -> tuple[list[str], dict[tuple[str, str], int]]:
    """Which live view files a new one holding ``stale``'s runs absorbs, newest first while each
    holds few rows next to what is merged so far (``MERGE_FACTOR``, ``SMALL_VIEW_ROWS``) or too
    many files are live (``MAX_VIEW_FILES``): their paths, and ``{run: number}`` of the runs read
    from them that stay current (in the log and not stale), to copy into the new file."""
    if views is None:
        return [], {}
    live: dict[int, list[tuple[tuple[str, str], int]]] = {}  # file -> its current runs
    for run, number in views.runs.items():
        if run in runs and run not in stale:
            live.setdefault(views.entries[number][0], []).append((run, number))
    rows = {f: sum(views.nodes(n) for _, n in found) for f, found in live.items()}
    total = sum(views.nodes(views.runs[run]) if run in views.runs else 0 for run in stale) + len(stale)
    merged, copied = [], {}
    for f in range(len(views.files) - 1, -1, -1):
        size = rows.get(f, 0)
        if size > MERGE_FACTOR * total and size > SMALL_VIEW_ROWS and f < MAX_VIEW_FILES - 1:
            break
        merged.append(views.files[f].path)
        copied.update(live.get(f, []))
        total += size
    return merged, copied


def retire_views(index: Index, path: str | None, merged: list[str]) -> None:
    """Delete the view files ``merged`` into ``path``, rejected or unreadable ones (and, once their view
    is gone, their markers)."""
    names = view_names(index)
    gone = {p.rsplit("/", 1)[-1] for p in merged}
    for name in sorted(names, key=lambda n: n.endswith(REJECTED)):  # views first, then their markers
        old = index.path(VIEW, name)
        view = name.removesuffix(REJECTED)
        retire = is_view(view) and old != path and (
            name in gone or view + REJECTED in names or index.ignores(index.path(VIEW, view))
            or (name.endswith(REJECTED) and view not in names))
        if retire:
            try:
                index.fs.rm_file(old)
            except FileNotFoundError:
                pass


class _Part(NamedTuple):
    """One run of a view file being written: its node frame (seq, parent, _written, keys) and record."""

    frame: pl.DataFrame
    segments: list[str]
    stamp: int
    keys: dict[str, str]
    latest: dict[str, tuple]
    counts: tuple[int, int, int]


def _fold_part(index: Index, run: tuple[str, str], paths: list[str], footers, types: dict[str, str]) -> _Part:
    folded = fold_run(index.fs, list(zip(paths, footers)), types, parent=True, written=True, latest=LATEST_KEYS)
    # a segment without a stamp range (no block index) makes the run never take segments on top
    return _Part(folded.frame, [p.rsplit("/", 1)[-1] for p in paths], run_stamp(footers),
                 union_keys(f.keys for f in footers), folded.latest, run_counts(folded.frame, footers))


def _copied_parts(index: Index, views: Views, copied: dict[tuple[str, str], int],
                  types: dict[str, str]) -> dict[tuple[str, str], _Part]:
    """The runs ``copied`` (``{run: number}`` in ``views``) as parts, their rows read in one scan."""
    if not copied:
        return {}
    frame = views.scan(index, list(copied.values()), types, True, True)[0].collect()
    found = frame.partition_by(["name", "nonce"], as_dict=True, maintain_order=True)
    parts = {}
    for run, number in copied.items():
        rows = found[run].drop("name", "nonce") if run in found else frame.clear().drop("name", "nonce")
        summary = views.summary(number)
        parts[run] = _Part(rows, views.segments[number], views.stamp(number), views.keys(number),
                           {**summary.latest, **views.latest(number)}, tuple(summary[:3]))
    return parts


_WRITE_ROWS = 16 * ROW_GROUP  # rows of a view converted to Arrow and written at once


def _encode(parts: dict[tuple[str, str], _Part], types: dict[str, str], listing: dict | None) -> pa.Buffer:
    """A view file's bytes: the parts' rows (runs in order) and the footer record of what they fold."""
    signatures: dict[str, int] = {}
    run_table = {"name": [], "nonce": [], "start": [0], "segments": [], "stamp": [], "keys": [],
                 **{k: [] for k in RUN_KEYS}}
    summaries = {k: [] for k in (*SUMMARY, *SUMMARY_LATEST)}
    frames = []
    for number, ((name, nonce), part) in enumerate(parts.items()):
        frames.append(with_identity(part.frame, name, nonce).with_columns(pl.lit(number, pl.Int32).alias(RUN)))
        run_table["name"].append(name)
        run_table["nonce"].append(nonce)
        run_table["start"].append(run_table["start"][-1] + part.frame.height)
        run_table["segments"].append(part.segments)
        run_table["stamp"].append(part.stamp)
        run_table["keys"].append(signatures.setdefault(json.dumps(part.keys, sort_keys=True), len(signatures)))
        for key in LATEST_KEYS:
            (run_table if key in RUN_KEYS else summaries)[key].append(
                list(part.latest[key]) if key in part.latest else None)
        for key, value in zip(SUMMARY, part.counts):
            summaries[key].append(value)
    frame = pl.concat(frames) if frames else empty_nodes(types, parent=True, written=True).with_columns(
        pl.lit(None, pl.Int32).alias(RUN))
    # a parent is stored only where it is not the previous seq's node ("" for none at all)
    usual = pl.when(pl.col("seq") > 0).then(node_ids(pl.col("name"), pl.col("nonce"), pl.col("seq") - 1))
    frame = frame.with_columns(
        pl.when(pl.col("parent").eq_missing(usual)).then(None).otherwise(pl.col("parent").fill_null("")).alias("parent"))
    meta = {"version": VERSION, "types": types, "runs": run_table, "signatures": [json.loads(s) for s in signatures],
            "listing": listing}
    schema = frame.clear().to_arrow().schema
    sink = pa.BufferOutputStream()  # grows without the copy a BytesIO's getvalue makes
    # no Arrow schema in the footer (it would repeat the metadata), statistics where they prune
    # float values hardly compress and are what a top-k reads: stored plain, the rest zstd
    compression = {f.name: "none" if f.type == pa.float64() else "zstd" for f in schema}
    # every page carries a CRC: a flipped byte is found (audit, row-group reads), never served as a value
    with pq.ParquetWriter(sink, schema, compression=compression, store_schema=False, write_page_checksum=True,
                          write_statistics=["name", "nonce", "seq", RUN,
                                            *[k for k, t in types.items() if t != "str"]]) as w:
        # converted to Arrow a few row groups at a time, never the whole frame at once
        for start in range(0, max(frame.height, 1), _WRITE_ROWS):
            w.write_table(frame.slice(start, _WRITE_ROWS).to_arrow(), row_group_size=ROW_GROUP)
        text = json.dumps(meta, separators=(",", ":"))
        summary = json.dumps(summaries, separators=(",", ":"))  # NaN and Infinity as JSON5 spells them
        w.add_key_value_metadata({VIEW_METADATA.decode(): text,
                                  VIEW_DIGEST.decode(): hashlib.sha256(text.encode()).hexdigest(),
                                  VIEW_SUMMARY.decode(): summary,
                                  VIEW_SUMMARY_DIGEST.decode(): hashlib.sha256(summary.encode()).hexdigest()})
    return sink.getvalue()


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
    frame = _read_checked(index, path, view)
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
                              latest=LATEST_KEYS)
        except (CorruptSegment, FileNotFoundError):
            continue  # the segment's own problem (audit reports it), or retired by a compaction since
        differs = _run_differences(view, frame, run, number, folded, footers)
        if differs:
            found.append(f"{run[0]}:{run[1]} ({', '.join(differs)} differ from the log's fold)")
    return found


def _read_checked(index: Index, path: str, view) -> pl.DataFrame:
    """The whole view at ``path`` as a frame, its summaries parsed and every page checked against its
    CRC on the way (raising CorruptSegment/CorruptView naming the view when one fails)."""
    try:
        view.summaries  # noqa: B018 (parsed here to check it: readers parse it lazily and skip a damaged one)
    except ValueError as e:
        raise CorruptSegment(corrupt_view_message(index, path, e)) from e
    try:
        with index.fs.open(path, "rb") as f:
            table = pq.ParquetFile(f, metadata=view.meta, page_checksum_verification=True).read(use_threads=False)
    except FileNotFoundError:
        raise
    except Exception as e:
        raise CorruptView(f"corrupt view {rootfs.url(index.fs, path)}: {e}", path) from e
    return pl.from_arrow(table)


def _run_differences(view, frame: pl.DataFrame, run: tuple[str, str], number: int, folded, footers) -> list[str]:
    """What of run ``run`` (the view's ``number``) differs from the log's own fold ``folded`` of its
    segments' ``footers``: its nodes, key types, stamp, latest records and summary, by name."""
    rows = frame.slice(view.starts[number], view.starts[number + 1] - view.starts[number])
    nodes = rows.select(view_columns(view, view.types, parent=True, written=True))
    differs = []
    if not nodes.equals(with_identity(folded.frame, *run)) or not (rows[RUN] == number).all():
        differs.append("nodes")
    if view.keys(number) != union_keys(f.keys for f in footers):
        differs.append("key types")
    if view.stamps[number] != run_stamp(footers):
        differs.append("stamp")
    if not same_records(view.latest(number), {k: v for k, v in folded.latest.items() if k in RUN_KEYS}):
        differs.append("latest records")
    summary = view.summary(number)
    if summary is not None and (tuple(summary[:3]) != run_counts(folded.frame, footers) or not same_records(
            summary.latest, {k: v for k, v in folded.latest.items() if k in SUMMARY_KEYS})):
        differs.append("run summary")
    return differs


def same_records(left: dict[str, tuple], right: dict[str, tuple]) -> bool:
    """Whether two ``{key: (value, stamp, writer)}`` hold the same records, a NaN value equal to a NaN
    (a run may log one; ``==`` tells two NaN objects apart).

    >>> nan = float("nan")
    >>> same_records({"l": (nan, 1, "w")}, {"l": [float("nan"), 1, "w"]}), same_records({"l": (1, 1, "w")}, {})
    (True, False)
    """
    return left.keys() == right.keys() and all(
        len(left[k]) == len(right[k]) and all(map(same_value, left[k], right[k])) for k in left)


def run_counts(frame: pl.DataFrame, footers: list[Footer]) -> tuple[int, int, int]:
    """``(nodes, last seq, last write stamp)`` of a run's fold (with ``_written``) and its segments'
    ``footers``, as a view keeps them: the last write leaves a person's marks out (``run_written``),
    taken from the fold only where a footer has no block index.

    >>> run_counts(pl.DataFrame({"seq": [0, 1, 4], WRITTEN: [5, 9, 7]}), [Footer({}, None, None, None)])
    (3, 4, 9)
    """
    n = frame.height
    written = run_written(footers)
    if written is None:
        written = int(frame[WRITTEN].max() or 0) if n else 0
    return (n, int(frame["seq"][-1]) if n else -1, written)


def run_stamp(footers) -> int:
    """The highest write stamp of a run's segments (int64's largest for a segment without stamps),
    what a view records per run and what audit compares it with.

    >>> from types import SimpleNamespace
    >>> run_stamp([SimpleNamespace(stamps=(1, 5)), SimpleNamespace(stamps=(2, 9))])
    9
    """
    return max(f.stamps[1] if f.stamps else MAX_SEQ for f in footers)
