"""Compaction: merge a run's small segments into one, crash-safely.

The merged segment is published before the old ones are removed, and it holds
the very same records (ids, stamps, writers), so a reader that sees old and
new segments at once folds to the same answer, and a crash at any instant
leaves a readable log.

Compactions may race (two people, a UI and a cron job) without locks: a merge
keeps one copy of identical records, so a record republished by an earlier
compaction is stored once again, never twice; and the merged segment is named
from the segments it read, so two compactions of the same segments publish one
file (the second gives way).
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from theseus.store import fs as rootfs
from theseus.store import latest as latest_records
from theseus.store.fold import key_batches
from theseus.store.index import Index
from theseus.store.listing import partition_of, run_dir
from theseus.store.schema import INDEX_METADATA, KEYS_METADATA, SEGMENT_SCHEMA
from theseus.store.segments import (
    SMALL_SEGMENT_ROWS,
    CorruptSegment,
    footer_metadata,
    index_of,
    segment_name,
    segment_schema,
    segment_writer,
    sort_records,
)

MERGE_BATCH_ROWS = 1 << 20  # a run larger than this is merged a few keys at a time, its segments read per batch


def compact_run(index: Index, paths: list[str]) -> str | None:
    """Merge ``paths`` (segments of one run) into one new segment; returns its path.

    Rows are ordered by key, seq, stamp and writer, with the block index of
    ``segments`` in the footer, like a writer's segment. Each segment is held with its
    strings dictionary-encoded and its block index computed once; the merge decodes them
    once per batch of keys, merges key by key and writes each batch as one Parquet write.
    A run of more than ``MERGE_BATCH_ROWS`` rows is not held whole: its segments are read
    once to learn their keys, then once per batch of keys holding about that many rows,
    keeping only that batch's rows.
    """
    if len(paths) < 2:
        return None
    held, read, shapes = [], [], []
    for path in paths:
        segment = _read_segment(index, path)
        if segment is not None:  # None: retired by a concurrent compaction, its records live in the merged file
            shapes.append(segment.shape)
            read.append(path)
            if sum(s.rows for s in shapes) <= MERGE_BATCH_ROWS:
                held.append(segment)
            else:
                held = None  # too large to hold: re-read per batch of keys below
    if len(read) < 2:
        return None
    name, nonce = partition_of(paths[0])
    stamp = max(s.stamp for s in shapes)
    # the same segments read give the same name and bytes: a racing compaction of them publishes nothing new
    inputs = hashlib.sha256("\n".join(p.rsplit("/", 1)[-1] for p in read).encode()).hexdigest()[:16]
    target = f"{run_dir(index.path(), name, nonce)}/{segment_name(stamp, inputs, 0, prefix='c')}"
    if held is not None:
        data = _merge(shapes, lambda keys: held)
    else:
        def batch(keys: set[str]) -> list[_Held]:
            found = []
            for path in read:
                segment = _read_segment(index, path)
                if segment is None:  # retired since the first read: give way to the compaction that merged it
                    raise FileNotFoundError(path)
                found.append(segment.only(keys))
            return found
        try:
            data = _merge(shapes, batch)
        except FileNotFoundError:
            return None
        finally:
            pa.default_memory_pool().release_unused()  # the batches' buffers back to the system, not kept for reuse
    try:
        rootfs.publish(index.fs, target, data, exclusive=True)
    except FileExistsError:
        return None  # published by a concurrent compaction of the same segments, which retires them
    for path in read:
        try:
            index.fs.rm_file(path)
        except FileNotFoundError:
            pass
    index.footers.forget(paths)
    return target


class _Shape(NamedTuple):
    """What a merge needs to know of a segment before holding its rows: rows per key, highest
    stamp, and the columns without nulls."""

    keys: dict[str, int]
    stamp: int
    filled: frozenset[str]

    @property
    def rows(self) -> int:
        return sum(self.keys.values())


class _Held(NamedTuple):
    """A segment's rows in :func:`sort_records` order and their block index (``index_of``'s blocks,
    computed from the rows once)."""

    table: pa.Table
    blocks: dict[str, list]
    stamps: list[int] | None

    @staticmethod
    def of(table: pa.Table) -> _Held:
        _, index = index_of(table)
        return _Held(table, index["blocks"], index["stamps"])

    @property
    def shape(self) -> _Shape:
        return _Shape({k: b[1] - b[0] for k, b in self.blocks.items()}, self.stamps[1] if self.stamps else 0,
                      frozenset(c for c in SEGMENT_SCHEMA.names if self.table.column(c).null_count == 0))

    def only(self, keys: set[str]) -> _Held:
        """The rows of ``keys`` alone (blocks renumbered), copied so the rest of the table can be freed."""
        parts, blocks, at = [], {}, 0
        for key, (start, stop, *rest) in self.blocks.items():
            if key in keys:
                parts.append(self.table.slice(start, stop - start))
                blocks[key] = [at, at + stop - start, *rest]
                at += stop - start
        if not parts:
            return _Held(self.table.slice(0, 0), {}, self.stamps)
        table = pa.concat_tables(parts).take(pa.array(range(at), pa.int64()))
        return _Held(table, blocks, self.stamps)


_STRINGS = ["node", "parent", "writer", "key", "str"]


def _read_segment(index: Index, path: str) -> _Held | None:
    """A whole segment in :func:`sort_records` order, its string columns dictionary-encoded
    (None when it is gone); a damaged one is a CorruptSegment naming it."""
    try:
        rootfs.check_inside(index.fs, index.path(), path)  # it is deleted below: never through a link
        rootfs.check_regular(index.fs, path)  # a FIFO or device would block the read or never end
        with index.fs.open(path, "rb") as f:
            # a flipped byte is refused, never republished
            table = pq.ParquetFile(f, page_checksum_verification=True, read_dictionary=_STRINGS).read()
    except FileNotFoundError:
        return None
    except Exception as e:
        raise CorruptSegment(f"cannot compact: corrupt or truncated segment "
                             f"{rootfs.url(index.fs, path)}: {e}") from e
    metadata = table.schema.metadata or {}
    if KEYS_METADATA not in metadata:
        raise CorruptSegment(f"cannot compact: {rootfs.url(index.fs, path)} has no theseus footer")
    table = table.replace_schema_metadata(None)
    if INDEX_METADATA not in metadata:  # no block index (optional in the format): order the rows here
        table = sort_records(table.cast(_plain(table.schema)))
    # the index is computed from the rows, never taken from the footer: a forged one must not mislabel records
    return _Held.of(table)


def _plain(schema: pa.Schema) -> pa.Schema:
    """``schema`` with its dictionary columns as plain strings (nullability kept)."""
    return pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in schema])


def merge_tables(tables: list[pa.Table]) -> pa.Buffer:
    """One segment's bytes holding every record of ``tables`` (each in :func:`sort_records` order),
    identical records once, written key by key.

    >>> from theseus.store.footers import parse_footer
    >>> rows = lambda seqs, stamp: pa.table({"node": ["n"] * len(seqs), "seq": seqs, "parent": [None] * len(seqs),
    ...     "stamp": [stamp] * len(seqs), "writer": ["w"] * len(seqs), "key": ["a"] * len(seqs),
    ...     "float": [1.0] * len(seqs), "int": [None] * len(seqs), "bool": [None] * len(seqs),
    ...     "str": [None] * len(seqs)}, schema=SEGMENT_SCHEMA)
    >>> data = merge_tables([rows([0, 1], 5), rows([1, 2], 6), rows([0, 1], 5)])
    >>> parse_footer(pq.read_metadata(pa.BufferReader(data)), "s").blocks["a"]
    Block(start=0, stop=4, seq_min=0, seq_max=2, distinct=3, columns=('float',))
    """
    held = [_Held.of(t) for t in tables]
    return _merge([h.shape for h in held], lambda keys: held)


def _merge(shapes: list[_Shape], batch) -> pa.Buffer:
    """One segment's bytes from segments of ``shapes``; ``batch(keys)`` gives them as :class:`_Held`
    holding at least the rows of ``keys``, asked for batches of about ``MERGE_BATCH_ROWS`` rows,
    keys in order. Each batch is one Parquet write (row groups of at most 2**20 rows)."""
    rows = sum(s.rows for s in shapes)
    filled = set.intersection(*(set(s.filled) for s in shapes)) if shapes else set()
    large = rows >= SMALL_SEGMENT_ROWS
    schema = segment_schema(SEGMENT_SCHEMA, large, filled)
    sizes: dict[str, int] = {}
    for shape in shapes:
        for key, n in shape.keys.items():
            sizes[key] = sizes.get(key, 0) + n
    sink = pa.BufferOutputStream()
    keys, blocks, stamps, latest, written = {}, {}, [], {}, 0
    with segment_writer(sink, schema, large) as w:
        for wanted in key_batches(sizes, MERGE_BATCH_ROWS):
            by_key: dict[str, list[pa.Table]] = {}
            for held in batch(set(wanted)):
                table = held.table.cast(_plain(held.table.schema)).cast(SEGMENT_SCHEMA)  # decoded once, not per key
                for key, (start, stop, *_) in held.blocks.items():
                    if key in wanted:
                        by_key.setdefault(key, []).append(table.slice(start, stop - start))
            out = pa.concat_tables([_merge_key(by_key.pop(key)) for key in wanted])  # chunked, not copied
            found, index = index_of(out)
            for key, (start, stop, *rest) in index["blocks"].items():
                blocks[key] = [written + start, written + stop, *rest]
            keys.update(found)
            latest.update(latest_records.of_table(out, index["blocks"]))  # run summaries read these, not rows
            stamps += index["stamps"] or []
            w.write_table(pa.Table.from_arrays(out.columns, schema=schema), row_group_size=1 << 20)
            written += out.num_rows
        w.add_key_value_metadata(footer_metadata(keys, {"stamps": [min(stamps), max(stamps)] if stamps else None,
                                                        "blocks": blocks, "latest": latest}))
    return sink.getvalue()


def _merge_key(parts: list[pa.Table]) -> pa.Table:
    """The rows of one key from several segments (plain strings), in (seq, stamp, writer) order, identical
    records once."""
    merged = pa.concat_tables(parts)  # chunked: written part by part, never copied into one
    ranges = [(p["seq"][0].as_py(), p["seq"][-1].as_py()) for p in parts]
    if all(a[1] < b[0] for a, b in zip(ranges, ranges[1:])):
        return merged  # the segments hold consecutive seq ranges: already in order, nothing repeated
    return unique_records(sort_records(merged.combine_chunks()))


def unique_records(table: pa.Table) -> pa.Table:
    """A table in :func:`sort_records` order with each identical record kept once (NaN equals NaN).

    A record is its node, key, write stamp, writer and value; a writer never stamps two
    records alike, so identical rows are copies that concurrent compactions both merged.
    Only a table where two neighbours share key, seq, stamp and writer can hold copies:
    any other is returned as is, without grouping every row.

    >>> t = pa.table({"key": ["a", "a", "a"], "seq": [0, 0, 1], "stamp": [1, 1, 2], "writer": ["w", "w", "w"],
    ...               "float": [float("nan"), float("nan"), None]})
    >>> unique_records(t).to_pydict()["float"]
    [nan, None]
    """
    import pyarrow.compute as pc  # here: it loads pyarrow's compute kernels, which opening a root does not need
    if table.num_rows < 2:
        return table
    ties = None
    for column in ("key", "seq", "stamp", "writer"):
        values = table[column]
        same = pc.equal(values.slice(1), values.slice(0, len(values) - 1))
        ties = same if ties is None else pc.and_(ties, same)
    if not pc.any(ties).as_py():
        return table
    return sort_records(table.group_by(table.column_names, use_threads=False).aggregate([]).select(table.column_names))


def compact(index: Index, name: str = "*", nonce: str = "*", min_segments: int = 2) -> dict[str, int]:
    """Compact every run with at least ``min_segments`` segments; returns ``{run dir: merged count}``."""
    index.view()  # read first: its record of the log folders spares listing those unchanged since
    runs = index.runs(name, nonce)
    done = {}
    for (run_name, run_nonce), paths in sorted(runs.items()):
        if len(paths) >= max(2, min_segments) and compact_run(index, paths):
            done[f"{run_name}/{run_nonce}"] = len(paths)
    return done
