"""Run summaries: one row per run (``Store.runs()``, ``theseus ls``) at a cost per run, not per record.

A run's summary is its node count, last seq, last write stamp and the latest record of each of
``SUMMARY_KEYS`` (status, finished, job, the usual metrics, the marks of ``theseus tag``,
``note`` and ``hide``). It comes from the view when the view folded exactly the run's segments
(the view keeps each run's summary in its footer), and otherwise from the run's segment footers:
their block index gives the seqs and stamps, and each key's latest record in the segment
(``theseus.store.latest``); only where a segment that can hold a summary key's latest record
does not record it (segments written before that entry, merged ones, long strings) is that key's
block read. Segments are immutable, so a summary is cached by the run's segment list.

A run's last write (``written``, the clock of its status: ``theseus.store.status``) is that of
its own records: a person's marks (``MARKS``) are left out, so tagging, annotating or hiding a
run that has gone stale never makes it read as running (:func:`run_written`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import polars as pl

from theseus.store import schema
from theseus.store.fold import DTYPES, WRITTEN, fold_run
from theseus.store.listing import vanished
from theseus.store.recency import later, latest_of
from theseus.store.schema import TYPES
from theseus.store.segments import CorruptSegment, Footer, union_keys

METRICS = ("train/loss", "val/loss", "train/tokens")
SCAN_CHUNK = 500  # segments per scan of summarize_runs: the first scans run while later footers are read
MARKS = (schema.TAGS, schema.NOTE, schema.HIDDEN)  # a person's marks on a run (theseus.store.marks)
SUMMARY_KEYS = (schema.STATUS, schema.FINISHED, schema.JOB, *METRICS, *MARKS)


class Summary(NamedTuple):
    """One run: nodes, last seq, last write stamp (marks left out: :func:`run_written`),
    ``{key: (value, stamp, writer)}`` of its latest summary records, and its ``{key: type}``."""

    nodes: int
    last_seq: int
    written: int
    latest: dict[str, tuple]
    keys: dict[str, str]


def summarize(index: Any, paths: list[str]) -> Summary:
    """The summary of one run from its segments ``paths`` (footers, plus the blocks that can hold
    a summary key's latest record); ``index`` is the root's `theseus.store.index.Index` (not imported
    here: the index imports the view, which imports this module).

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> with store.writer() as w:
    ...     w.write(n.next(), {"train/loss": 0.5}); w.finished(n.next())
    >>> s = summarize(store._index, store._index.segments())
    >>> s.nodes, s.last_seq, s.latest["train/loss"][0], s.latest["_finished"][0]
    (2, 1, 0.5, True)
    """
    footers = index.footers.footers(paths)
    found = _from_footers(footers)
    if found is None:
        return _folded(index, paths, footers)
    nodes, last, written, keys, latest, needed = found
    if needed:
        wanted = tuple(k for k in SUMMARY_KEYS if k in keys)
        segments = [(paths[i], _only(footers[i], wanted)) for i in sorted(needed)]
        latest = _newest(latest, fold_run(index.fs, segments, {}, latest=wanted).latest)
    return Summary(nodes, last, written, latest, keys)


def summarize_runs(index: Any, runs: dict[tuple[str, str], list[str]],
                   bad: dict[tuple[str, str], CorruptSegment] | None = None) -> dict[tuple[str, str], Summary]:
    """The summaries of many runs of a local root (``{run: segment paths}``): what the segments'
    theseus footer entries say (read alone, ``FooterCache.indexes``), and the latest summary
    records their footers do not record from Polars scans of the segments that can hold them
    (rows read raw: their latest by stamp and writer, whatever the footers say). A run whose
    footers lack a dense block index is folded (:func:`summarize`).

    A segment that cannot be read raises its CorruptSegment; given ``bad``, the run holding it is
    left out of the answer and its error put in ``bad`` instead (one bad file costs its own run).

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> [s] = summarize_runs(store._index, store._index.runs()).values()
    >>> s == summarize(store._index, store._index.segments())
    True
    >>> import os; bad = {}
    >>> os.mkfifo(store._index.segments()[0].replace("/s-", "/s-9"))
    >>> summarize_runs(store._index, store._index.runs(), bad), [str(e)[:14] for e in bad.values()]
    ({}, ['not a segment:'])
    """
    found, partial, scans = {}, {}, []
    # a chunk's scan (no GIL) runs while the next chunk's footers are read
    with _collector_paused(), ThreadPoolExecutor(1) as pool:
        chunk: list[tuple[tuple[str, str], list[str]]] = []
        for number, (run, paths) in enumerate(runs.items()):
            try:
                summary = _from_footers(index.footers.indexes(paths))
                if summary is None:
                    found[run] = summarize(index, paths)
                else:
                    partial[run] = summary
                    if summary[5]:
                        chunk.append((run, [paths[i] for i in sorted(summary[5])]))
            except CorruptSegment as e:
                if bad is None:
                    raise
                bad[run] = e
            if chunk and (sum(len(p) for _, p in chunk) >= SCAN_CHUNK or number == len(runs) - 1):
                scans.append((chunk, pool.submit(_latest_records, [p for _, paths in chunk for p in paths])))
                chunk = []
        latest = {}
        for part, scan in scans:
            try:
                latest.update(scan.result())
            except (pl.exceptions.PolarsError, OSError) as e:
                if bad is None or vanished(e):
                    raise
                latest.update(_latest_records_each(part, bad))
    for run, (nodes, last, written, keys, known, _) in partial.items():
        if bad is None or run not in bad:
            found[run] = Summary(nodes, last, written, _newest(known, latest.get(run, {})), keys)
    return {run: found[run] for run in runs if run in found}


def _latest_records_each(chunk: list[tuple[tuple[str, str], list[str]]],
                         bad: dict[tuple[str, str], CorruptSegment]) -> dict[tuple[str, str], dict[str, tuple]]:
    """:func:`_latest_records` of a chunk whose scan failed, one segment at a time: a run holding a
    segment that cannot be read goes to ``bad`` with an error naming that segment."""
    latest: dict[tuple[str, str], dict[str, tuple]] = {}
    for run, paths in chunk:
        for path in paths:
            try:
                found = _latest_records([path]).get(run, {})
            except (pl.exceptions.PolarsError, OSError) as e:
                if vanished(e):
                    raise
                bad[run] = CorruptSegment(f"corrupt or truncated segment {path}: {e}")
                break
            latest[run] = _newest(latest.get(run, {}), found)
    return latest


def summarize_each(index: Any, runs: dict[tuple[str, str], list[str]],
                   bad: dict[tuple[str, str], CorruptSegment]) -> dict[tuple[str, str], Summary]:
    """The summaries of many runs of any root, each by :func:`summarize` (footers read in one
    parallel pass first); a run holding a segment that cannot be read is left out and its error
    put in ``bad``.

    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> [s] = summarize_each(store._index, store._index.runs(), {}).values()
    >>> s.nodes
    1
    """
    try:
        index.footers.footers([p for paths in runs.values() for p in paths])
    except CorruptSegment:
        pass  # each run's own read below names the bad file and costs that run alone

    def one(paths: list[str]) -> Summary | CorruptSegment:
        try:
            return summarize(index, paths)
        except CorruptSegment as e:
            return e

    found = {}
    with ThreadPoolExecutor(max(1, min(8, len(runs)))) as pool:
        for run, summary in zip(runs, pool.map(one, runs.values())):
            if isinstance(summary, CorruptSegment):
                bad[run] = summary
            else:
                found[run] = summary
    return found


def readable(found: dict[tuple[str, str], Any], bad: dict[tuple[str, str], CorruptSegment]) -> dict:
    """``found`` without the runs in ``bad``, each reported by a warning naming its bad file; when
    no run is left, the first error is raised (a root none of whose runs can be read is an
    error, not an empty table).

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     left = readable({("a", "1"): 1, ("b", "2"): 2}, {("b", "2"): CorruptSegment("s-9.parquet: truncated")})
    >>> left, str(caught[0].message)
    ({('a', '1'): 1}, 'run b:2 left out: s-9.parquet: truncated')
    """
    for (name, nonce), error in bad.items():
        warnings.warn(f"run {name}:{nonce} left out: {error}", UnreadableRun, stacklevel=5)
    left = {run: value for run, value in found.items() if run not in bad}
    if bad and not left:
        raise next(iter(bad.values()))
    return left


class UnreadableRun(UserWarning):
    """A run left out of an answer over many runs because one of its files cannot be read
    (the message names the file); a query of that run alone raises the error.

    >>> issubclass(UnreadableRun, UserWarning)
    True
    """


@contextlib.contextmanager
def _collector_paused():
    """Pause Python's cyclic garbage collector while the footers of many runs are parsed (when it was
    running): they make many small objects (parsed JSON, blocks), none in a cycle, that the
    collector would otherwise walk again each time their number crosses its thresholds."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _latest_records(paths: list[str]) -> dict[tuple[str, str], dict[str, tuple]]:
    """``{run: {key: (value, stamp, writer)}}``: the latest record of each summary key in local
    segments ``paths``, read raw by Polars (the value as stored: int, float, bool or str)."""
    frame = (pl.scan_parquet(paths, hive_partitioning=True, hive_schema={"name": pl.String, "nonce": pl.String})
             .filter(pl.col("key").is_in(SUMMARY_KEYS))
             .group_by("name", "nonce", "key")
             .agg(latest_of(pl.col("stamp", "writer", *TYPES)))
             .select("name", "nonce", "key", pl.struct(*TYPES).alias("value"), "stamp", "writer").collect())
    latest: dict[tuple[str, str], dict[str, tuple]] = {}
    for name, nonce, key, value, stamp, writer in frame.iter_rows():
        stored = next((value[t] for t in TYPES if value[t] is not None), None)
        latest.setdefault((name, nonce), {})[key] = (stored, stamp, writer)
    return latest


def _from_footers(footers: list[Footer]) -> tuple[int, int, int, dict[str, str], dict[str, tuple], set[int]] | None:
    """``(nodes, last seq, last write stamp, keys, {key: (value, stamp, writer)} of the latest summary
    records the footers record, the segments whose blocks must be read for the others)`` from a
    run's footers; None when a footer has no block index or a block is not dense (then the run is
    folded). A summary key's latest record is the newest of the footers' and the blocks' read.

    >>> from theseus.store.segments import Block, Latest
    >>> block = Block(0, 2, 0, 1, 2, ("float",))
    >>> old = Footer({"val/loss": "float"}, {"val/loss": block}, (1, 2), None)
    >>> new = Footer({"val/loss": "float"}, {"val/loss": block}, (3, 4), None, latest={"val/loss": Latest(4, "w", 1, 0.5)})
    >>> _from_footers([old, new])
    (2, 1, 4, {'val/loss': 'float'}, {'val/loss': (0.5, 4, 'w')}, set())
    >>> _from_footers([new, Footer({"val/loss": "float"}, {"val/loss": block}, (3, 5), None)])[4:]
    ({'val/loss': (0.5, 4, 'w')}, {1})
    """  # noqa: E501 - a doctest's input, on one line
    keys = union_keys(f.keys for f in footers)
    if not all(f.blocks is not None and f.stamps is not None for f in footers) or not all(
            b.dense for f in footers for b in f.blocks.values()):
        return None
    nodes, last = _seq_union([(b.seq_min, b.seq_max) for f in footers for b in f.blocks.values()])
    known: dict[str, tuple] = {}
    needed: set[int] = set()
    for key in SUMMARY_KEYS:
        holders = [i for i, f in enumerate(footers) if key in f.blocks]
        if not holders:
            continue
        recorded = {i: footers[i].latest[key] for i in holders if footers[i].latest and key in footers[i].latest}
        # a segment can hold the key's latest record only if its newest stamp reaches the floor: a
        # stamp some segment holds a record of the key at (its recorded latest, else its oldest stamp)
        floor = max(recorded[i].stamp if i in recorded else footers[i].stamps[0] for i in holders)
        for i in holders:
            if i in recorded and recorded[i].stamp >= floor:
                known[key] = later(known.get(key), (recorded[i].value, recorded[i].stamp, recorded[i].writer))
            elif i not in recorded and footers[i].stamps[1] >= floor:
                needed.add(i)  # not recorded: its block is read
    return nodes, last, run_written(footers), keys, known, needed


def run_written(footers: list[Footer]) -> int | None:
    """A run's last write stamp by its segments' ``footers``, the records of a person's marks (``MARKS``)
    left out: a segment holding only marks does not count, and one holding other keys counts the
    newest of their latest records (its newest stamp where one of them has no latest entry: a long
    string, an older writer's segment). A run of marks alone counts them. None when a footer has no
    block index (the caller takes its fold's stamps, marks included).

    >>> from theseus.store.latest import Latest
    >>> from theseus.store.segments import Block
    >>> block = Block(0, 1, 3, 3, 1, ("str",))
    >>> loss = Footer({"train/loss": "float"}, {"train/loss": block}, (1, 2), None, latest={"train/loss": Latest(2, "w", 3, 0.5)})
    >>> tags = Footer({"_tags": "str"}, {"_tags": block}, (9, 9), None, latest={"_tags": Latest(9, "w", 3, '["x"]')})
    >>> merged = Footer({}, {"_tags": block, "train/loss": block}, (2, 9), None,
    ...                 latest={"_tags": Latest(9, "w", 3, '["x"]'), "train/loss": Latest(2, "w", 3, 0.5)})
    >>> run_written([loss, tags]), run_written([merged]), run_written([tags])
    (2, 2, 9)
    """  # noqa: E501 - a doctest's input, on one line
    if not all(f.blocks is not None and f.stamps is not None for f in footers):
        return None
    found = [_own_written(f) for f in footers]
    found = [stamp for stamp in found if stamp is not None]
    if not found:  # marks alone (or no records): what it wrote is all there is
        return max((f.stamps[1] for f in footers), default=0)
    return max(found)


def _own_written(footer: Footer) -> int | None:
    """The newest stamp of a segment's records other than marks (None: it holds only marks)."""
    if not any(k in footer.blocks for k in MARKS):  # the usual segment: its newest record is its own
        return footer.stamps[1]
    own = [k for k in footer.blocks if k not in MARKS]
    if not own:
        return None
    latest = footer.latest or {}
    if all(k in latest for k in own):
        return max(latest[k].stamp for k in own)
    return footer.stamps[1]


def _newest(a: dict[str, tuple], b: dict[str, tuple]) -> dict[str, tuple]:
    """Per key, the later record of ``a``'s and ``b``'s ``{key: (value, stamp, writer)}``.

    >>> _newest({"x": (1, 5, "w"), "y": (2, 5, "w")}, {"x": (3, 6, "w")})
    {'x': (3, 6, 'w'), 'y': (2, 5, 'w')}
    """
    if not a or not b:
        return a or b
    merged = dict(a)
    for key, record in b.items():
        merged[key] = later(merged.get(key), record)
    return merged


def _folded(index: Any, paths: list[str], footers: list[Footer]) -> Summary:
    """A run's summary from its fold (footers without a dense block index)."""
    keys = union_keys(f.keys for f in footers)
    wanted = tuple(k for k in SUMMARY_KEYS if k in keys)
    folded = fold_run(index.fs, list(zip(paths, footers)), {}, written=True, latest=wanted)
    seqs = folded.frame["seq"]
    written = run_written(footers)
    if written is None:  # a segment without a block index: its fold's stamps, marks included
        written = int(folded.frame[WRITTEN].max() or 0) if len(seqs) else 0
    return Summary(len(seqs), int(seqs.max()) if len(seqs) else -1, written, folded.latest, keys)


def _only(footer: Footer, keys: tuple[str, ...]) -> Footer:
    """``footer`` with only the blocks of ``keys``, so a fold reads nothing else of the segment."""
    return dataclasses.replace(footer, blocks={k: b for k, b in footer.blocks.items() if k in keys})


def _seq_union(ranges: list[tuple[int, int]]) -> tuple[int, int]:
    """``(count, max)`` of the seqs covered by inclusive ``ranges``.

    >>> _seq_union([(0, 4), (3, 9), (20, 20)])
    (11, 20)
    """
    if not ranges:
        return 0, -1
    count, top = 0, -1
    for lo, hi in sorted(ranges):
        if hi > top:
            count += hi - max(lo, top + 1) + 1
            top = hi
    return count, top


def summary_frame(runs: list[tuple[tuple[str, str], Summary]]) -> pl.DataFrame:
    """``Store.runs()``'s frame: name, nonce, nodes, last seq, last write, then the latest value of each
    summary key any run logged (typed as the root reads it), sorted by last write.

    >>> s = Summary(3, 2, 7, {"train/loss": (1.5, 7, "w")}, {"train/loss": "float"})
    >>> summary_frame([(("a.b.c", "949e88"), s)]).rows()
    [('a.b.c', '949e88', 3, 2, 7, 1.5)]
    """
    types = union_keys(s.keys for _, s in runs)
    columns = {
        "name": pl.Series([r[0] for r, _ in runs], dtype=pl.String),
        "nonce": pl.Series([r[1] for r, _ in runs], dtype=pl.String),
        "nodes": pl.Series([s.nodes for _, s in runs], dtype=pl.UInt32),
        "last seq": pl.Series([s.last_seq for _, s in runs], dtype=pl.Int64),
        WRITTEN: pl.Series([s.written for _, s in runs], dtype=pl.Int64),
    }
    for key in SUMMARY_KEYS:
        if key in types:
            columns[key] = _typed([s.latest[key][0] if key in s.latest else None for _, s in runs], types[key])
    return pl.DataFrame(columns).sort(WRITTEN, maintain_order=True)


def _typed(values: list, kind: str) -> pl.Series:
    """Latest values (as stored: int, float, bool or str) as one column of read type ``kind``,
    converted as the fold converts them (Polars casts)."""
    if kind == "str":
        return pl.Series([v if v is None or isinstance(v, str) else pl.Series([v]).cast(pl.String).item()
                          for v in values], dtype=pl.String)
    if kind == "float":
        return pl.Series([v if v is None else float(v) for v in values], dtype=pl.Float64)
    return pl.Series(values, dtype=DTYPES[kind])
