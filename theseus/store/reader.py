"""Reading segments into Polars and folding records into nodes."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import fsspec
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from theseus.store import fs as rootfs
from theseus.store.schema import SEGMENT_SCHEMA
from theseus.store.segments import CorruptSegment, partition_of

HIVE = {"name": pl.String, "nonce": pl.String}
NODE_COLUMNS = ["node", "name", "nonce", "seq", "parent"]
WRITTEN = "_written"


def empty_frame() -> pl.LazyFrame:
    """A log frame with no rows and the full column set."""
    frame = pl.from_arrow(SEGMENT_SCHEMA.empty_table())
    return frame.with_columns(pl.lit(None, pl.String).alias("name"), pl.lit(None, pl.String).alias("nonce")).lazy()


def scan(fs: fsspec.AbstractFileSystem, paths: list[str]) -> pl.LazyFrame:
    """A lazy frame over segment ``paths`` with ``name`` and ``nonce`` from the partition folders.

    Local roots are scanned by Polars directly (predicate and projection
    pushdown); object-store roots are fetched with fsspec in parallel.
    """
    if not paths:
        return empty_frame()
    if rootfs.is_local(fs):
        return pl.scan_parquet(paths, hive_partitioning=True, hive_schema=HIVE)
    with ThreadPoolExecutor(min(32, len(paths))) as pool:
        tables = list(pool.map(lambda p: _read_remote(fs, p), paths))
    return pl.from_arrow(pa.concat_tables(tables)).lazy()


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


def find_corrupt(fs: fsspec.AbstractFileSystem, paths: list[str]) -> CorruptSegment | None:
    """The first segment of ``paths`` that does not read whole, as an error naming it."""
    for path in paths:
        try:
            with fs.open(path, "rb") as f:
                pq.read_table(f)
        except FileNotFoundError:
            continue
        except Exception as e:
            return CorruptSegment(f"corrupt or truncated segment {rootfs.url(fs, path)}: {e}")
    return None


def value_expr(kind: str) -> pl.Expr:
    """The value column of a key of read type ``kind`` (int folds into float, anything into str)."""
    if kind == "float":
        return pl.coalesce(pl.col("float"), pl.col("int").cast(pl.Float64))
    if kind == "str":
        return pl.coalesce(
            pl.col("str"), pl.col("float").cast(pl.String), pl.col("int").cast(pl.String), pl.col("bool").cast(pl.String)
        )
    return pl.col(kind)


def latest_value(key: str, kind: str) -> pl.Expr:
    """Inside a ``group_by``: the group's latest value of ``key`` (by write stamp, then writer id)."""
    mine = pl.col("key") == key
    return value_expr(kind).filter(mine).sort_by(pl.col("stamp").filter(mine), pl.col("writer").filter(mine)).last().alias(key)


def latest_records(frame: pl.LazyFrame) -> pl.LazyFrame:
    """Per (node, key), only the record with the highest write stamp (ties: the highest writer id).

    Folding is idempotent: duplicated records (a compaction seen half-way) change nothing.
    """
    group = ["node", "key"]
    latest = frame.filter(pl.col("stamp") == pl.col("stamp").max().over(group))
    return latest.filter(pl.col("writer") == pl.col("writer").max().over(group)).unique(subset=group, keep="any")


def fold(frame: pl.LazyFrame, keys: dict[str, str], anchor: str | None = None, written: bool = False) -> pl.LazyFrame:
    """One row per node: its identity and, per key, the latest value (by write stamp).

    With ``anchor`` (a key every wanted node must hold) the nodes are those
    holding it, which avoids grouping every record of the scope; ``written``
    adds the node's last write stamp (for ``latest()``).
    """
    records = latest_records(frame.filter(pl.col("key").is_in(list(keys))) if keys else frame.head(0))
    identity = ["node", "name", "nonce", "seq", "parent"]
    if anchor is not None:
        nodes = records.filter(pl.col("key") == anchor).select(*identity, value_expr(keys[anchor]).alias(anchor))
        rest = [k for k in keys if k != anchor]
    else:
        nodes = frame.group_by("node").agg(
            pl.col("name").first(), pl.col("nonce").first(), pl.col("seq").first(), pl.col("parent").drop_nulls().first()
        )
        rest = list(keys)
    for key in rest:
        column = records.filter(pl.col("key") == key).select("node", value_expr(keys[key]).alias(key))
        nodes = nodes.join(column, on="node", how="left")
    if written:
        nodes = nodes.join(frame.group_by("node").agg(pl.col("stamp").max().alias(WRITTEN)), on="node", how="left")
    return nodes
