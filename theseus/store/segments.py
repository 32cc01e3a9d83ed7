"""Segments: the immutable Parquet files of the log, their format, names and footer.

Every segment has the columns of ``schema.SEGMENT_SCHEMA`` and two footer entries:

- ``theseus.keys``: ``{key: type}`` of the keys it holds;
- ``theseus.index``: ``{"stamps": [min, max], "blocks": {key: [start, stop, seq_min,
  seq_max, distinct, [columns]]}}``. The rows of one key are contiguous (``start:stop``)
  and ordered by (seq, stamp, writer); ``distinct`` counts their seqs and ``columns``
  names the value columns they use. Readers fold a run from these blocks without
  grouping or deduplicating whole segments (``theseus.store.fold``). The writer (and a
  compaction's merge) adds ``"latest": {key: [stamp, writer, seq, column, value]}``, each key's most recent record
  (``theseus.store.latest``), from which run summaries take their values without reading rows.

The index is optional: a segment without ``theseus.index`` (written by hand or by
another tool) is still read, its blocks computed in memory; so is ``latest`` (segments
written before it have none: their blocks are read instead).

Footers are parsed, checked and cached by ``theseus.store.footers``; segments are found by
``theseus.store.listing``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import NamedTuple

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from theseus.errors import CorruptData
from theseus.store import fs as rootfs
from theseus.store.latest import Latest
from theseus.store.schema import INDEX_METADATA, KEYS_METADATA, SEGMENT_SCHEMA, TYPES, merge_types

_LOCAL_FILES = pafs.LocalFileSystem()  # opens a local path as is (no URI parsing per file)
SMALL_SEGMENT_ROWS = 4096
_DICTIONARY = ["node", "parent", "writer", "key", "str"]
_STATISTICS = ["seq", "stamp"]
_DELTA = {"seq": "DELTA_BINARY_PACKED", "stamp": "DELTA_BINARY_PACKED"}  # ascending runs: a few bits a row
# columns every record fills: stored as required in large segments (no definition levels to encode)
_REQUIRED = frozenset({"node", "seq", "stamp", "writer", "key"})
LARGE_SCHEMA = pa.schema([f.with_nullable(f.name not in _REQUIRED) for f in SEGMENT_SCHEMA])  # every one filled


def segment_name(stamp: int, writer: str, counter: int, prefix: str = "s") -> str:
    """A unique, sortable segment file name (no file is ever rewritten).

    >>> segment_name(5, "ab12cd34", 3)
    's-0000000000000000005-ab12cd34-000003.parquet'
    """
    return f"{prefix}-{stamp:019d}-{writer}-{counter:06d}.parquet"


class Block(NamedTuple):
    """Where one key's rows are in a segment: ``start:stop``, ordered by (seq, stamp, writer)."""

    start: int
    stop: int
    seq_min: int
    seq_max: int
    distinct: int
    columns: tuple[str, ...]

    @property
    def dense(self) -> bool:
        """True when the block holds every seq from seq_min to seq_max, each once or more."""
        return self.distinct == self.seq_max - self.seq_min + 1


def encode(table: pa.Table, keys: dict[str, str], index: dict, codec: str = "zstd") -> pa.Buffer:
    """Serialise one segment (a bytes-like Arrow buffer): the fixed columns plus its keys and
    block index in the footer.

    Columns may be dictionary arrays (the writer's node ids); they are stored as plain
    strings, so every segment reads back with the same column types (a large segment stores
    the columns every record fills as required, which readers ignore). ``codec`` compresses the
    columns other than float values: ``zstd`` (compaction: written once, kept) or ``lz4``
    (a live writer's flush: faster on the node ids' dictionary, a little larger).
    """
    large = table.num_rows >= SMALL_SEGMENT_ROWS
    schema = segment_schema(table.schema.remove_metadata(), large,
                            {c for c in _REQUIRED if table.column(c).null_count == 0})
    if large:
        table = pa.Table.from_arrays(table.columns, schema=schema)
    sink = pa.BufferOutputStream()  # grows without the copies io.BytesIO makes
    with segment_writer(sink, schema, large, codec) as w:
        w.write_table(table, row_group_size=1 << 20)
        w.add_key_value_metadata(footer_metadata(keys, index))
    return sink.getvalue()


def segment_schema(schema: pa.Schema, large: bool, filled: set[str]) -> pa.Schema:
    """The schema a segment is written with: in a large segment, a column every record fills
    (``filled``) is written as required: readers see the same values and types (Polars, pandas
    and theseus ignore the flag), and the writer skips a definition level per row; a commit's
    one-row segment would only pay for the new schema.

    >>> segment_schema(SEGMENT_SCHEMA, True, {"seq"}).field("seq").nullable
    False
    """
    if not large:
        return schema
    return pa.schema([f.with_nullable(False) if f.name in _REQUIRED and f.name in filled else f for f in schema])


def segment_writer(sink, schema: pa.Schema, large: bool, codec: str = "zstd") -> pq.ParquetWriter:
    """The Parquet writer of a segment (``large``: at least SMALL_SEGMENT_ROWS rows).

    >>> sink = pa.BufferOutputStream()
    >>> with segment_writer(sink, SEGMENT_SCHEMA, False) as w:
    ...     w.write_table(SEGMENT_SCHEMA.empty_table())
    >>> pq.read_metadata(pa.BufferReader(sink.getvalue())).num_rows
    0
    """
    # a codec's setup costs more than it saves on a small live segment; float values hardly compress
    compression = {c: codec if large and c != "float" else "none" for c in schema.names}
    # dictionary pages and statistics only where they pay: hashing 80k random floats or
    # comparing 80k node ids costs more than all the rest of a flush, and min/max keys of a
    # one-row-group segment prune nothing. Seqs and stamps ascend within each key's block,
    # so delta encoding stores them in a few bits and encodes them faster.
    # One write batch per column chunk: the default 1,024-row batches cost a call each.
    # Every page carries a CRC, so a flipped byte is an error, not a changed value
    return pq.ParquetWriter(sink, schema, compression=compression, store_schema=False, write_batch_size=1 << 20,
                            use_dictionary=_DICTIONARY, write_statistics=_STATISTICS, column_encoding=_DELTA,
                            write_page_checksum=True)


def footer_metadata(keys: dict[str, str], index: dict) -> dict[str, str]:
    """A segment's theseus footer entries: its keys and its block index.

    >>> sorted(footer_metadata({"a": "float"}, {"stamps": None, "blocks": {}}))
    ['theseus.index', 'theseus.keys']
    """
    return {KEYS_METADATA.decode(): json.dumps(keys, sort_keys=True),
            INDEX_METADATA.decode(): json.dumps(index, separators=(",", ":"))}


def sort_records(table: pa.Table) -> pa.Table:
    """Records ordered as a segment stores them: by key, then seq, stamp and writer."""
    import pyarrow.compute as pc  # here: it loads pyarrow's compute kernels, which opening a root does not need
    order = pc.sort_indices(table, [("key", "ascending"), ("seq", "ascending"), ("stamp", "ascending"),
                                    ("writer", "ascending")])
    return table.take(order)


def index_of(table: pa.Table) -> tuple[dict[str, str], dict]:
    """``(keys, index)`` footers of a table already in :func:`sort_records` order.

    >>> t = pa.table({"key": ["a", "a", "b"], "seq": [0, 1, 0], "stamp": [5, 6, 7], "float": [1.0, 2.0, None],
    ...               "int": [None, None, 3], "bool": pa.nulls(3, pa.bool_()), "str": pa.nulls(3, pa.string())})
    >>> index_of(t)
    ({'a': 'float', 'b': 'int'}, {'stamps': [5, 7], 'blocks': {'a': [0, 2, 0, 1, 2, ['float']], 'b': [2, 3, 0, 0, 1, ['int']]}})
    """  # noqa: E501 - a doctest's expected output, printed on one line
    import pyarrow.compute as pc  # here: it loads pyarrow's compute kernels, which opening a root does not need
    keys: dict[str, str] = {}
    blocks = {}
    if table.num_rows:
        codes = table["key"].combine_chunks().dictionary_encode()
        idx = codes.indices.to_numpy()
        bounds = np.concatenate([[0], np.flatnonzero(idx[1:] != idx[:-1]) + 1, [len(idx)]])
        seq = table["seq"].to_numpy()
        for start, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            key = codes.dictionary[idx[start]].as_py()
            used = [t for t in TYPES if table[t].slice(start, stop - start).null_count < stop - start]
            s = seq[start:stop]
            blocks[key] = [start, stop, int(s[0]), int(s[-1]), int(np.count_nonzero(s[1:] != s[:-1]) + 1), used]
            for t in used:
                keys[key] = merge_types(keys[key], t) if key in keys else t
    stamps = table["stamp"]
    index = {"stamps": [pc.min(stamps).as_py(), pc.max(stamps).as_py()] if table.num_rows else None, "blocks": blocks}
    return keys, index


@dataclass(frozen=True)
class Footer:
    """What a segment's footer says: its keys and types, its blocks, its stamp range, and (where
    its writer recorded them) each key's latest record."""

    keys: dict[str, str]
    blocks: dict[str, Block] | None
    stamps: tuple[int, int] | None
    rows: int | None  # None: read from the theseus entries alone (FooterCache.indexes), never used to read rows
    meta: pq.FileMetaData | None = field(default=None, compare=False, repr=False)
    latest: dict[str, Latest] | None = None  # None: not recorded (segments of older writers)


class CorruptSegment(CorruptData):
    """A segment that cannot be read; the message names the file."""


def read_columns(fs: fsspec.AbstractFileSystem, path: str, footer: Footer, columns: list[str] | None,
                 groups: list[int] | None = None) -> pa.Table:
    """Some columns (None: all) of some row groups (None: all) of a segment, reusing its parsed footer."""
    try:
        if rootfs.is_local(fs):
            source = _LOCAL_FILES.open_input_file(path)
        else:
            source = pa.BufferReader(fs.cat_file(path))
        with source:
            # one column chunk read at a time (no pre-buffering): less to copy; pages checked
            # against their CRCs (segments written before theseus wrote CRCs have none to check)
            file = pq.ParquetFile(source, metadata=footer.meta, pre_buffer=False, page_checksum_verification=True)
            if groups is None or len(groups) == file.metadata.num_row_groups:
                return file.read(columns=columns, use_threads=False)
            return file.read_row_groups(groups, columns=columns, use_threads=False)
    except FileNotFoundError:
        raise
    except Exception as e:
        if not rootfs.is_local(fs) or os.path.exists(path):
            raise CorruptSegment(f"corrupt or truncated segment {rootfs.url(fs, path)}: {e}") from e
        raise FileNotFoundError(path) from e


def union_keys(key_sets) -> dict[str, str]:
    """Merge ``{key: type}`` dicts (int and float merge to float, other mixes to str).

    >>> union_keys([{"a": "int"}, {"a": "float", "b": "str"}])
    {'a': 'float', 'b': 'str'}
    """
    union: dict[str, str] = {}
    for keys in {id(k): k for k in key_sets}.values():  # many runs share one dict
        for k, t in keys.items():
            union[k] = merge_types(union[k], t) if k in union else t
    return union


def empty_table() -> pa.Table:
    """A segment table with no rows."""
    return SEGMENT_SCHEMA.empty_table()
