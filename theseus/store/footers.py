"""Segment footers: read (one ranged read on an object store), parsed, checked before any reader
trusts them, and cached by path (segments are immutable, so a cached footer never goes stale).

A footer that fails a check is a ``CorruptSegment`` naming the file; :func:`check_segment` (audits)
also checks a footer against every row it describes.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import fsspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from theseus.errors import BadInput
from theseus.store import fs as rootfs
from theseus.store import latest as latest_records
from theseus.store import tail
from theseus.store.latest import Latest
from theseus.store.schema import INDEX_METADATA, KEYS_METADATA, SEGMENT_SCHEMA, TYPES, merge_types
from theseus.store.segments import (
    LARGE_SCHEMA,
    Block,
    CorruptSegment,
    Footer,
    index_of,
    read_columns,
    union_keys,
)

_LOCAL_FILES = pafs.LocalFileSystem()  # opens a local path as is (no URI parsing per file)
_TYPE_SET = frozenset(TYPES)


def read_footer(fs: fsspec.AbstractFileSystem, path: str) -> Footer:
    """The footer of one segment (reads the footer only); a bad file is a CorruptSegment naming it."""
    try:
        rootfs.check_regular(fs, path)  # a FIFO or device named like a segment would block or never end
        if rootfs.is_local(fs):
            with _LOCAL_FILES.open_input_file(path) as f:
                meta = pq.read_metadata(f)
        else:
            meta = read_tail_metadata(fs, path)
    except FileNotFoundError:
        raise
    except rootfs.NotPlainFile as e:
        raise CorruptSegment(f"not a segment: {e}") from e
    except Exception as e:
        raise CorruptSegment(f"corrupt or truncated segment {rootfs.url(fs, path)}: {e}") from e
    return parse_footer(meta, rootfs.url(fs, path))


def read_tail_metadata(fs: fsspec.AbstractFileSystem, path: str, guess: int = 1 << 16) -> pq.FileMetaData:
    """A Parquet file's metadata from one ranged read of its last ``guess`` bytes (an object store's
    one request, without asking the file's size first), and a second only when its footer is longer.

    >>> import tempfile
    >>> from theseus.store.segments import encode
    >>> fs, root = rootfs.open_root(tempfile.mkdtemp())
    >>> fs.pipe_file(f"{root}/t.parquet", encode(SEGMENT_SCHEMA.empty_table(), {}, {"stamps": None, "blocks": {}}))
    >>> read_tail_metadata(fs, f"{root}/t.parquet", guess=64).num_rows
    0
    """
    tail = fs.cat_file(path, start=-guess)
    if len(tail) < 12 or tail[-4:] != b"PAR1":
        raise BadInput(f"not a Parquet file ({len(tail)} bytes read from its end, no PAR1 at the end)")
    length = int.from_bytes(tail[-8:-4], "little") + 8
    if length > len(tail):
        if len(tail) < guess:  # the whole file was read: its footer cannot be longer than it
            raise BadInput(f"its footer claims {length} bytes, more than the file's {len(tail)}")
        tail = fs.cat_file(path, start=-length)
    return pq.read_metadata(pa.BufferReader(tail))


def parse_footer(meta: pq.FileMetaData, url: str) -> Footer:
    """A segment's footer from its parsed Parquet metadata, checked against the file before any
    reader trusts it; anything wrong is a CorruptSegment naming ``url``.

    The checks use only the metadata already parsed (no data is read): the columns and their
    types, the keys' types, and the block index (ints, tiling the file's rows once, seq ranges
    that hold their distinct counts). The fold checks each block's seqs against the rows it
    reads; :func:`check_segment` (audit) checks the whole index against every row. Row-group
    statistics are not consulted: pyarrow aborts the process on some corrupt ones.

    >>> from theseus.store.segments import encode
    >>> t = pa.table({"node": ["n0"], "seq": [0], "parent": [None], "stamp": [5], "writer": ["w"], "key": ["a"],
    ...               "float": [1.0], "int": [None], "bool": [None], "str": [None]}, schema=SEGMENT_SCHEMA)
    >>> keys, index = index_of(t)
    >>> parse_footer(pq.read_metadata(pa.BufferReader(encode(t, keys, index))), "s.parquet").blocks["a"]
    Block(start=0, stop=1, seq_min=0, seq_max=0, distinct=1, columns=('float',))
    >>> index["blocks"]["a"][1] = 10**12  # a forged row count
    >>> parse_footer(pq.read_metadata(pa.BufferReader(encode(t, keys, index))), "s.parquet")
    Traceback (most recent call last):
    ...
    theseus.store.segments.CorruptSegment: segment s.parquet has a bad theseus footer: key 'a': rows 0:1000000000000 outside the file's 1 rows
    """  # noqa: E501 - a doctest's expected output, printed on one line
    kv = meta.metadata or {}
    try:
        schema = meta.schema.to_arrow_schema()
        if not (schema.equals(SEGMENT_SCHEMA) or schema.equals(LARGE_SCHEMA)):  # the writer's two layouts
            for f in SEGMENT_SCHEMA:
                if schema.get_field_index(f.name) < 0 or schema.field(f.name).type != f.type:
                    raise BadInput(f"column {f.name!r} is missing or not {f.type}")
    except ValueError as e:
        raise CorruptSegment(f"segment {url} has a bad theseus footer: {e}") from e
    keys, blocks, stamps, latest = parse_index(kv.get(KEYS_METADATA), kv.get(INDEX_METADATA), url, meta.num_rows)
    return Footer(keys, blocks, stamps, meta.num_rows, meta, latest)


def parse_index(raw_keys: bytes | str | None, raw_index: bytes | str | None, url: str,
                rows: int | None) -> tuple[dict[str, str], dict[str, Block] | None, tuple[int, int] | None,
                                           dict[str, Latest] | None]:
    """``(keys, blocks, stamps, latest)`` of a segment from its two theseus footer entries (JSON
    texts), checked: types, block shapes, latest records, and, given the file's ``rows``, that the
    blocks tile them; anything wrong is a CorruptSegment naming ``url``.

    >>> parse_index('{"a": "float"}', '{"stamps": [5, 5], "blocks": {"a": [0, 1, 0, 0, 1, ["float"]]}}', "s", 1)[1:]
    ({'a': Block(start=0, stop=1, seq_min=0, seq_max=0, distinct=1, columns=('float',))}, (5, 5), None)
    """
    if raw_keys is None:
        raise CorruptSegment(f"segment {url} has no '{KEYS_METADATA.decode()}' footer: not a theseus segment")
    try:
        keys = orjson.loads(raw_keys)
        index = orjson.loads(raw_index) if raw_index is not None else None
    except ValueError as e:
        raise CorruptSegment(f"segment {url} has a malformed theseus footer (not JSON): {e}") from e
    try:
        blocks, stamps = _check_index(keys, index, rows)
        latest = index.get("latest") if blocks is not None else None
        if latest is not None:
            latest = latest_records.parse(latest, blocks, stamps)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        raise CorruptSegment(f"segment {url} has a bad theseus footer: {e}") from e
    return keys, blocks, stamps, latest


def _check_index(keys, index, rows: int | None) -> tuple[dict[str, Block] | None, tuple[int, int] | None]:
    """The blocks and stamp range of a footer, after checking them (against the file's ``rows``
    where known). Every footer of a root is checked on a cold read: the checks stay lean."""
    if not isinstance(keys, dict) or not all(type(k) is str and t in _TYPE_SET for k, t in keys.items()):
        raise BadInput(f"the keys are not {{key: one of {', '.join(TYPES)}}}")
    if index is None:  # no block index (optional in the format): readers index the rows
        return None, None
    blocks, covered = {}, []
    for key, b in index["blocks"].items():
        if not (type(b) is list and len(b) == 6 and type(b[0]) is int and type(b[1]) is int and type(b[2]) is int
                and type(b[3]) is int and type(b[4]) is int and type(b[5]) is list
                and all(c in _TYPE_SET for c in b[5])):
            raise BadInput(f"key {key!r}: block {str(b)[:80]} "
                             "is not [start, stop, seq_min, seq_max, distinct, [columns]]")
        start, stop, lo, hi, distinct, columns = b
        if not 0 <= start < stop or (rows is not None and stop > rows):
            raise BadInput(f"key {key!r}: rows {start}:{stop} outside the file's {rows} rows")
        if not 0 <= lo <= hi or not 1 <= distinct <= min(stop - start, hi - lo + 1):
            raise BadInput(f"key {key!r}: seqs {lo}..{hi} with {distinct} distinct in {stop - start} rows")
        columns = tuple(columns)
        if columns and key in keys and (columns[0] if len(columns) == 1 else _merged(columns)) != keys[key]:
            raise BadInput(f"key {key!r}: declared {keys[key]} but stored in {', '.join(columns)}")
        blocks[key] = Block(start, stop, lo, hi, distinct, columns)
        covered.append((start, stop))
    # every row is in exactly one block: the blocks tile 0..rows
    covered.sort()
    top = 0
    for start, stop in covered:
        if start != top:
            raise BadInput(f"the blocks do not cover the file's {rows} rows once each")
        top = stop
    if rows is not None and top != rows:
        raise BadInput(f"the blocks do not cover the file's {rows} rows once each")
    if not keys.keys() <= blocks.keys():
        raise BadInput(f"keys {sorted(k for k in keys if k not in blocks)[:5]} have no block")
    stamps = index["stamps"]
    if not covered and stamps is None:
        return blocks, None
    if not (type(stamps) is list and len(stamps) == 2 and type(stamps[0]) is int and type(stamps[1]) is int
            and stamps[0] <= stamps[1]):
        raise BadInput(f"stamps {str(stamps)[:80]} are not [min, max]")
    return blocks, (stamps[0], stamps[1])


def _merged(columns: tuple[str, ...]) -> str:
    kind = columns[0]
    for c in columns[1:]:
        kind = merge_types(kind, c)
    return kind


def read_keys(fs: fsspec.AbstractFileSystem, path: str) -> dict[str, str]:
    """The ``{key: type}`` footer of one segment (reads the footer only)."""
    return read_footer(fs, path).keys


def check_segment(fs: fsspec.AbstractFileSystem, path: str) -> pa.Table:
    """Every row of a segment, read the way readers read it and checked through: its footer
    (:func:`parse_footer`), every page against its checksum, and its block index against the
    rows (each key's rows where the index says, in (seq, stamp, writer) order). Anything wrong
    is a CorruptSegment naming the file. For ``theseus audit``: it reads the whole file.

    >>> from theseus.store.listing import list_segments
    >>> from theseus.store.store import _doc_store
    >>> store, n = _doc_store()
    >>> check_segment(store.fs, list_segments(store.fs, store.path())[0])["float"].to_pylist()
    [1.5]
    """
    footer = read_footer(fs, path)
    url = rootfs.url(fs, path)
    table = read_columns(fs, path, footer, None)
    if footer.blocks is None:
        return table
    found, index = index_of(table)
    blocks = {k: Block(*b[:5], tuple(b[5])) for k, b in index["blocks"].items()}
    stamps = tuple(index["stamps"]) if index["stamps"] else None
    for key, block in footer.blocks.items():
        rows = table.slice(block.start, block.stop - block.start).select(["seq", "stamp", "writer"])
        if blocks.get(key) != block or not _ascending(rows):
            raise CorruptSegment(f"segment {url} has a bad theseus footer: its index says {block} for key {key!r}, "
                                 f"but the rows are {blocks.get(key)}"
                                 + ("" if blocks.get(key) != block else " out of order"))
    if len(blocks) != len(footer.blocks) or found != footer.keys or stamps != footer.stamps:
        raise CorruptSegment(f"segment {url} has a bad theseus footer: its keys or stamps differ from its rows'")
    if footer.latest is not None:
        truth = latest_records.of_table(table, index["blocks"])
        for key, latest in footer.latest.items():
            if key not in truth or not latest_records.same(latest, latest_records.parse({key: truth[key]}, blocks,
                                                                                         stamps)[key]):
                raise CorruptSegment(f"segment {url} has a bad theseus footer: its latest record of key {key!r} "
                                     f"is {tuple(latest)}, but the rows' is {truth.get(key)}")
    return table


def _ascending(rows: pa.Table) -> bool:
    """True when ``rows`` are in (seq, stamp, writer) order."""
    import pyarrow.compute as pc  # here: it loads pyarrow's compute kernels, which opening a root does not need
    order = pc.sort_indices(rows, [(c, "ascending") for c in rows.column_names]).to_numpy()
    return bool((order == np.arange(len(order))).all())


class FooterCache:
    """Footers by path; segments are immutable, so a cached footer never goes stale."""

    def __init__(self, fs: fsspec.AbstractFileSystem):
        self.fs = fs
        self._footers: dict[str, Footer] = {}
        self._keys: dict[str, dict[str, str]] = {}  # the keys entry alone, where only that was read
        self._light: dict[str, Footer] = {}  # the theseus entries alone (indexes())

    def keys_of(self, paths: list[str]) -> list[dict[str, str]]:
        """The ``{key: type}`` footer of each of ``paths``: the parsed footer's where cached, else
        (local roots) the file's key-value metadata alone, read by Polars: a fraction of the cost
        of parsing and checking the whole footer, for a query that needs only the keys of many
        segments. A file that cannot be read so is read whole (:func:`read_footer` names what is wrong).

        >>> from theseus.store.listing import list_segments
        >>> from theseus.store.store import _doc_store
        >>> store, n = _doc_store()
        >>> FooterCache(store.fs).keys_of(list_segments(store.fs, store.path()))
        [{'loss': 'float'}]
        """
        if not rootfs.is_local(self.fs):
            return [f.keys for f in self.footers(paths)]
        found = []
        for path in paths:
            keys = self._footers[path].keys if path in self._footers else self._keys.get(path)
            if keys is None:
                entries = _read_entries(path)
                try:
                    keys = json.loads(entries[0]) if entries else None
                except ValueError:
                    keys = None
                if not (isinstance(keys, dict) and all(type(k) is str and t in _TYPE_SET for k, t in keys.items())):
                    keys = self.footers([path])[0].keys
                self._keys[path] = keys
            found.append(keys)
        return found

    def indexes(self, paths: list[str]) -> list[Footer]:
        """What the footers of ``paths`` say a segment holds (keys, blocks, stamps), for a summary of
        many runs: the parsed footers where cached, else (local roots) the theseus entries alone,
        read by Polars and checked (:func:`parse_index`) but not against the file's rows: such a
        footer (``rows`` and ``meta`` None) is never used to read the segment.

        >>> from theseus.store.listing import list_segments
        >>> from theseus.store.store import _doc_store
        >>> store, n = _doc_store()
        >>> [f.blocks["loss"].seq_max for f in FooterCache(store.fs).indexes(list_segments(store.fs, store.path()))]
        [0]
        """
        if not rootfs.is_local(self.fs):
            return self.footers(paths)
        found = []
        for path in paths:
            footer = self._footers.get(path) or self._light.get(path)
            if footer is None:
                footer = _light_footer(path, rootfs.url(self.fs, path)) or self.footers([path])[0]
                self._light[path] = footer
            found.append(footer)
        return found

    def footers(self, paths: list[str]) -> list[Footer]:
        """The footers of ``paths``, read in parallel where not cached."""
        missing = [p for p in paths if p not in self._footers]
        if missing:
            workers = 1 if len(missing) < 8 else (8 if rootfs.is_local(self.fs) else 32)
            if workers == 1:
                found = [read_footer(self.fs, p) for p in missing]
            else:
                with ThreadPoolExecutor(workers) as pool:
                    found = list(pool.map(lambda p: read_footer(self.fs, p), missing))
            self._footers.update(zip(missing, found))
        return [self._footers[p] for p in paths]

    def keys(self, paths: list[str]) -> dict[str, str]:
        """Union ``{key: type}`` over ``paths`` (int and float merge to float)."""
        return union_keys(f.keys for f in self.footers(paths))

    def forget(self, paths: list[str]) -> None:
        """Drop entries for retired segments."""
        for p in paths:
            self._footers.pop(p, None)
            self._keys.pop(p, None)
            self._light.pop(p, None)


def _light_footer(path: str, url: str) -> Footer | None:
    """What a local segment's theseus footer entries say, read alone (:func:`_read_entries`) and
    checked by :func:`parse_index`; None when they cannot be read so or fail the checks (the
    caller reads the whole footer, whose errors name the problem)."""
    entries = _read_entries(path)
    if entries is None:
        return None
    try:
        keys, blocks, stamps, latest = parse_index(*entries, url, None)
    except CorruptSegment:
        return None
    return Footer(keys, blocks, stamps, None, None, latest)


def _read_entries(path: str) -> tuple[bytes, bytes | None] | None:
    """A local segment's theseus footer entries (keys, index: JSON texts), read alone from the file's
    end (``theseus.store.tail``; None when they cannot be read so: the caller reads the whole
    footer, whose errors name the problem)."""
    footer = tail.footer_bytes(path)
    keys = None if footer is None else tail.entry(footer, KEYS_METADATA)
    if keys is None:
        return None
    index = tail.entry(footer, INDEX_METADATA)
    if index is None and INDEX_METADATA in footer:  # there, but not where one read finds it
        return None
    return keys, index
