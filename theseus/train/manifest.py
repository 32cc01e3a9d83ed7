"""Files of an artifact folder: atomic publish, and writing, reading and verifying the MANIFEST.json that seals it.

A folder (local path or fsspec URL such as ``gs://bucket/prefix``) is complete
exactly when ``MANIFEST.json`` is present; its name and format are ``store/manifest.py``'s.
The manifest is written last and atomically: locally to a temporary name in the same
folder, fsync'd, then renamed; on object stores with one upload (an object is visible
only when its upload completes).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import fsspec

from theseus.store.manifest import MANIFEST, FileEntry, check_relative, encode, parse

__all__ = ["MANIFEST", "FileEntry", "check_relative", "exists", "hash_file", "is_local", "join", "local_path",
           "read_bytes", "read_many", "read_manifest", "remove_tree", "verify", "write_atomic", "write_manifest"]

_BLOCK = 16 << 20


def is_local(location: str) -> bool:
    """True when ``location`` is a plain path or a ``file://`` URL.

    >>> is_local("/tmp/x"), is_local("gs://bucket/x")
    (True, False)
    """
    protocol, _ = fsspec.core.split_protocol(location)
    return protocol in (None, "file", "local")


def local_path(location: str) -> str:
    """The absolute filesystem path of a local ``location``.

    >>> local_path("file:///tmp/x")
    '/tmp/x'
    """
    if not is_local(location):
        raise ValueError(f"{location} is not a local path")
    return os.path.abspath(fsspec.core.split_protocol(location)[1])


def join(location: str, *parts: str) -> str:
    """``location/part/...`` for a path or URL.

    >>> join("gs://b/run", "checkpoint", "index.json")
    'gs://b/run/checkpoint/index.json'
    """
    return "/".join([location.rstrip("/"), *(p.strip("/") for p in parts)])


def write_atomic(location: str, data: bytes) -> None:
    """Publish ``data`` at ``location`` whole or not at all.

    Locally: a unique temporary name in the same folder, fsync, rename, fsync
    of the folder. Elsewhere: one fsspec upload.

    >>> import tempfile; d = tempfile.mkdtemp()
    >>> write_atomic(d + "/a.json", b"{}"); open(d + "/a.json", "rb").read()
    b'{}'
    """
    from theseus.store import fs as rootfs

    fs, path = rootfs.open_root(location)
    rootfs.publish(fs, path, bytes(data))


def read_bytes(location: str) -> bytes:
    """The content of the file at ``location`` (path or URL).

    >>> import tempfile; d = tempfile.mkdtemp(); write_atomic(d + "/a", b"x"); read_bytes(d + "/a")
    b'x'
    """
    fs, path = fsspec.core.url_to_fs(location)
    return fs.cat_file(path)


def read_many(locations: list[str], threads: int = 16) -> list[bytes]:
    """The contents of several files, read concurrently (object stores are latency-bound).

    >>> import tempfile; d = tempfile.mkdtemp(); write_atomic(d + "/a", b"x"); read_many([d + "/a"])
    [b'x']
    """
    with ThreadPoolExecutor(max(1, min(threads, len(locations)))) as pool:
        return list(pool.map(read_bytes, locations))


def exists(location: str) -> bool:
    """Whether a file exists at ``location``.

    >>> exists("/nonexistent/MANIFEST.json")
    False
    """
    fs, path = fsspec.core.url_to_fs(location)
    return fs.exists(path)


def remove_tree(location: str) -> None:
    """Delete the folder at ``location`` and everything in it (no error if it is absent).

    >>> import tempfile; d = tempfile.mkdtemp(); write_atomic(d + "/x/a", b"1"); remove_tree(d + "/x")
    >>> exists(d + "/x/a")
    False
    """
    fs, path = fsspec.core.url_to_fs(location)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def hash_file(location: str) -> tuple[int, str]:
    """(size, sha256 hex) of the file at ``location``, streamed in blocks.

    >>> import tempfile; d = tempfile.mkdtemp(); write_atomic(d + "/a", b"")
    >>> hash_file(d + "/a")[0]
    0
    """
    fs, path = fsspec.core.url_to_fs(location)
    digest, size = hashlib.sha256(), 0
    with fs.open(path, "rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


def write_manifest(folder: str, entries: Iterable[FileEntry]) -> None:
    """Seal ``folder``: write ``MANIFEST.json`` listing ``entries``, atomically, last.

    >>> import tempfile; d = tempfile.mkdtemp(); write_atomic(d + "/a", b"x")
    >>> write_manifest(d, [FileEntry.of_bytes("a", b"x")]); sorted(read_manifest(d))
    ['a']
    """
    try:
        raw = encode(entries)
    except ValueError as e:
        raise ValueError(f"manifest of {folder}: {e}") from None
    write_atomic(join(folder, MANIFEST), raw)


def read_manifest(folder: str) -> dict[str, FileEntry]:
    """The files listed by ``folder``'s manifest, by relative path.

    Raises FileNotFoundError("incomplete checkpoint: no MANIFEST.json in ...") when
    the folder was never sealed (an interrupted save), ValueError when the
    manifest is malformed.

    >>> import tempfile; read_manifest(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    FileNotFoundError: incomplete checkpoint: no MANIFEST.json in ...
    """
    try:
        raw = read_bytes(join(folder, MANIFEST))
    except FileNotFoundError:
        raise FileNotFoundError(f"incomplete checkpoint: no {MANIFEST} in {folder}") from None
    try:
        return parse(raw)
    except ValueError as e:
        raise ValueError(f"malformed {MANIFEST} in {folder}: {e}") from None


def verify(folder: str, manifest: dict[str, FileEntry] | None = None, threads: int = 8) -> None:
    """Check every file listed in ``folder``'s manifest: present, same size, same sha256.

    Raises ValueError naming the first bad file.

    >>> import tempfile; d = tempfile.mkdtemp(); write_atomic(d + "/a", b"x")
    >>> write_manifest(d, [FileEntry.of_bytes("a", b"x")]); verify(d)
    """
    manifest = read_manifest(folder) if manifest is None else manifest

    def check(entry: FileEntry) -> str | None:
        where = join(folder, entry.path)
        try:
            size, digest = hash_file(where)
        except FileNotFoundError:
            return f"missing file {where} (listed in {MANIFEST})"
        if size != entry.size:
            return f"corrupt file {where}: size {size} != {entry.size} in {MANIFEST}"
        if digest != entry.sha256:
            return f"corrupt file {where}: sha256 {digest} != {entry.sha256} in {MANIFEST}"
        return None

    with ThreadPoolExecutor(threads) as pool:
        problems = [p for p in pool.map(check, manifest.values()) if p]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ValueError(problems[0] + more)
