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

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from theseus.store import fs as rootfs
from theseus.store.index import Index
from theseus.store.schema import KEYS_METADATA, SEGMENT_SCHEMA
from theseus.store.segments import CorruptSegment, encode, index_of, partition_of, run_dir, segment_name, sort_records


def compact_run(index: Index, paths: list[str]) -> str | None:
    """Merge ``paths`` (segments of one run) into one new segment; returns its path.

    Rows are ordered by key, seq, stamp and writer, with the block index of
    ``segments`` in the footer, like a writer's segment.
    """
    if len(paths) < 2:
        return None
    tables, read = [], []
    for path in paths:
        try:
            rootfs.check_inside(index.fs, index.path(), path)  # it is deleted below: never through a link
            rootfs.check_regular(index.fs, path)  # a FIFO or device would block the read or never end
            with index.fs.open(path, "rb") as f:
                # a flipped byte is refused, never republished
                table = pq.read_table(f, page_checksum_verification=True)
        except FileNotFoundError:
            continue  # retired by a concurrent compaction: its records live in the merged file
        except Exception as e:
            raise CorruptSegment(f"cannot compact: corrupt or truncated segment "
                                 f"{rootfs.url(index.fs, path)}: {e}") from e
        if KEYS_METADATA not in (table.schema.metadata or {}):
            raise CorruptSegment(f"cannot compact: {rootfs.url(index.fs, path)} has no theseus footer")
        tables.append(table.replace_schema_metadata(None).cast(SEGMENT_SCHEMA))
        read.append(path)
    if len(tables) < 2:
        return None
    merged = unique_records(sort_records(pa.concat_tables(tables)))
    keys, blocks = index_of(merged)
    name, nonce = partition_of(paths[0])
    stamp = max(pc.max(t["stamp"]).as_py() or 0 for t in tables)
    # the same segments read give the same name and bytes: a racing compaction of them publishes nothing new
    inputs = hashlib.sha256("\n".join(p.rsplit("/", 1)[-1] for p in read).encode()).hexdigest()[:16]
    target = f"{run_dir(index.path(), name, nonce)}/{segment_name(stamp, inputs, 0, prefix='c')}"
    try:
        rootfs.publish(index.fs, target, encode(merged, keys, blocks), exclusive=True)
    except FileExistsError:
        return None  # published by a concurrent compaction of the same segments, which retires them
    for path in read:
        try:
            index.fs.rm_file(path)
        except FileNotFoundError:
            pass
    index.footers.forget(paths)
    return target


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
    runs = index.runs(name, nonce)
    done = {}
    for (run_name, run_nonce), paths in sorted(runs.items()):
        if len(paths) >= max(2, min_segments) and compact_run(index, paths):
            done[f"{run_name}/{run_nonce}"] = len(paths)
    return done
