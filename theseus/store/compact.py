"""Compaction: merge a run's small segments into one, crash-safely.

The merged segment is published before the old ones are removed, and it holds
the very same records (ids, stamps, writers), so a reader that sees old and
new segments at once folds to the same answer, and a crash at any instant
leaves a readable log.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from theseus.store import fs as rootfs
from theseus.store.schema import KEYS_METADATA, SEGMENT_SCHEMA
from theseus.store.segments import CorruptSegment, encode, index_of, partition_of, run_dir, segment_name, sort_records

if TYPE_CHECKING:
    from theseus.store.store import Store


def compact_run(store: Store, paths: list[str]) -> str | None:
    """Merge ``paths`` (segments of one run) into one new segment; returns its path.

    Rows are ordered by key, seq, stamp and writer, with the block index of
    ``segments`` in the footer, like a writer's segment.
    """
    if len(paths) < 2:
        return None
    tables = []
    for path in paths:
        try:
            with store.fs.open(path, "rb") as f:
                table = pq.read_table(f, page_checksum_verification=True)  # a flipped byte is refused, never republished
        except FileNotFoundError:
            continue  # retired by a concurrent compaction: its records live in the merged file
        except Exception as e:
            raise CorruptSegment(f"cannot compact: corrupt or truncated segment {rootfs.url(store.fs, path)}: {e}") from e
        if KEYS_METADATA not in (table.schema.metadata or {}):
            raise CorruptSegment(f"cannot compact: {rootfs.url(store.fs, path)} has no theseus footer")
        tables.append(table.replace_schema_metadata(None).cast(SEGMENT_SCHEMA))
    if len(tables) < 2:
        return None
    merged = sort_records(pa.concat_tables(tables))
    keys, index = index_of(merged)
    name, nonce = partition_of(paths[0])
    stamp = max(pc.max(t["stamp"]).as_py() or 0 for t in tables)
    target = f"{run_dir(store.path(), name, nonce)}/{segment_name(stamp, secrets.token_hex(4), 0, prefix='c')}"
    rootfs.publish(store.fs, target, encode(merged, keys, index))
    for path in paths:
        try:
            store.fs.rm_file(path)
        except FileNotFoundError:
            pass
    store._footers.forget(paths)
    return target


def compact(store: Store, name: str = "*", nonce: str = "*", min_segments: int = 2) -> dict[str, int]:
    """Compact every run with at least ``min_segments`` segments; returns ``{run dir: merged count}``."""
    runs = store._runs(name, nonce)
    done = {}
    for (run_name, run_nonce), paths in sorted(runs.items()):
        if len(paths) >= max(2, min_segments) and compact_run(store, paths):
            done[f"{run_name}/{run_nonce}"] = len(paths)
    return done
