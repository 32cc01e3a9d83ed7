"""Writing, reading and verifying the MANIFEST.json that seals an artifact folder.

A folder (local path or fsspec URL such as ``gs://bucket/prefix``) is complete
exactly when ``MANIFEST.json`` is present; its name and format are ``store/manifest.py``'s.
The manifest is written last and atomically (``store/fs.py``'s ``write_atomic``): locally
to a temporary name in the same folder, fsync'd, then renamed; on object stores with one
upload (an object is visible only when its upload completes). Only JSON is read back.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from theseus.store.fs import hash_file, join, read_bytes, write_atomic  # write_atomic: used by the examples
from theseus.store.manifest import MANIFEST, FileEntry, encode, parse

__all__ = ["MANIFEST", "FileEntry", "read_manifest", "verify", "write_atomic", "write_manifest"]


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
