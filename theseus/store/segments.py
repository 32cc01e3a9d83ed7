"""Segments: the immutable Parquet files of the log, their names, listing and footers.

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

Segments are found by listing ``log/name=*/nonce=*/`` on every query. On local
filesystems whose folder ctimes move with every entry added or removed (ext4, xfs,
btrfs, tmpfs...), :class:`Listings` reuses a folder's listing while its ctime is
unchanged (one ``stat`` instead of a listing), and a view records the ctimes of the
folders it saw (:func:`record_listings`) for Stores that have listed nothing yet.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, TypeVar

import fsspec
import numpy as np
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from theseus.store import fs as rootfs
from theseus.store import latest as latest_records
from theseus.store import tail
from theseus.store.latest import Latest
from theseus.store.layout import LOG
from theseus.store.node import FULL_NAME_PATTERN, NONCE_PATTERN
from theseus.store.schema import INDEX_METADATA, KEYS_METADATA, SEGMENT_SCHEMA, TYPES, merge_types

_LOCAL_FILES = pafs.LocalFileSystem()  # opens a local path as is (no URI parsing per file)
SMALL_SEGMENT_ROWS = 4096
_DICTIONARY = ["node", "parent", "writer", "key", "str"]
_STATISTICS = ["seq", "stamp"]
_DELTA = {"seq": "DELTA_BINARY_PACKED", "stamp": "DELTA_BINARY_PACKED"}  # ascending runs: a few bits a row
# columns every record fills: stored as required in large segments (no definition levels to encode)
_REQUIRED = frozenset({"node", "seq", "stamp", "writer", "key"})
_LARGE_SCHEMA = pa.schema([f.with_nullable(f.name not in _REQUIRED) for f in SEGMENT_SCHEMA])  # every one filled
_TYPE_SET = frozenset(TYPES)


def run_dir(root: str, name: str, nonce: str) -> str:
    """The folder of one run's segments.

    >>> run_dir("/r", "a.b.c", "949e88")
    '/r/log/name=a.b.c/nonce=949e88'
    """
    return f"{root}/{LOG}/name={name}/nonce={nonce}"


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


def list_segments(fs: fsspec.AbstractFileSystem, root: str, name: str = "*", nonce: str = "*",
                  listings: Listings | None = None) -> list[str]:
    """Published segment paths under ``root`` for a name/nonce glob (temporaries never match).

    >>> fs, root = rootfs.open_root("/tmp/theseus-empty-doc")
    >>> list_segments(fs, root)
    []
    """
    return sorted(p for paths in list_runs(fs, root, name, nonce, listings).values() for p in paths)


def list_runs(fs: fsspec.AbstractFileSystem, root: str, name: str = "*", nonce: str = "*",
              listings: Listings | None = None) -> dict[tuple[str, str], list[str]]:
    """Published segments by run, ``{(name, nonce): [path, ...]}``, runs and paths sorted.

    ``listings`` (local roots) reuses folder listings its ctime check proves current.

    >>> fs, root = rootfs.open_root("/tmp/theseus-empty-doc")
    >>> list_runs(fs, root)
    {}
    """
    if not rootfs.is_local(fs):
        try:
            found = fs.glob(f"{root}/{LOG}/name={name}/nonce={nonce}/*.parquet")
        except FileNotFoundError:
            return {}
        return by_run([p for p in found if not os.path.basename(p).startswith(".")
                       and partition_ok("name=", p.split("/")[-3]) and partition_ok("nonce=", p.split("/")[-2])])
    listings = listings or Listings(None)
    now = time.time_ns()  # before any folder is stat'ed
    log = f"{root}/{LOG}"
    runs = {}
    literal = not is_glob(nonce)
    access, exists, probe = os.access, os.F_OK, f"nonce={nonce}"
    for name_dir in _matching(listings, now, log, "name=", name, not is_glob(name)):
        base = f"{log}/{name_dir}/"
        if literal:  # one nonce: probe each name's folder for it (the common point query)
            nonce_dirs = [probe] if access(base + probe, exists) else []
        else:
            nonce_dirs = _matching(listings, now, base[:-1], "nonce=", nonce, False)
        for nonce_dir in nonce_dirs:
            files = listings.get(base + nonce_dir, _published, now)
            if files:
                runs[(name_dir[5:], nonce_dir[6:])] = list(files)
    return runs


def _published(folder: str, names: list[str]) -> tuple[str, ...]:
    """The segment paths among a run folder's entries, sorted (temporaries never match)."""
    return tuple(f"{folder}/{f}" for f in sorted(names) if f[0] != "." and f.endswith(".parquet"))


def is_glob(pattern: str) -> bool:
    """True when a name or nonce pattern matches more than itself.

    >>> is_glob("a.b.*"), is_glob("949e88")
    (True, False)
    """
    return any(c in pattern for c in "*?[")


def _matching(listings: Listings, now: int, folder: str, prefix: str, glob: str, literal: bool) -> list[str]:
    """Entries ``prefix + value`` of ``folder`` whose value matches ``glob``, sorted."""
    if literal:
        return [prefix + glob] if os.access(f"{folder}/{prefix}{glob}", os.F_OK) else []
    entries = listings.get(folder, _prefixed[prefix], now)
    if glob == "*":
        return entries
    return [e for e in entries if fnmatch.fnmatchcase(e[len(prefix):], glob)]


def partition_ok(prefix: str, entry: str) -> bool:
    """True for a ``name=<full run name>`` or ``nonce=<nonce>`` folder, as writers make them; readers
    skip any other folder of the log (no run can have its records), and ``theseus audit`` reports it.

    >>> partition_ok("name=", "name=a.b.c"), partition_ok("name=", "name="), partition_ok("nonce=", "nonce=../x")
    (True, False, False)
    """
    return _PARTITIONS[prefix].fullmatch(entry) is not None


_PARTITIONS = {"name=": re.compile(f"name={FULL_NAME_PATTERN}"), "nonce=": re.compile(f"nonce={NONCE_PATTERN}")}
_prefixed = {p: (lambda folder, names, match=_PARTITIONS[p].fullmatch: tuple(sorted([e for e in names if match(e)])))
             for p in ("name=", "nonce=")}

# Kernel filesystems whose folder ctime changes on every entry added or removed and cannot be
# set from user space. FUSE (gcsfuse reports fixed times), NFS (cached attributes) and other
# network filesystems are not listed: there every query lists.
CTIME_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "f2fs", "zfs", "overlay"})
LISTING_MARGIN_NS = 1_000_000_000  # a ctime proves a listing only when older than this at listing time
_filesystem_types: dict[int, str] = {}


class Listings:
    """Folder listings of a local root, reused while the folder's ctime proves them current.

    A folder's ctime is set by the kernel whenever an entry is added, removed or renamed
    (and by ``utime``/``chmod``); no call sets it to a chosen value (``rsync -a`` and
    ``touch -d`` set mtime, and bump ctime to now; a folder made anew gets a new one). So a
    listing stays current exactly as long as the folder's ctime is unchanged, provided later
    changes cannot get the same ctime: the folder is stat'ed *before* it is listed, and the
    listing is kept only
    when that ctime was already ``LISTING_MARGIN_NS`` older than the clock then (kernel
    timestamps come from a coarse clock, a few ms behind; a change after the stat gets a
    later one). Folders changed in the last second are listed on every call. ``seed``
    (``{folder: (ctime, prepare, value)}`` from the view's record of the folders it saw,
    same rule; see :class:`RecordedListings`) answers for folders not listed yet.
    Only on filesystems in ``CTIME_FILESYSTEMS``; elsewhere (or with ``root`` None) every
    call lists.

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> listings = Listings(root)
    >>> open(f"{root}/a", "w").close()
    >>> listings.get(root, lambda folder, names: sorted(names))
    ['a']
    >>> open(f"{root}/b", "w").close()  # a change within the second is seen
    >>> listings.get(root, lambda folder, names: sorted(names))
    ['a', 'b']
    """

    def __init__(self, root: str | None):
        self.root = root
        self.seed = None  # a callable returning {folder: (ctime, prepare, value)}, merged on first use
        self._enabled: bool | None = None if root is not None else False
        self._known: dict[str, tuple[int, object, object]] = {}  # folder -> (ctime, prepare, value)

    @property
    def enabled(self) -> bool:
        """Whether ctimes prove listings here (decided once the root exists)."""
        if self._enabled is None:
            self._enabled = ctime_proves_listings(self.root)
        return bool(self._enabled)

    def listed(self, folder: str, prepare, ctime: int):
        """``prepare``'s value of the folder's listing when one was kept at ``ctime`` (else None).

        >>> import tempfile
        >>> root = tempfile.mkdtemp()
        >>> Listings(root).listed(root, sorted, 0) is None
        True
        """
        known = self._known.get(folder)
        return known[2] if known is not None and known[0] == ctime and known[1] is prepare else None

    def get(self, folder: str, prepare, now: int | None = None):
        """``prepare(folder, names)`` of the folder's entries (an empty list for a missing folder).

        ``now``: ``time.time_ns()`` taken before this call (default: now).
        """
        if not (self._enabled or self.enabled):
            return prepare(folder, _scandir(folder))
        now = time.time_ns() if now is None else now
        try:
            ctime = os.stat(folder).st_ctime_ns
        except (FileNotFoundError, NotADirectoryError):
            return prepare(folder, [])
        known = self._known.get(folder)
        if known is None and self.seed is not None:
            seed, self.seed = self.seed, None
            for path, entry in seed().items():
                self._known.setdefault(path, entry)
            known = self._known.get(folder)
        if known is not None and known[0] == ctime and known[1] is prepare:
            return known[2]
        value = prepare(folder, _scandir(folder))
        if ctime < now - LISTING_MARGIN_NS:
            self._known[folder] = (ctime, prepare, value)
        else:
            self._known.pop(folder, None)
        return value


def record_listings(listings: Listings, root: str, runs: dict[tuple[str, str], list[str]],
                    own: list[tuple[str, str]]) -> dict | None:
    """The ctimes that prove the log folders list exactly ``runs`` (for a view's footer): of the
    log folder, of every run's name folder, and of the run folders of ``own`` (the view's runs).

    ``{"log": ctime, "names": {name: ctime}, "runs": [ctime per run of own]}``, each None where
    the folder lists something else or changed within ``LISTING_MARGIN_NS``; None when
    ctimes prove nothing on this filesystem. :class:`RecordedListings` answers from it. A folder
    whose ctime is that of a listing ``listings`` holds is not listed again.
    """
    if not listings.enabled:
        return None
    now = time.time_ns()  # before any stat
    log = f"{root}/{LOG}"
    nonces: dict[str, list[str]] = {}
    for name, nonce in runs:
        nonces.setdefault(name, []).append(nonce)

    def proven(folder: str, prepare, expected) -> int | None:
        try:
            ctime = os.stat(folder).st_ctime_ns
        except OSError:
            return None
        if ctime >= now - LISTING_MARGIN_NS:
            return None
        found = listings.listed(folder, prepare, ctime)
        return ctime if (found if found is not None else prepare(folder, _scandir(folder))) == expected else None

    return {
        "log": proven(log, _prefixed["name="], tuple(sorted(f"name={n}" for n in nonces))),
        "names": {n: proven(f"{log}/name={n}", _prefixed["nonce="], tuple(sorted(f"nonce={x}" for x in v)))
                  for n, v in nonces.items()},
        "runs": [proven(run_dir(root, *run), _published, tuple(runs[run])) for run in own],
    }


def recorded_runs(listings: Listings, root: str, record: dict | None, runs: list[tuple[str, str]],
                  segments: list[list[str]], name: str = "*",
                  nonce: str = "*") -> RecordedRuns | None:
    """What :func:`list_runs` returns for ``name``/``nonce``, taken from a view's record of the
    log folders (:func:`record_listings`; ``runs`` and ``segments``: the view's runs by number
    and their segment file names) when one stat per folder proves the record still holds: the
    log folder, each matching name's folder and each matching run's folder have the ctimes
    recorded. None when one does not (a folder changed, or was not proven when recorded) or
    ctimes prove nothing here: then list. One pass of stats, none of the per-folder caching
    of :class:`Listings`: a query over a compacted root of 1,000 runs is mostly these stats.

    >>> import tempfile
    >>> recorded_runs(Listings(tempfile.mkdtemp()), "/r", None, [], [])  # no record: list
    """
    if record is None or record["log"] is None or not listings.enabled:
        return None
    log, stat, names, ctimes = f"{root}/{LOG}", os.stat, record["names"], record["runs"]
    every_name, every_nonce = name == "*", nonce == "*"
    found, last, wanted = {}, None, False
    try:
        if stat(log).st_ctime_ns != record["log"]:  # a name was added or removed
            return None
        for number, (run_name, run_nonce) in enumerate(runs):
            if run_name != last:  # runs are sorted by name: each name's folder is stat'ed once
                last, wanted = run_name, every_name or fnmatch.fnmatchcase(run_name, name)
                if wanted and (names.get(run_name) is None
                               or stat(f"{log}/name={run_name}").st_ctime_ns != names[run_name]):
                    return None  # a nonce was added or removed under this name
            if not wanted or not (every_nonce or fnmatch.fnmatchcase(run_nonce, nonce)):
                continue
            if ctimes[number] is None or stat(f"{log}/name={run_name}/nonce={run_nonce}").st_ctime_ns != ctimes[number]:
                return None  # a segment was added or removed in this run
            found[(run_name, run_nonce)] = number
    except OSError:
        return None
    return RecordedRuns(root, found, segments)


class RecordedRuns(Mapping):
    """:func:`recorded_runs`' answer, ``{(name, nonce): [segment path, ...]}``: a run's paths are
    spelled when asked for, since a query the view answers reads none of them.

    >>> runs = RecordedRuns("/r", {("a", "1"): 0}, [["s-1.parquet"]])
    >>> dict(runs)
    {('a', '1'): ['/r/log/name=a/nonce=1/s-1.parquet']}
    """

    def __init__(self, root: str, numbers: dict[tuple[str, str], int], segments: list[list[str]]):
        self._root, self._numbers, self._segments = root, numbers, segments

    def __getitem__(self, run: tuple[str, str]) -> list[str]:
        folder = run_dir(self._root, *run)
        return [f"{folder}/{f}" for f in self._segments[self._numbers[run]]]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._numbers)

    def __len__(self) -> int:
        return len(self._numbers)

    def __contains__(self, run: object) -> bool:
        return run in self._numbers


class RecordedListings:
    """A :class:`Listings` seed from :func:`record_listings`' record: called, it returns
    ``{folder: (ctime, prepare, value)}`` for each log folder as recorded, for the caller
    to trust only while the folder's ctime is unchanged.

    ``runs`` maps each recorded run to its number, ``segments`` (per number) its file names.
    """

    def __init__(self, root: str, record: dict, runs: dict[tuple[str, str], int], segments: list[list[str]]):
        self.root, self.record, self.runs, self.segments = root, record, runs, segments

    def __call__(self) -> dict[str, tuple[int, object, tuple[str, ...]]]:
        log, record, table = f"{self.root}/{LOG}", self.record, {}
        by_name: dict[str, list[str]] = {}
        for (name, nonce), number in self.runs.items():
            by_name.setdefault(name, []).append(f"nonce={nonce}")
            ctime = record["runs"][number]
            if ctime is not None:
                folder = f"{log}/name={name}/nonce={nonce}"
                table[folder] = (ctime, _published, tuple([f"{folder}/{f}" for f in self.segments[number]]))
        for name, nonces in by_name.items():
            ctime = record["names"].get(name)
            if ctime is not None:
                table[f"{log}/name={name}"] = (ctime, _prefixed["nonce="], tuple(sorted(nonces)))
        if record["log"] is not None:
            table[log] = (record["log"], _prefixed["name="], tuple(sorted([f"name={n}" for n in by_name])))
        return table


def ctime_proves_listings(path: str) -> bool | None:
    """True when ``path`` is on a filesystem whose folder ctimes prove listings current
    (None while ``path`` does not exist).

    >>> ctime_proves_listings("/proc"), ctime_proves_listings("/no/such/folder")
    (False, None)
    """
    try:
        device = os.stat(path).st_dev
    except OSError:
        return None
    if device not in _filesystem_types:
        _filesystem_types[device] = _filesystem_type(os.path.realpath(path))
    return _filesystem_types[device] in CTIME_FILESYSTEMS


def _filesystem_type(path: str) -> str:
    """The type of the mount holding ``path``, from /proc/self/mountinfo ("" when unknown)."""
    best, kind = "", ""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                mount = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # "\\040" is a space
                fstype = fields[fields.index("-") + 1]
                inside = path == mount or path.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best):
                    best, kind = mount, fstype
    except (OSError, ValueError, IndexError):
        return ""
    return kind


def _scandir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []


def partition_of(path: str) -> tuple[str, str]:
    """``(name, nonce)`` of a segment path.

    >>> partition_of("/r/log/name=a.b.c/nonce=949e88/s-1.parquet")
    ('a.b.c', '949e88')
    """
    parts = path.rstrip("/").split("/")
    return parts[-3].removeprefix("name="), parts[-2].removeprefix("nonce=")


def by_run(paths: list[str]) -> dict[tuple[str, str], list[str]]:
    """Segment paths grouped by run, ``{(name, nonce): [path, ...]}`` (sorted).

    >>> by_run(["/r/log/name=a.b.c/nonce=949e88/s-2.parquet", "/r/log/name=a.b.c/nonce=949e88/s-1.parquet"])
    {('a.b.c', '949e88'): ['/r/log/name=a.b.c/nonce=949e88/s-1.parquet', '/r/log/name=a.b.c/nonce=949e88/s-2.parquet']}
    """
    runs: dict[tuple[str, str], list[str]] = {}
    for path in sorted(paths):
        runs.setdefault(partition_of(path), []).append(path)
    return dict(sorted(runs.items()))


class CorruptSegment(ValueError):
    """A segment that cannot be read; the message names the file."""


VANISHED_RETRIES = 30  # fresh listings tried when compactions keep retiring segments mid-read
T = TypeVar("T")


def vanished(error: BaseException) -> bool:
    """True when ``error`` says a listed file is gone (retired by a compaction), not that one is bad.

    >>> vanished(FileNotFoundError("s-1.parquet")), vanished(CorruptSegment("s-1.parquet: truncated"))
    (True, False)
    """
    if isinstance(error, CorruptSegment):
        return False
    if isinstance(error, FileNotFoundError):
        return True
    text = str(error).lower()
    return isinstance(error, (pl.exceptions.PolarsError, OSError)) and ("no such file" in text or "not found" in text)


def retry_vanished(read: Callable[[], T]) -> T:
    """``read()``, called again while it fails because a segment it listed has vanished.

    The one rule for every reader that lists segments and then reads them: a concurrent
    compaction publishes the merged segment before it retires the old ones, so ``read``
    (which must list afresh on each call) finds every record on a later try.

    >>> tries = []
    >>> def read():
    ...     tries.append(1)
    ...     if len(tries) < 3:
    ...         raise FileNotFoundError("log/name=a/nonce=b/s-1.parquet")
    ...     return len(tries)
    >>> retry_vanished(read)
    3
    """
    for attempt in range(VANISHED_RETRIES):
        try:
            return read()
        except Exception as e:
            if not vanished(e) or attempt == VANISHED_RETRIES - 1:
                raise
            time.sleep(0.002 * attempt)  # a compaction between listing and read: let it finish
    raise AssertionError("unreachable")


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
    >>> fs, root = rootfs.open_root(tempfile.mkdtemp())
    >>> fs.pipe_file(f"{root}/t.parquet", encode(SEGMENT_SCHEMA.empty_table(), {}, {"stamps": None, "blocks": {}}))
    >>> read_tail_metadata(fs, f"{root}/t.parquet", guess=64).num_rows
    0
    """
    tail = fs.cat_file(path, start=-guess)
    if len(tail) < 12 or tail[-4:] != b"PAR1":
        raise ValueError(f"not a Parquet file ({len(tail)} bytes read from its end, no PAR1 at the end)")
    length = int.from_bytes(tail[-8:-4], "little") + 8
    if length > len(tail):
        if len(tail) < guess:  # the whole file was read: its footer cannot be longer than it
            raise ValueError(f"its footer claims {length} bytes, more than the file's {len(tail)}")
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
        if not (schema.equals(SEGMENT_SCHEMA) or schema.equals(_LARGE_SCHEMA)):  # the writer's two layouts
            for f in SEGMENT_SCHEMA:
                if schema.get_field_index(f.name) < 0 or schema.field(f.name).type != f.type:
                    raise ValueError(f"column {f.name!r} is missing or not {f.type}")
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
        raise ValueError(f"the keys are not {{key: one of {', '.join(TYPES)}}}")
    if index is None:  # no block index (optional in the format): readers index the rows
        return None, None
    blocks, covered = {}, []
    for key, b in index["blocks"].items():
        if not (type(b) is list and len(b) == 6 and type(b[0]) is int and type(b[1]) is int and type(b[2]) is int
                and type(b[3]) is int and type(b[4]) is int and type(b[5]) is list
                and all(c in _TYPE_SET for c in b[5])):
            raise ValueError(f"key {key!r}: block {str(b)[:80]} "
                             "is not [start, stop, seq_min, seq_max, distinct, [columns]]")
        start, stop, lo, hi, distinct, columns = b
        if not 0 <= start < stop or (rows is not None and stop > rows):
            raise ValueError(f"key {key!r}: rows {start}:{stop} outside the file's {rows} rows")
        if not 0 <= lo <= hi or not 1 <= distinct <= min(stop - start, hi - lo + 1):
            raise ValueError(f"key {key!r}: seqs {lo}..{hi} with {distinct} distinct in {stop - start} rows")
        columns = tuple(columns)
        if columns and key in keys and (columns[0] if len(columns) == 1 else _merged(columns)) != keys[key]:
            raise ValueError(f"key {key!r}: declared {keys[key]} but stored in {', '.join(columns)}")
        blocks[key] = Block(start, stop, lo, hi, distinct, columns)
        covered.append((start, stop))
    # every row is in exactly one block: the blocks tile 0..rows
    covered.sort()
    top = 0
    for start, stop in covered:
        if start != top:
            raise ValueError(f"the blocks do not cover the file's {rows} rows once each")
        top = stop
    if rows is not None and top != rows:
        raise ValueError(f"the blocks do not cover the file's {rows} rows once each")
    if not keys.keys() <= blocks.keys():
        raise ValueError(f"keys {sorted(k for k in keys if k not in blocks)[:5]} have no block")
    stamps = index["stamps"]
    if not covered and stamps is None:
        return blocks, None
    if not (type(stamps) is list and len(stamps) == 2 and type(stamps[0]) is int and type(stamps[1]) is int
            and stamps[0] <= stamps[1]):
        raise ValueError(f"stamps {str(stamps)[:80]} are not [min, max]")
    return blocks, (stamps[0], stamps[1])


def _merged(columns: tuple[str, ...]) -> str:
    kind = columns[0]
    for c in columns[1:]:
        kind = merge_types(kind, c)
    return kind


def read_keys(fs: fsspec.AbstractFileSystem, path: str) -> dict[str, str]:
    """The ``{key: type}`` footer of one segment (reads the footer only)."""
    return read_footer(fs, path).keys


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


def check_segment(fs: fsspec.AbstractFileSystem, path: str) -> pa.Table:
    """Every row of a segment, read the way readers read it and checked through: its footer
    (:func:`parse_footer`), every page against its checksum, and its block index against the
    rows (each key's rows where the index says, in (seq, stamp, writer) order). Anything wrong
    is a CorruptSegment naming the file. For ``theseus audit``: it reads the whole file.

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
