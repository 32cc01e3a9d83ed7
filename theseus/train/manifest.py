"""Files of an artifact folder: atomic publish, and the MANIFEST.json that seals the folder.

A folder (local path or fsspec URL such as ``gs://bucket/prefix``) is complete
exactly when ``MANIFEST.json`` is present. The manifest lists every file of the
folder by relative path with its size and sha256, and is written last and
atomically: locally to a temporary name in the same folder, fsync'd, then renamed;
on object stores with one upload (an object is visible only when its upload
completes). Only JSON is read back, never pickles.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import fsspec

MANIFEST = "MANIFEST.json"
FORMAT = "theseus.manifest/1"
_BLOCK = 16 << 20


@dataclasses.dataclass(frozen=True)
class FileEntry:
    """One file of a folder: path relative to the folder, size in bytes, sha256 hex digest."""

    path: str
    size: int
    sha256: str

    @staticmethod
    def of_bytes(path: str, data: bytes | memoryview) -> FileEntry:
        """The entry for ``data`` stored at ``path``.

        >>> FileEntry.of_bytes("a.json", b"{}").size
        2
        """
        return FileEntry(path, memoryview(data).nbytes, hashlib.sha256(data).hexdigest())


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


def check_relative(path: str) -> str:
    """``path`` if it is a clean relative path inside a folder, else ValueError.

    >>> check_relative("config.yaml")
    'config.yaml'
    """
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in path:
        raise ValueError(f"{path!r} is not a relative path inside the folder")
    return path


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
    entries = sorted(entries, key=lambda e: e.path)
    seen = set()
    for e in entries:
        check_relative(e.path)
        if e.path in seen or e.path == MANIFEST:
            raise ValueError(f"manifest of {folder} lists {e.path!r} twice or lists itself")
        seen.add(e.path)
    body = {"format": FORMAT, "files": [dataclasses.asdict(e) for e in entries]}
    write_atomic(join(folder, MANIFEST), json.dumps(body, indent=1).encode())


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
        body = json.loads(raw)
        if body.get("format") != FORMAT:
            raise ValueError(f"unknown format {body.get('format')!r}")
        entries = [FileEntry(str(f["path"]), int(f["size"]), str(f["sha256"])) for f in body["files"]]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"malformed {MANIFEST} in {folder}: {e}") from None
    return {e.path: e for e in entries}


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
