"""Reading the raw log into Polars (run summaries, ``theseus ls``); the cursor folds through ``fold``."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import fsspec
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from theseus.store import fs as rootfs
from theseus.store.listing import partition_of
from theseus.store.recency import latest_of
from theseus.store.schema import SEGMENT_SCHEMA
from theseus.store.segments import CorruptSegment

HIVE = {"name": pl.String, "nonce": pl.String}


def empty_frame() -> pl.LazyFrame:
    """A log frame with no rows and the full column set."""
    frame = pl.from_arrow(SEGMENT_SCHEMA.empty_table())
    return frame.with_columns(pl.lit(None, pl.String).alias("name"), pl.lit(None, pl.String).alias("nonce")).lazy()


def scan(fs: fsspec.AbstractFileSystem, paths: list[str]) -> pl.LazyFrame:
    """A lazy frame over segment ``paths`` with ``name`` and ``nonce`` from the partition folders.

    Local roots are scanned by Polars directly (predicate and projection
    pushdown), each path checked first to be a regular file (a FIFO named like a segment
    would block the scan forever: it is a CorruptSegment naming it); object-store roots are
    fetched with fsspec in parallel.

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp() + "/log/name=a/nonce=abcdef"; os.makedirs(folder)
    >>> os.mkfifo(folder + "/s-1.parquet")
    >>> scan(rootfs.open_root("/")[0], [folder + "/s-1.parquet"])
    Traceback (most recent call last):
    ...
    theseus.store.segments.CorruptSegment: not a segment: .../s-1.parquet is a FIFO (named pipe), not a regular file...
    """
    if not paths:
        return empty_frame()
    if rootfs.is_local(fs):
        for path in paths:
            try:
                rootfs.check_regular(fs, path)
            except rootfs.NotPlainFile as e:
                raise CorruptSegment(f"not a segment: {e}") from e
        return pl.scan_parquet(paths, hive_partitioning=True, hive_schema=HIVE)
    with ThreadPoolExecutor(min(32, len(paths))) as pool:
        tables = list(pool.map(lambda p: _read_remote(fs, p), paths))
    # segments may differ only in which always-filled columns they store as required
    return pl.from_arrow(pa.concat_tables(tables, promote_options="permissive")).lazy()


def _read_remote(fs: fsspec.AbstractFileSystem, path: str) -> pa.Table:
    data = fs.cat_file(path)
    try:
        table = pq.read_table(io.BytesIO(data))
    except Exception as e:
        raise CorruptSegment(f"corrupt or truncated segment {rootfs.url(fs, path)}: {e}") from e
    name, nonce = partition_of(path)
    table = table.replace_schema_metadata(None)
    n = table.num_rows
    return table.append_column("name", pa.array([name] * n, pa.string())).append_column(
        "nonce", pa.array([nonce] * n, pa.string())
    )


def value_expr(kind: str) -> pl.Expr:
    """The value column of a key of read type ``kind`` (int folds into float, anything into str)."""
    if kind == "float":
        return pl.coalesce(pl.col("float"), pl.col("int").cast(pl.Float64))
    if kind == "str":
        return pl.coalesce(
            pl.col("str"), pl.col("float").cast(pl.String), pl.col("int").cast(pl.String),
            pl.col("bool").cast(pl.String)
        )
    return pl.col(kind)


def latest_value(key: str, kind: str) -> pl.Expr:
    """Inside a ``group_by``: the group's latest value of ``key`` (``recency``: by write stamp, then writer id).

    >>> frame = pl.DataFrame({"node": ["n", "n"], "key": ["a", "a"], "stamp": [2, 1], "writer": ["w", "w"],
    ...                       "float": [0.5, 9.0], "int": [None, None]})
    >>> frame.group_by("node").agg(latest_value("a", "float"))["a"].to_list()
    [0.5]
    """
    return latest_of(value_expr(kind), pl.col("key") == key).alias(key)
