"""The MANIFEST.json that seals an artifact folder: what it lists, writing it, checking against it.

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
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from theseus.store.fs import check_relative, hash_file, join, read_bytes, write_atomic
from theseus.store.layout import MANIFEST

FORMAT = "theseus.manifest/1"


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
