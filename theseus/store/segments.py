"""Segments: the immutable Parquet files of the log, their names, listing and footers."""

from __future__ import annotations

import io
import json
import os
from concurrent.futures import ThreadPoolExecutor

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from theseus.store import fs as rootfs
from theseus.store.schema import KEYS_METADATA, SEGMENT_SCHEMA, merge_types

LOG = "log"
SMALL_SEGMENT_ROWS = 4096


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


def encode(columns: dict[str, pa.Array], keys: dict[str, str]) -> bytes:
    """Serialise one segment: the fixed schema plus a footer naming its keys and types."""
    table = pa.Table.from_arrays([columns[f.name] for f in SEGMENT_SCHEMA], schema=SEGMENT_SCHEMA)
    table = table.replace_schema_metadata({KEYS_METADATA: json.dumps(keys, sort_keys=True).encode()})
    sink = io.BytesIO()
    # zstd's setup costs more than it saves on a small live segment; compaction compresses
    compression = "zstd" if table.num_rows >= SMALL_SEGMENT_ROWS else "none"
    pq.write_table(table, sink, compression=compression, row_group_size=1 << 20)
    return sink.getvalue()


def list_segments(fs: fsspec.AbstractFileSystem, root: str, name: str = "*", nonce: str = "*") -> list[str]:
    """Published segment paths under ``root`` for a name/nonce glob (temporaries never match).

    >>> fs, root = rootfs.open_root("/tmp/theseus-empty-doc")
    >>> list_segments(fs, root)
    []
    """
    if rootfs.is_local(fs):
        return sorted(_list_local(root, name, nonce))
    pattern = f"{root}/{LOG}/name={name}/nonce={nonce}/*.parquet"
    try:
        found = fs.glob(pattern)
    except FileNotFoundError:
        return []
    return sorted(p for p in found if not os.path.basename(p).startswith("."))


def _list_local(root: str, name: str, nonce: str) -> list[str]:
    import fnmatch

    log = os.path.join(root, LOG)
    out = []
    for name_dir in _scandir(log):
        if not name_dir.startswith("name=") or not fnmatch.fnmatchcase(name_dir[5:], name):
            continue
        literal = not any(c in nonce for c in "*?[")
        nonce_dirs = [f"nonce={nonce}"] if literal else _scandir(os.path.join(log, name_dir))
        for nonce_dir in nonce_dirs:
            if not nonce_dir.startswith("nonce=") or not fnmatch.fnmatchcase(nonce_dir[6:], nonce):
                continue
            folder = os.path.join(log, name_dir, nonce_dir)
            out.extend(
                f"{folder}/{f}" for f in _scandir(folder) if f.endswith(".parquet") and not f.startswith(".")
            )
    return out


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


class CorruptSegment(ValueError):
    """A segment that cannot be read; the message names the file."""


def read_keys(fs: fsspec.AbstractFileSystem, path: str) -> dict[str, str]:
    """The ``{key: type}`` footer of one segment (reads the footer only)."""
    try:
        with fs.open(path, "rb") as f:
            meta = pq.read_metadata(f)
        raw = (meta.metadata or {}).get(KEYS_METADATA)
        if raw is None:
            raise CorruptSegment(f"segment {path} has no '{KEYS_METADATA.decode()}' footer: not a theseus segment")
        return json.loads(raw)
    except FileNotFoundError:
        raise
    except CorruptSegment:
        raise
    except Exception as e:
        raise CorruptSegment(f"corrupt or truncated segment {path}: {e}") from e


class FooterCache:
    """Footers by path; segments are immutable, so a cached footer never goes stale."""

    def __init__(self, fs: fsspec.AbstractFileSystem):
        self.fs = fs
        self._keys: dict[str, dict[str, str]] = {}

    def keys(self, paths: list[str]) -> dict[str, str]:
        """Union ``{key: type}`` over ``paths`` (int and float merge to float)."""
        missing = [p for p in paths if p not in self._keys]
        if missing:
            workers = 1 if len(missing) < 8 else (8 if rootfs.is_local(self.fs) else 32)
            with ThreadPoolExecutor(workers) as pool:
                for path, keys in zip(missing, pool.map(lambda p: read_keys(self.fs, p), missing)):
                    self._keys[path] = keys
        union: dict[str, str] = {}
        for p in paths:
            for k, t in self._keys[p].items():
                union[k] = merge_types(union[k], t) if k in union else t
        return union

    def forget(self, paths: list[str]) -> None:
        """Drop entries for retired segments."""
        for p in paths:
            self._keys.pop(p, None)
